"""The join on CPU traces profiled here: exact lines of known casts, with and without stacks."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import torch
import trace_models
from torch.profiler import ProfilerActivity, profile, record_function

from tracer.join import attribute, sites_for_trace, trace_source_files
from tracer.load import load_trace
from tracer.model.origin import Attributions, Origin
from tracer.model.ranges import site_range_name

HERE = Path(__file__).resolve().parents[1]  # tests/: trace_models.py and the conftest that profiles it
STEPS_X_LAYERS = 2 * 3


def copies(result: Attributions) -> dict[tuple[str, str], list[Origin]]:
    """Origins of every aten::copy_ row, keyed by its (destination, source) dtypes."""
    table = result.trace.events
    found: dict[tuple[str, str], list[Origin]] = defaultdict(list)
    for row, origin_id in zip(result.op_rows, result.origin_ids):
        if row >= 0 and table.name[row] == "aten::copy_":
            types = table.args[row]["Input type"]
            found[(types[0], types[1])].append(result.origins[origin_id])
    return found


def lines_of(origins: list[Origin]) -> set[tuple[str | None, int | None]]:
    return {(Path(o.file).name if o.file else None, o.line) for o in origins}


@pytest.fixture(scope="module")
def stack_trace(stack_trace_path: Path):
    return load_trace(stack_trace_path)


def join_modes(trace) -> list[bool]:
    """The site join always; CallFrom too when this torch writes it (>= 2.14)."""
    return [False, True] if trace.meta.has_call_from else [False]


@pytest.mark.parametrize("use_call_from", [False, True], ids=["sites", "callfrom"])
def test_known_casts_resolve_to_their_lines(stack_trace, model_sites, model_lines, use_call_from) -> None:
    if use_call_from and not stack_trace.meta.has_call_from:
        pytest.skip(f"torch {torch.__version__} writes no CallFrom (>= 2.14 does)")
    result = attribute(stack_trace, model_sites, source_roots=[HERE], use_call_from=use_call_from)
    assert result.time_basis == "cpu"
    by_dtypes = copies(result)
    here = "trace_models.py"
    # x.to(bf16) twice on consecutive lines: 6 copies each (2 steps x 3 layers), told apart by line.
    to_bf16 = by_dtypes[("c10::BFloat16", "float")]
    assert len(to_bf16) == 2 * STEPS_X_LAYERS
    assert lines_of(to_bf16) == {(here, model_lines["first_to"]), (here, model_lines["second_to"])}
    assert sum(o.line == model_lines["first_to"] for o in to_bf16) == STEPS_X_LAYERS
    # `.float()` beside `.to(float64)` on one line: a.float(), b.to(f64), then .float() of that.
    assert lines_of(by_dtypes[("float", "c10::BFloat16")]) == {
        (here, model_lines["float_beside_to"]),
        (here, model_lines["cat"]),  # kv.float() inside the torch.cat(...)
    }
    assert lines_of(by_dtypes[("double", "c10::BFloat16")]) == {(here, model_lines["float_beside_to"])}
    assert lines_of(by_dtypes[("float", "double")]) == {(here, model_lines["float_beside_to"])}
    whole_pool = by_dtypes[("c10::BFloat16", "c10::Half")]
    assert lines_of(whole_pool) == {(here, model_lines["whole_pool"])}
    assert all(o.ranges == ("kv_gather",) for o in whole_pool)  # ProfilerStep#N is left out
    assert lines_of(by_dtypes[("c10::Half", "c10::BFloat16")]) == {(here, model_lines["store"])}
    exact = [o for (dst, src), origins in by_dtypes.items() if dst != src for o in origins]
    assert len(exact) == 8 * STEPS_X_LAYERS  # the eight casts of TwoCasts.forward
    assert all(o.confidence == 1.0 and o.evidence for o in exact)
    assert {o.source for o in to_bf16} == {
        "a = x.to(torch.bfloat16)  # cast:first_to",
        "b = x.to(torch.bfloat16)  # cast:second_to",
    }
    if use_call_from:
        assert all("CallFrom" in o.evidence[0] for o in exact)
    else:
        first = next(o for o in to_bf16 if o.line == model_lines["first_to"])
        assert "in this run of `forward` (`.to` call 1 of 5): the only line that fits" in first.evidence[0]
        assert first.site_id is not None and first.rule == "KT101"
    # cat and the subscript store: ops that run without a copy kernel of their own.
    by_outer_op = defaultdict(set)
    for origin in result.origins:
        if origin.ops:
            by_outer_op[origin.ops[0]].add(origin.line)
    assert by_outer_op["aten::cat"] == {model_lines["cat"]}
    assert by_outer_op["aten::index_put_"] == {model_lines["store"]}


def test_module_call_line_comes_from_the_source(stack_trace, model_sites, model_lines) -> None:
    """`self.proj(c)` is no static site: the join finds it as the 1st module call of the source."""
    result = attribute(stack_trace, model_sites, source_roots=[HERE], use_call_from=False)
    linear = {o for o in result.origins if o.ops[:1] == ("aten::linear",)}
    assert {o.line for o in linear} == {model_lines["proj"]}
    assert all(o.confidence == 1.0 for o in linear)
    assert all("(module call 1 of 1): the only line that fits" in o.evidence[0] for o in linear)
    # Without source roots the join cannot read the function: it says so instead of guessing.
    blind = attribute(stack_trace, model_sites, use_call_from=False)
    assert {o.line for o in blind.origins if o.ops[:1] == ("aten::linear",)} == {None}


def test_three_layers_share_origins(stack_trace, model_sites, model_lines) -> None:
    result = attribute(stack_trace, model_sites, source_roots=[HERE], use_call_from=False)
    first_to = {i for i, o in enumerate(result.origins) if o.line == model_lines["first_to"]}
    # aten::empty_strided and aten::copy_ (the two leaf ops of one .to), no matter the layer or step.
    assert len(first_to) == 2
    assert len(result.origins) < 40
    frames = next(o for o in result.origins if o.line == model_lines["first_to"]).frames
    assert [f.label for f in frames if f.file == "nn.Module"] == ["nn.Module: Stack", "nn.Module: TwoCasts"]


def test_without_stack_sites_are_ranked_not_matched(
    nostack_trace_path: Path, model_sites, model_lines
) -> None:
    trace = load_trace(nostack_trace_path)
    assert trace.meta.with_stack is False
    result = attribute(trace, model_sites, source_roots=[HERE])
    whole_pool = copies(result)[("c10::BFloat16", "c10::Half")]
    assert len(whole_pool) == STEPS_X_LAYERS
    for origin in whole_pool:
        assert origin.frames == ()
        assert origin.confidence < 0.5
        assert origin.evidence[0] == "a ranking, not a match:"
        assert f"trace_models.py:{model_lines['whole_pool']}" in origin.candidates
        assert origin.ranges == ("kv_gather",)
    cats = [
        result.origins[o]
        for r, o in zip(result.op_rows, result.origin_ids)
        if trace.events.name[r] == "aten::cat"
    ]
    assert {o.line for o in cats} == {model_lines["cat"]}  # the only torch.cat site
    assert all(o.confidence < 0.5 for o in cats)


def test_site_range_names_the_line_without_stacks(tmp_path: Path, model_sites, model_lines) -> None:
    site = next(s for s in model_sites if s.line == model_lines["whole_pool"])
    pool = torch.randn(64, 32, dtype=torch.float16)
    path = tmp_path / "ranged.json"
    with (
        profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof,
        record_function(site_range_name(site)),
    ):
        pool.to(torch.bfloat16)
    prof.export_chrome_trace(str(path))
    result = attribute(load_trace(path), model_sites)
    (origin,) = copies(result)[("c10::BFloat16", "c10::Half")]
    assert (origin.file, origin.line, origin.site_id, origin.confidence) == (
        site.path,
        site.line,
        site.id,
        1.0,
    )
    assert origin.evidence == (f"inside kerneltrace site range kt:site:{site.id}",)


def test_backward_ops_take_their_forward_line(tmp_path: Path, model_lines) -> None:
    path = tmp_path / "train.json"
    trace_models.profile_training_step(str(path))
    trace = load_trace(path)
    assert trace.fwdbwd  # autograd's flows were bound to ops
    sites = sites_for_trace(trace, [HERE])
    result = attribute(trace, sites, source_roots=[HERE])
    table = trace.events
    backward = [
        result.origins[o]
        for r, o in zip(result.op_rows, result.origin_ids)
        if table.name[r] == "aten::copy_" and any("ToCopyBackward0" in op for op in result.origins[o].ops)
    ]
    assert backward
    assert {o.line for o in backward} == {model_lines["trained"]}
    assert all(o.evidence[0].startswith("backward of aten::_to_copy") for o in backward)


def test_sites_for_trace_scans_only_named_files(stack_trace) -> None:
    files = trace_source_files(stack_trace, [HERE])
    # conftest.py: its fixture's frame was on the stack when the profiler started.
    assert files == [HERE / "conftest.py", HERE / "trace_models.py"]
    sites = sites_for_trace(stack_trace, [HERE])
    assert "trace_models.py" in {Path(s.path).name for s in sites}
    assert trace_source_files(stack_trace, [HERE / "nowhere"]) == []
