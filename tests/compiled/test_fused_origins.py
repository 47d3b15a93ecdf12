"""What `kerneltrace explain` says about each kernel of the H200 compiled fixtures: this kernel, these
lines, these ops, this region (tests/fixtures/compiled/README.md says how they were made)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compiled.scoring import FIXTURES
from tracer.api import attribute_trace, explain_trace
from tracer.graph import build_graph
from tracer.join.fused_lines import DYNAMO_GRAPH, PROVENANCE
from tracer.model.origin import Attributions, Origin

SCRIPT = "capture_compiled.py"
TRANSFORMERS = Path(__file__).resolve().parents[2] / "build" / "src" / "transformers-5.17.0"


def _origins_by_kernel(attributions: Attributions) -> dict[str, list[Origin]]:
    table = attributions.trace.events
    found: dict[str, list[Origin]] = {}
    for row, origin_id in zip(attributions.gpu_rows, attributions.origin_ids):
        origin = attributions.origins[origin_id]
        mine = found.setdefault(table.name[row], [])
        if origin not in mine:
            mine.append(origin)
    return found


def _lines(origin: Origin) -> list[tuple[int, tuple[str, ...]]]:
    return [(f.line, f.ops) for f in origin.fused]


@pytest.fixture(scope="module")
def fused_cast_silu() -> Attributions:
    return attribute_trace(FIXTURES / "fused_cast_silu.json.gz", source=[FIXTURES])


def test_a_fused_kernel_names_each_line_it_fused_with_its_ops(fused_cast_silu):
    [origin] = _origins_by_kernel(fused_cast_silu)["triton_poi_fused__to_copy_mul_silu_0"]
    assert _lines(origin) == [(101, ("to", "mul")), (102, ("silu",)), (103, ("to",))]
    assert (origin.file, origin.line) == (SCRIPT, 101)  # the line with most of its work: cast and multiply
    assert origin.source == "y = x.to(torch.float32) * w  # cast and multiply: one line"
    assert origin.confidence == 1.0 and origin.answer == "exact"
    assert origin.evidence[0].startswith("triton_poi_fused__to_copy_mul_silu_0:1 of ctif4tpwdlow")
    region = origin.compiled
    assert region is not None and region.provenance == PROVENANCE
    assert (region.function, region.file, region.def_line, region.compile_id) == ("fused", SCRIPT, 100, "0/0")
    assert region.graph.endswith("ctif4tpwdlowhcpqa6kexxwpnubpznxvupxshjtfpjgawcgzsesy.py")
    # `main` was already running when profiling began: its line is not named (the alignment is loose)
    assert (region.call_function, region.call_line) == ("main", None)


def test_a_compiled_module_is_called_from_its_exact_line():
    attributions = attribute_trace(FIXTURES / "rmsnorm.json.gz", source=[FIXTURES])
    [origin] = _origins_by_kernel(attributions)["triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0"]
    assert _lines(origin) == [
        (119, ("to",)),
        (120, ("pow", "mean")),
        (121, ("add", "rsqrt", "mul")),
        (122, ("to", "mul")),
    ]
    assert origin.line == 121
    region = origin.compiled
    assert (region.function, region.call_line, region.call_source) == (
        "forward",
        126,
        "return (lambda h: module(h)), (x,)",
    )


def test_every_kernel_of_an_extern_op_takes_its_launch_lines():
    """mlp: the up projection (aten::mm), GELU between two casts (one Triton kernel), the down projection
    with the residual folded in (aten::addmm launches a GEMM, a split-K reduction and a copy of x)."""
    origins = _origins_by_kernel(attribute_trace(FIXTURES / "mlp.json.gz", source=[FIXTURES]))
    assert [_lines(o) for o in origins["triton_poi_fused__to_copy_gelu_0"]] == [
        [(138, ("float", "gelu", "to"))]
    ]
    assert [_lines(o) for o in origins["nvjet_sm90_tst_48x64_64x15_4x1_v_bz_TNN"]] == [[(137, ("linear",))]]
    launched = ["nvjet_sm90_tst_64x32_64x16_4x2_h_bx_splitK_TNT", "Memcpy DtoD (Device -> Device)"]
    launched += [k for k in origins if "splitKreduce_kernel" in k]
    assert len(launched) == 3
    for kernel in launched:
        [origin] = origins[kernel]
        assert (origin.line, origin.evidence[0].split(" of ")[0]) == (139, "extern_kernels.addmm:3")


def test_the_whole_pool_cast_fuses_into_the_gather():
    """The founding case compiled: Inductor fuses the FP8 pool's cast into the gather (no whole-pool
    cast is left), so the kernel names both lines."""
    origins = _origins_by_kernel(attribute_trace(FIXTURES / "kv_cast_gather.json.gz", source=[FIXTURES]))
    [origin] = origins["triton_poi_fused__to_copy_index_0"]
    assert _lines(origin) == [(148, ("to",)), (149, ("getitem",))]


def test_llama_compiled_whole_each_gemm_is_its_projection():
    """Sixteen aten::mm launches of one generated `call`: the k-th of a run is the k-th in the code."""
    attributions = attribute_trace(FIXTURES / "llama_whole.json.gz", source=[FIXTURES, TRANSFORMERS])
    lines = {
        (o.file.rsplit("/", 1)[-1], o.line)
        for o in attributions.origins
        if o.compiled is not None and o.evidence and o.evidence[0].startswith("extern_kernels.mm:")
    }
    llama = "modeling_llama.py"
    assert {
        (llama, 254),
        (llama, 255),
        (llama, 256),
        (llama, 280),
        (llama, 175),
        (llama, 122),
        (llama, 480),
    } == lines
    origins = _origins_by_kernel(attributions)
    layers = origins["triton_poi_fused__unsafe_view_mul_silu_8"]  # one kernel, launched once per layer
    assert sorted(o.evidence[0].split(" of ")[0] for o in layers) == [
        "triton_poi_fused__unsafe_view_mul_silu_8:18",
        "triton_poi_fused__unsafe_view_mul_silu_8:34",
    ]
    for silu in layers:
        # the two projections' outputs are read through views Inductor counts as theirs
        assert [(f.file, f.line, f.ops) for f in silu.fused] == [
            ("transformers/models/llama/modeling_llama.py", 175, ("linear", "linear", "mul")),
            ("transformers/activations.py", 103, ("silu",)),
        ]
    assert silu.source == "down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))"
    region = silu.compiled
    assert (region.function, region.call_line, region.call_source) == (
        "wrapper",
        171,
        "return compiled(tokens).logits",
    )


def test_cuda_graph_replays_of_compiled_code_take_their_kernels_lines():
    """mode="reduce-overhead": the kernel is replayed from a CUDA graph captured during warm-up (no
    capture in the trace); its name finds its launch. The graph's input copy is the calling line's."""
    analysis = explain_trace(FIXTURES / "rmsnorm_cudagraphs.json.gz", source=[FIXTURES])
    assert analysis.replay_fraction > 0.3 and analysis.replay_attributed_fraction == 1.0
    assert analysis.attributed_fraction == 1.0
    by_kernel = {f.kernel_short: f.origin for f in analysis.findings}
    replayed = by_kernel["triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0"]
    assert replayed.replay and [f.line for f in replayed.fused] == [119, 120, 121, 122]
    assert replayed.evidence[0].startswith("replayed from a CUDA graph of cfhf74cnscvjke")
    copy = next(o for k, o in by_kernel.items() if k.startswith("multi_tensor_apply_kernel"))
    assert (copy.line, copy.fused) == (126, ())
    assert copy.evidence[0].startswith("CUDA graph trees copied the inputs")
    assert any("CUDA graphs of compiled code: 3 replayed kernel(s)" in note for note in analysis.notes)


def test_stale_provenance_from_inductors_cache_is_not_used():
    """A real CPU run whose FX graph cache was filled by the same function in another file
    (/tmp/cap2.py): the provenance replayed from the cache names that file; Dynamo's graph of this
    run names the right lines, and is used instead."""
    stale = FIXTURES / "cpu_stale"
    [origin] = _origins_by_kernel(attribute_trace(stale / "fused_cast_silu.json.gz"))[
        "graph_0_cpp_fused__to_copy_mul_silu_0"
    ]
    assert _lines(origin) == [(101, ("to", "mul")), (102, ("silu",)), (103, ("to",))]
    assert origin.compiled.provenance == DYNAMO_GRAPH and origin.confidence == 0.95
    assert any("/tmp/cap2.py:9" in e and "not used" in e for e in origin.evidence)


def test_fused_kernels_have_bytes_from_their_buffers():
    analysis = explain_trace(FIXTURES / "fused_cast_silu.json.gz")
    [finding] = analysis.findings
    assert (
        finding.bytes_per_call == 256 * 1024 * 2 + 1024 * 4 + 256 * 1024 * 2
    )  # bf16 in, f32 weight, bf16 out
    assert finding.bytes_basis == "estimate" and finding.gbps is not None


def test_the_graph_draws_a_fused_kernel_once_with_an_edge_to_each_line():
    graph = build_graph(explain_trace(FIXTURES / "rmsnorm.json.gz", source=[FIXTURES]))
    [kernel] = [n for n, a in graph.nodes(data=True) if a["kind"] == "kernel"]
    fused = {graph.nodes[v]["label"]: a["ops"] for _, v, a in graph.out_edges(kernel, data=True)}
    assert fused == {
        "capture_compiled.py:119 [to]": ["to"],
        "capture_compiled.py:120 [pow, mean]": ["pow", "mean"],
        "capture_compiled.py:121 [add, rsqrt, mul]": ["add", "rsqrt", "mul"],
        "capture_compiled.py:122 [to, mul]": ["to", "mul"],
    }
    [parent] = graph.predecessors(next(iter(graph.predecessors(kernel))))
    assert graph.nodes[parent]["label"].startswith("Inductor graph 0/0")
