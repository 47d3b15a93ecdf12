"""Steps cut by --window/--steps are left out and said so; a step definition that contradicts the
layer marks (--step-range on a layer range, --layers against the trace's own count) is said, and
the counts worded as approximate, never printed beside a per-layer claim as if both were true."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.steps.conftest import CORPUS
from tracer.api import explain_trace
from tracer.load import TraceWindow

RANGES_78 = CORPUS / "decode_step_range_78l.json.gz"
PROFILER_6 = CORPUS / "profilerstep_6l.json.gz"


def spans_ms(path, name_prefix: str) -> list[tuple[float, float]]:
    """(start, end) in ms after the trace's first timestamp of each range whose name starts so."""
    events = json.loads(gzip.decompress(Path(path).read_bytes()))["traceEvents"]
    first = min(e["ts"] for e in events if e.get("ph") == "X")
    return sorted(
        ((e["ts"] - first) / 1e3, (e["ts"] + e["dur"] - first) / 1e3)
        for e in events
        if e.get("ph") == "X" and str(e.get("name", "")).startswith(name_prefix)
    )


def window_cutting(spans: list[tuple[float, float]], first: int, last: int) -> tuple[TraceWindow, int]:
    """A window from the middle of step `first` to the middle of step `last`, and how many steps lie
    wholly inside it (the truth: the steps the script's ranges mark)."""
    start = (spans[first][0] + spans[first][1]) / 2
    end = (spans[last][0] + spans[last][1]) / 2
    inside = sum(1 for a, b in spans if a >= start and b <= end)
    return TraceWindow(start_ms=start, end_ms=end), inside


@pytest.mark.parametrize("methods", [None, ("period",)], ids=["range", "kernel-period"])
def test_a_window_cutting_two_steps_leaves_them_out_and_says_so(methods) -> None:
    window, inside = window_cutting(spans_ms(RANGES_78, "decode_step"), 2, 7)
    assert inside == 4
    analysis = explain_trace(RANGES_78, window=window, step_methods=methods)
    assert analysis.steps == inside
    left_out = [line for line in analysis.step_evidence if line.endswith("left out")]
    assert left_out, analysis.step_evidence
    gelu = next(f for f in analysis.findings if f.kernel == "aten::gelu")
    assert gelu.calls_per_step == 78 and gelu.invariant == "78 calls/step = once per layer (78 layers)"


def test_profiler_steps_cut_by_a_window_are_left_out() -> None:
    window, inside = window_cutting(spans_ms(PROFILER_6, "ProfilerStep#"), 0, 3)
    analysis = explain_trace(PROFILER_6, window=window)
    assert analysis.steps == inside == 2
    assert sum("left out" in line for line in analysis.step_evidence) == 2
    assert any("holds" in line and "of the 6 layers" in line for line in analysis.step_evidence)


def test_steps_option_loads_whole_profiler_steps() -> None:
    analysis = explain_trace(PROFILER_6, window=TraceWindow.parse(steps="2-3"))
    assert analysis.steps == 2
    assert not any("left out" in line for line in analysis.step_evidence)


def test_a_step_range_naming_the_layers_is_said_to_be_impossible() -> None:
    analysis = explain_trace(RANGES_78, step_range="layers.")
    assert analysis.steps == 780 and not analysis.steps_exact
    assert any("less than one set of layers, which no step can be" in line for line in analysis.step_evidence)
    gelu = next(f for f in analysis.findings if f.kernel == "aten::gelu")
    assert gelu.invariant.startswith("~1 call/step")
    assert any("calls/step are approximate" in note for note in analysis.notes)


def test_a_layer_count_against_the_trace_marks_is_said() -> None:
    analysis = explain_trace(RANGES_78, layers=61)
    assert analysis.steps == 10 and analysis.layers == 61
    assert "61 layers (--layers) but the trace marks 78 (ranges layers.N)" in analysis.step_evidence
    gelu = next(f for f in analysis.findings if f.kernel == "aten::gelu")
    assert gelu.invariant == "78 calls/step: not a multiple of the 61 layers"


def test_the_layer_period_is_never_taken_for_the_step() -> None:
    # The case: 78 identical layers in the caller's own decode_step ranges gave 780 steps.
    for methods in (None, ("period",)):
        analysis = explain_trace(RANGES_78, step_methods=methods)
        assert analysis.steps == 10, (methods, analysis.step_evidence)
    forced = explain_trace(CORPUS / "no_markers_78l.json.gz", layers=78)
    assert forced.steps == 6
    assert any("each repeat holds all 78 layers (--layers)" in line for line in forced.step_evidence)
