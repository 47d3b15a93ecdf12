"""Reading what Inductor leaves: the structured trace (TORCH_TRACE), generated modules, kernel names."""

from __future__ import annotations

import gzip
import re

from tests.compiled.scoring import FIXTURES
from tracer.join.compiled_lines import kernel_ops
from tracer.load import load_trace
from tracer.load.compiled_sidecars import CompiledSources, is_generated_module
from tracer.load.generated_code import parse_generated_code
from tracer.load.torch_trace import keep_records, read_compiled_graphs

H200_LOG = FIXTURES / "torch_trace.log.gz"


def _graph_keys(case: str) -> set[str]:
    """The FX graph keys a trace's ``## Call CompiledFxGraph <key> ##`` ranges name."""
    names = set(load_trace(FIXTURES / f"{case}.json.gz").events.name)
    return {m[1] for n in names if (m := re.match(r"^## Call CompiledFxGraph (\w+) ##$", n))}


def test_the_structured_trace_holds_each_compiled_graph_with_its_provenance():
    graphs = read_compiled_graphs([H200_LOG])
    assert [g.function for g in graphs] == ["fused", "forward", "forward", "keys", "wrapper", "forward"]
    assert all(g.has_provenance for g in graphs)
    for case, graph in zip(
        ("fused_cast_silu", "rmsnorm", "mlp", "kv_cast_gather", "llama_whole", "rmsnorm_cudagraphs"), graphs
    ):
        assert _graph_keys(case) == {graph.fx_key}
    llama = graphs[4]
    assert [launch.handle.rsplit(":", 1)[1] for launch in llama.launches] == [str(i) for i in range(1, 38)]
    assert sum(launch.op_name == "aten::mm" for launch in llama.launches) == 16
    assert llama.launches[12].op_name == "aten::_scaled_dot_product_cudnn_attention"
    fused = graphs[0]
    [launch] = fused.launches
    assert launch.stacks[0][-1].code == "return z.to(dtype)"
    assert set(launch.source_nodes) == {"to", "y", "z", "to_1"}
    assert (fused.nodes["y"].line, fused.nodes["y"].op, fused.nodes["z"].op) == (101, "mul", "silu")
    assert launch.arguments[:3] == (("in_ptr0", "*bf16"), ("in_ptr1", "*fp32"), ("out_ptr0", "*bf16"))
    assert fused.compiled_from[-1].function == "fused"


def test_the_kept_records_are_a_small_structured_trace_that_reads_the_same(tmp_path):
    kept = tmp_path / "t.torch_trace.log.gz"
    assert keep_records(H200_LOG, kept) > 0
    assert kept.stat().st_size < H200_LOG.stat().st_size / 2
    before, after = read_compiled_graphs([H200_LOG]), read_compiled_graphs([kept])
    assert [(g.module, g.fx_key, g.launches, g.nodes) for g in before] == [
        (g.module, g.fx_key, g.launches, g.nodes) for g in after
    ]


def test_a_generated_module_alone_names_each_launchs_source_nodes():
    module = (
        FIXTURES / "generated" / "llama_whole" / "cna6bpekovv5j6kgxvj2ijv6mxxxy7pndwtcdctvnht2hq4734nc.py"
    )
    code = parse_generated_code(module.read_text())
    assert len(code.launches) == 37
    # an extern op's comment also lists the nodes that made its inputs: its own node is the last
    assert code.launches[1].source_nodes == ("linear",)
    assert code.launches[0].source_nodes[:3] == ("inputs_embeds", "hidden_states", "pow_1")
    cpp = FIXTURES / "cpu" / "generated" / "fused_cast_silu"
    [launch] = parse_generated_code(next(cpp.glob("*.py")).read_text()).launches
    assert launch.kernel == "cpp_fused__to_copy_mul_silu_0" and launch.source_nodes == ()  # C++: no comments
    assert [name for name, _ in launch.arguments] == ["in_ptr0", "in_ptr1", "out_ptr2"]


def test_cuda_graph_partitions_are_spliced_into_call():
    module = (
        FIXTURES
        / "generated"
        / "rmsnorm_cudagraphs"
        / "cfhf74cnscvjkemo7fl2b2743d7eztk77nhevvdpgsottgoi4odk.py"
    )
    [launch] = parse_generated_code(module.read_text()).launches  # in partition_0, called by call
    assert launch.handle == "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0:1"


def test_kernel_names_spell_their_aten_ops():
    assert kernel_ops("triton_poi_fused__to_copy_mul_silu_0") == ("_to_copy", "mul", "silu")
    assert kernel_ops("triton_per_fused__softmax_exp_prepare_softmax_online_sub_1") == (
        "_softmax",
        "exp",
        "prepare_softmax_online",
        "sub",
    )
    assert kernel_ops("cpp_fused__unsafe_view_mul_silu_5") == ("_unsafe_view", "mul", "silu")
    assert kernel_ops("extern_kernels.addmm") == ("addmm",)


def test_generated_modules_are_recognised_by_their_cache_name():
    assert is_generated_module(
        "/tmp/torchinductor_root/ti/ctif4tpwdlowhcpqa6kexxwpnubpznxvupxshjtfpjgawcgzsesy.py"
    )
    assert not is_generated_module("transformers/models/llama/modeling_llama.py")


def test_a_damaged_sidecar_costs_its_records_not_the_explain(tmp_path):
    data = H200_LOG.read_bytes()
    (tmp_path / "torch_trace.log.gz").write_bytes(data[: len(data) // 3])  # truncated gzip
    (tmp_path / "torch_trace-2.log").write_text("not a structured trace\n")
    sources = CompiledSources(tmp_path / "trace.json.gz")
    graphs = sources.graphs()  # whatever came before the cut, no exception
    assert all(g.module for g in graphs)
    assert gzip.decompress(data)  # the fixture itself is whole
