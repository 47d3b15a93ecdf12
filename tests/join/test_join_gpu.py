"""The join on real H200 traces of transformers 5.17.0 (torch 2.11: no CallFrom, so the site join)."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest

from tracer.join import attribute, sites_for_trace
from tracer.load import load_trace
from tracer.model.events import NONE

LLAMA = "transformers/models/llama/modeling_llama.py"
DEEPSEEK = "transformers/models/deepseek_v3/modeling_deepseek_v3.py"
TO_COPY = ("aten::to", "aten::_to_copy", "aten::copy_")


def joined(shared_gpu_traces: Path, transformers_src: Path, name: str):
    trace = load_trace(shared_gpu_traces / name)
    sites = sites_for_trace(trace, [transformers_src])
    return attribute(trace, sites, source_roots=[transformers_src])


@pytest.fixture(scope="module")
def llama(shared_gpu_traces: Path, transformers_src: Path):
    return joined(shared_gpu_traces, transformers_src, "hf_llama_generate_stack.json.gz")


@pytest.fixture(scope="module")
def deepseek(shared_gpu_traces: Path, transformers_src: Path):
    return joined(shared_gpu_traces, transformers_src, "hf_deepseekv3_generate_stack.json.gz")


def casts(found: Counter) -> Counter:
    """Only the kernels of `.to()`-style casts among those of one line."""
    return Counter({key: n for key, n in found.items() if key[1] == TO_COPY})


def kernels_by_line(result) -> dict[tuple[str, int], Counter]:
    """(file, line) -> Counter of (kernel name, op chain tail, launching op's input types)."""
    table = result.trace.events
    found: dict[tuple[str, int], Counter] = defaultdict(Counter)
    for gpu, op, origin_id in zip(result.gpu_rows, result.op_rows, result.origin_ids):
        origin = result.origins[origin_id]
        if origin.line is None:
            continue
        types = tuple(table.args[op]["Input type"][:2]) if op != NONE and table.args[op] else ()
        found[(origin.file, origin.line)][(table.name[gpu], origin.ops[-3:], types)] += 1
    return found


def test_llama_rmsnorm_casts_on_their_two_lines(llama) -> None:
    """LlamaRMSNorm.forward (def line 62): line 64 casts bf16 -> fp32, line 67 casts back."""
    lines = kernels_by_line(llama)
    up, down = casts(lines[(LLAMA, 64)]), casts(lines[(LLAMA, 67)])
    # 12 forward passes x (8 layers x 2 norms + the final norm) = 204 of each.
    assert sum(up.values()) == sum(down.values()) == 204
    assert {(ops, types) for _, ops, types in up} == {(TO_COPY, ("float", "c10::BFloat16"))}
    assert {(ops, types) for _, ops, types in down} == {(TO_COPY, ("c10::BFloat16", "float"))}
    assert all("unrolled_elementwise_kernel" in kernel for kernel, _, _ in up)
    assert all("vectorized_elementwise_kernel" in kernel for kernel, _, _ in down)
    origin = next(o for o in llama.origins if (o.file, o.line) == (LLAMA, 64))
    assert origin.source == "hidden_states = hidden_states.to(torch.float32)"
    assert origin.confidence == 1.0
    assert origin.evidence[0] == (
        "call 1 of 9 in this run of `forward` (`.to` call 1 of 2): "
        "the only line that fits the run's whole call sequence"
    )
    assert origin.frames[-1].label == "<built-in>: method to of Tensor object"
    assert origin.frames[-2].label == f"{LLAMA}(62): forward"


def test_llama_cat_sites(llama) -> None:
    lines = kernels_by_line(llama)
    # rotate_half's torch.cat: twice per attention (q and k), 8 layers x 12 passes.
    rotate_half = lines[(LLAMA, 134)]  # return torch.cat((-x2, x1), dim=-1)
    assert sum(n for (_, ops, _), n in rotate_half.items() if ops == ("aten::cat",)) == 192
    assert {ops for _, ops, _ in rotate_half} == {("aten::cat",), ("aten::neg",)}
    # DynamicLayer.update: keys on line 146, values on line 147, once per layer per pass.
    assert sum(lines[("transformers/cache_utils.py", 146)].values()) == 96
    assert sum(lines[("transformers/cache_utils.py", 147)].values()) == 96


def test_llama_non_cast_kernels_get_lines_from_the_source(llama) -> None:
    """GEMMs, norms and operators: the k-th call of a kind in a run of a function, found in its source."""
    lines = kernels_by_line(llama)

    def ops_at(line: int) -> set[str]:
        return {ops[0] for _, ops, _ in lines[(LLAMA, line)]}

    # LlamaAttention.forward (def line 243): q, k, v and o projections, each a module call.
    for line in (254, 255, 256, 280):
        assert ops_at(line) == {"aten::linear"}
        assert sum(lines[(LLAMA, line)].values()) == 96  # 8 layers x 12 passes
    # LlamaMLP: gate, up and down projections are all on line 175, with the SiLU's product.
    mlp_ops = {
        op
        for op, o in zip(llama.op_rows, llama.origin_ids)
        if (llama.origins[o].file, llama.origins[o].line) == (LLAMA, 175)
    }
    assert sum(llama.trace.events.name[op] in ("aten::mm", "aten::addmm") for op in mlp_ops) == 3 * 96
    # LlamaRMSNorm.forward, line by line.
    assert ops_at(65) == {"aten::pow", "aten::mean"}
    assert ops_at(66) == {"aten::add", "aten::rsqrt", "aten::mul"}
    assert ops_at(67) == {"aten::to", "aten::mul"}
    origin = next(o for o in llama.origins if (o.file, o.line) == (LLAMA, 254))
    assert origin.confidence == 1.0
    assert "in this run of `forward` (module call 1 of 4): the only line that fits" in origin.evidence[0]
    assert origin.source == "query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)"


def test_most_gpu_time_has_a_line(llama, deepseek) -> None:
    for result, floor in ((llama, 0.98), (deepseek, 0.95)):
        table = result.trace.events
        total = with_line = 0
        for gpu, origin_id in zip(result.gpu_rows, result.origin_ids):
            total += table.dur_ns[gpu]
            if result.origins[origin_id].line is not None:
                with_line += table.dur_ns[gpu]
        assert with_line / total >= floor


def test_deepseek_lines(deepseek) -> None:
    lines = kernels_by_line(deepseek)
    # DeepseekV3RMSNorm.forward: the fp32 cast on line 49, back to bf16 on line 52.
    up, down = casts(lines[(DEEPSEEK, 49)]), casts(lines[(DEEPSEEK, 52)])
    assert sum(up.values()) == sum(down.values()) == 204
    assert {types for _, _, types in up} == {("float", "c10::BFloat16")}
    # The router: F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32)).
    router = casts(lines[(DEEPSEEK, 146)])
    assert sum(router.values()) == 72
    assert {types for _, _, types in router} == {("float", "c10::BFloat16")}
    # MLA: the two halves of key_states written by .copy_ on lines 434 and 435.
    assert sum(lines[(DEEPSEEK, 434)].values()) == sum(lines[(DEEPSEEK, 435)].values()) == 48


def test_every_launched_kernel_has_a_line_or_a_reason(llama, deepseek) -> None:
    for result in (llama, deepseek):
        table = result.trace.events
        with_ext = 0
        for gpu, origin_id in zip(result.gpu_rows, result.origin_ids):
            if table.ext_id[gpu] == NONE:
                continue
            with_ext += 1
            origin = result.origins[origin_id]
            assert not origin.replay
            assert origin.file is not None  # at least the user's file and function
            assert origin.line is not None or origin.evidence, origin
        assert with_ext == len(result)  # no graph replays in these traces
        # Every copy/cat kernel of the model's own files gets a line.
        for origin in result.origins:
            if origin.file in (LLAMA, DEEPSEEK) and origin.ops[:1] in (("aten::to",), ("aten::cat",)):
                assert origin.line is not None, origin


def test_origins_are_deduplicated_across_layers(llama) -> None:
    assert len(llama.origins) < 400  # 4,620 GPU activities
    assert len(set(llama.origins)) == len(llama.origins)
    norm_origins = {i for i, o in enumerate(llama.origins) if (o.file, o.line) == (LLAMA, 64)}
    # Decoder layers (prefill and decode paths) and the final norm: three contexts, not 8 x 12.
    assert len(norm_origins) <= 4
