"""Share of compiled-kernel time attributed to the right user lines, on 6 H200 and 5 CPU compiled runs.

The truth: for the capture script's cases, by construction (`truth_h200.txt`, `truth_cpu.txt`: the
lines of tests/fixtures/compiled/capture_compiled.py each fused op is on); for the transformers Llama
compiled whole, Inductor's own provenance stacks, read by `scoring.provenance_truth` with its own
parsing and matched to kernels by launch order, not by `tracer.join.compiled`. Each case is scored
with what `kerneltrace explain` would find beside the trace, by the best record available:
- "provenance": the structured trace with Inductor's provenance (and the generated modules);
- "dynamo graph": the structured trace without the provenance artifacts (source nodes + Dynamo's graph);
- "generated module": the generated module alone, its source-node names placed on the source;
- "trace only": nothing beside the trace, the kernels' names placed on the source.
"""

from __future__ import annotations

import pytest

from tests.compiled.scoring import (
    CPU_CASES,
    H200_CASES,
    LEVELS,
    confidence_check,
    expected_lines,
    score_case,
)

TARGET = 0.95


def _score(device: str, case: str, tmp_path, level: str):
    return score_case(device, case, tmp_path, level)[0]


@pytest.mark.parametrize(
    ("device", "case"), [("h200", c) for c in H200_CASES] + [("cpu", c) for c in CPU_CASES]
)
def test_compiled_kernel_time_is_on_the_right_lines_with_inductors_provenance(device, case, tmp_path):
    result = _score(device, case, tmp_path, "provenance")
    assert result.total_ns > 0
    assert result.share >= TARGET, result.misses[:5]


CAPTURE_CASES = [c for c in H200_CASES if c != "llama_whole"]


@pytest.mark.parametrize("level", ["dynamo graph", "generated module", "trace only"])
@pytest.mark.parametrize(
    ("device", "case"), [("h200", c) for c in CAPTURE_CASES] + [("cpu", c) for c in CPU_CASES[:4]]
)
def test_functions_and_modules_compiled_alone_need_no_provenance(device, case, level, tmp_path):
    """The capture script's cases compile one function (or module) each: its own source places every
    fused op, from the generated module's source-node names or from the kernels' names alone."""
    result = _score(device, case, tmp_path, level)
    assert result.share >= TARGET, result.misses[:5]


def test_a_model_compiled_whole_needs_dynamos_graph(tmp_path):
    """Llama compiled whole inlines every module into one graph: without provenance, Dynamo's graph
    still names each source node's line; from the generated module alone, only `wrapper` (the
    compiled function, transformers' decorator) is in the trace, and no fused op is placed."""
    graph = _score("h200", "llama_whole", tmp_path, "dynamo graph")
    assert 0.75 <= graph.share < TARGET  # extern ops' inputs, and the attention fallback, differ
    alone = _score("h200", "llama_whole", tmp_path, "generated module")
    assert alone.share == 0.0


@pytest.mark.parametrize("level", LEVELS)
def test_no_wrong_answer_is_given_at_confidence_0_9_or_more(level, tmp_path):
    """Every fixture, every source of evidence: what is answered at >= 0.9 is on the right lines."""
    for device, cases in (("h200", H200_CASES), ("cpu", CPU_CASES)):
        for case in cases:
            _, attributions = score_case(device, case, tmp_path / device / case, level)
            expected = expected_lines(device, case, attributions)
            high, wrong = confidence_check(attributions, expected)
            assert wrong == 0, (device, case, level, wrong, high)
