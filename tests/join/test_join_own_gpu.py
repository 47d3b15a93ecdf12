"""The join on our own H200 captures (tests/fixtures/gpu): the founding bug, its fix, graph replays."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tracer.join import attribute, sites_for_trace
from tracer.load import load_trace
from tracer.static import scan

MODEL = "examples/glm5_kv_cast/model.py"


def time_by_location(result) -> Counter:
    table = result.trace.events
    shares: Counter = Counter()
    for gpu, origin_id in zip(result.gpu_rows, result.origin_ids):
        shares[result.origins[origin_id].location] += table.dur_ns[gpu]
    total = sum(shares.values())
    return Counter({location: ns / total for location, ns in shares.items()})


@pytest.fixture(scope="module")
def whole_cast(own_gpu_traces: Path, repo_root: Path):
    trace = load_trace(own_gpu_traces / "glm5_cast_whole_stack.json.gz")
    return attribute(trace, sites_for_trace(trace, [repo_root]), source_roots=[repo_root])


def test_the_whole_pool_cast_is_line_209(whole_cast) -> None:
    shares = time_by_location(whole_cast)
    (top, share), *_ = shares.most_common(1)
    assert top == f"{MODEL}:209" and share > 0.85
    origin = next(o for o in whole_cast.origins if o.location == f"{MODEL}:209")
    assert origin.source == "k = self.pool.get_key_buffer(layer_id).to(q.dtype)"
    assert origin.confidence == 1.0 and origin.rule == "KT101"
    assert origin.ops == ("aten::to", "aten::_to_copy", "aten::copy_")
    assert sum(share for location, share in shares.items() if ":" in location) > 0.99


def test_branches_pick_the_projection_lines(whole_cast) -> None:
    """MLA.forward skips `self.indexer(...)` (an `if` not taken here): 3 module calls of 4 in source."""
    lines = {o.line for o in whole_cast.origins if o.file == MODEL and o.ops[:1] == ("aten::linear",)}
    assert {280, 285, 287} <= lines and 284 not in lines
    q_proj = next(o for o in whole_cast.origins if o.location == f"{MODEL}:285")
    assert q_proj.confidence == 1.0
    assert "(module call 2 of 3): the only line that fits" in q_proj.evidence[0]


def test_the_fix_moves_the_cast_to_line_214(own_gpu_traces: Path, repo_root: Path) -> None:
    trace = load_trace(own_gpu_traces / "glm5_gather_then_cast_stack.json.gz")
    result = attribute(trace, sites_for_trace(trace, [repo_root]), source_roots=[repo_root])
    casts = {o.location for o in result.origins if o.ops == ("aten::to", "aten::_to_copy", "aten::copy_")}
    assert f"{MODEL}:214" in casts and f"{MODEL}:209" not in casts


def test_without_stacks_line_209_is_ranked_first(own_gpu_traces: Path, repo_root: Path) -> None:
    trace = load_trace(own_gpu_traces / "glm5_cast_whole_nostack.json.gz")
    sites = scan([repo_root / "examples" / "glm5_kv_cast"]).sites
    result = attribute(trace, sites, source_roots=[repo_root])
    top = max(
        set(result.origin_ids),
        key=lambda i: sum(
            result.trace.events.dur_ns[g] for g, o in zip(result.gpu_rows, result.origin_ids) if o == i
        ),
    )
    origin = result.origins[top]
    assert origin.frames == () and origin.confidence < 0.5
    assert origin.candidates[0].endswith("model.py:209")
    assert origin.evidence[0] == "a ranking, not a match:"


def test_graph_replays_are_labelled_never_given_a_line(own_gpu_traces: Path, repo_root: Path) -> None:
    trace = load_trace(own_gpu_traces / "cudagraph_decode_stack.json.gz")
    result = attribute(trace, sites_for_trace(trace, [repo_root]), source_roots=[repo_root])
    table = trace.events
    replayed = [result.origins[o] for o in result.origin_ids if result.origins[o].replay]
    assert len(replayed) == 4 * 242  # 4 cudaGraphLaunch, 242 kernels each
    assert all(o.line is None and o.file is None for o in replayed)
    assert all(o.evidence[0].startswith("replayed from a CUDA graph (cudaGraphLaunch)") for o in replayed)
    replay_rows = [g for g, o in zip(result.gpu_rows, result.origin_ids) if result.origins[o].replay]
    assert all(table.ext_id[g] in (-1, 0) for g in replay_rows)
    assert all(op == -1 for op, o in zip(result.op_rows, result.origin_ids) if result.origins[o].replay)


def test_site_ranges_give_line_209_without_stacks_on_torch_211(own_gpu_traces: Path) -> None:
    """`kerneltrace profile` on the H200 (torch 2.11: no CallFrom, no with_stack): the site ranges,
    torch's `_RecordFunctionFast` filed as cpu_ops, pin the whole-pool cast to its exact line with
    no scan at all, and the ranges are read as ranges, not as the launching ops."""
    from tracer.model.events import Cat

    trace = load_trace(own_gpu_traces / "glm5_cast_whole_sites.json.gz")
    table = trace.events
    ours = [r for r in range(len(table)) if table.name[r].startswith("kt:")]
    ranges = Counter(table.name[r].split("@")[0] for r in ours)
    assert ranges == {
        "kt:site:278e0bca90": 156,
        "kt:site:b5cf767001": 156,
        "kt:fn:DecodeModel.decode_step": 2,
    }
    assert {Cat(table.cat[r]) for r in ours} == {Cat.USER_ANNOTATION}
    assert not any(table.cat[r] == Cat.PYTHON_FUNCTION for r in range(len(table)))
    result = attribute(trace, [])
    shares = time_by_location(result)
    assert shares[f"{MODEL}:209"] > 0.79
    origin = next(o for o in result.origins if o.location == f"{MODEL}:209")
    assert origin.confidence == 1.0 and origin.frames == ()
    assert origin.ops == ("aten::to", "aten::_to_copy", "aten::copy_")
    assert origin.ranges[-1] == "kt:site:278e0bca90@examples/glm5_kv_cast/model.py:209"
    calls = sum(1 for o in result.origin_ids if result.origins[o].location == f"{MODEL}:209")
    assert calls == 2 * 78  # 2 profiled steps x 78 layers


def test_work_launched_before_the_profiler_started_is_named_so(own_gpu_traces: Path) -> None:
    """The H200 was still running warm-up steps when `kerneltrace profile` started recording: 593
    kernels in the trace have no launch in it (their correlation ids precede the first recorded one)."""
    from tracer.explain import analyse
    from tracer.model.origin import BEFORE_TRACE_LABEL

    result = attribute(load_trace(own_gpu_traces / "glm5_cast_whole_sites.json.gz"), [])
    early = [i for i, o in enumerate(result.origin_ids) if result.origins[o].before_trace]
    assert len(early) == 593
    analysis = analyse(result, layers=78)
    cast = "unrolled_elementwise_kernel<direct_copy_kernel_cuda>"
    (finding,) = [f for f in analysis.findings if f.origin.before_trace and f.kernel_short == cast]
    assert finding.origin.key == BEFORE_TRACE_LABEL and finding.calls == 12
    assert analysis.findings[1] is finding  # second only to the cast at model.py:209
    assert any(n.startswith("7.2% of GPU time ran work launched before the profiler") for n in analysis.notes)
