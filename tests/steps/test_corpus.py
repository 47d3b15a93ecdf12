"""Every trace of the step corpus gets its exact step count, and every per-layer kernel its true
calls per step, worded as once per layer (or its multiple). The truth is the scripts' (truth.json)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.steps.conftest import Case, cases, explain_kwargs, marked_line, resolve
from tracer.api import explain_trace
from tracer.model.finding import Analysis, Finding

TRACES = [c for c in cases() if not c.is_ranks]


@pytest.fixture(scope="module")
def analyses(derived_dir: Path) -> dict[str, Analysis]:
    cache: dict[str, Analysis] = {}

    def analysis(case: Case) -> Analysis:
        if case.name not in cache:
            cache[case.name] = explain_trace(
                resolve(case.trace, derived_dir), **explain_kwargs(case, derived_dir)
            )
        return cache[case.name]

    return analysis  # type: ignore[return-value]


@pytest.mark.parametrize("case", TRACES, ids=[c.name for c in TRACES])
def test_exact_step_count_and_how_it_was_found(case: Case, analyses) -> None:
    analysis = analyses(case)
    assert analysis.steps == case.steps, analysis.step_evidence
    assert analysis.step_method and analysis.step_evidence
    assert analysis.steps_exact, analysis.step_evidence  # no cross-check disagrees on the corpus
    note = next(n for n in analysis.notes if n.startswith(f"{case.steps} steps from {analysis.step_method}"))
    assert analysis.step_evidence[0] in note


@pytest.mark.parametrize("case", TRACES, ids=[c.name for c in TRACES])
def test_per_layer_kernels_run_once_per_layer_or_a_multiple(case: Case, analyses) -> None:
    analysis = analyses(case)
    if case.truth.get("kinds") and "VERIFY" in case.truth["kinds"]:
        pytest.skip("speculative decode: the draft runs the same layer code a varying number of times")
    assert analysis.layers == case.layers
    expected = _expected_findings(case, analysis)
    assert expected, f"{case.name}: the truth names no per-layer kernel"
    for label, finding, calls in expected:
        assert finding.calls_per_step == calls, (label, finding.invariant)
        assert finding.invariant is not None and finding.invariant.startswith(f"{calls} call"), (
            label,
            finding.invariant,
        )
        assert "per layer" in finding.invariant, (label, finding.invariant)
        if calls == case.layers:
            assert f"once per layer ({case.layers} layers)" in finding.invariant


def _expected_findings(case: Case, analysis: Analysis) -> list[tuple[str, Finding, int]]:
    """(what the truth names, the finding it names, its true calls per step)."""
    out = []
    truth = case.calls_per_step
    for op, calls in truth.get("ops", {}).items():
        out.append((op, _one(analysis, lambda f, op=op: f.kernel == op), calls))
    for marker, ops in truth.get("lines", {}).items():
        line = marked_line(marker)
        for op, calls in ops.items():
            out.append(
                (
                    marker,
                    _one(analysis, lambda f, op=op, line=line: f.kernel == op and f.origin.line == line),
                    calls,
                )
            )
    for kernel, calls in truth.get("kernels", {}).items():
        out.append((kernel, _one(analysis, lambda f, k=kernel: k in (f.kernel, f.kernel_short)), calls))
    for chain, calls in truth.get("chains", {}).items():
        out.append((chain, _one(analysis, lambda f, c=chain: " > ".join(f.origin.ops) == c), calls))
    return out


def _one(analysis: Analysis, wanted) -> Finding:
    """The finding of most time among those matching `wanted` (one kernel may come from several lines)."""
    matching = [f for f in analysis.findings if wanted(f)]
    assert matching, "no finding matches"
    return max(matching, key=lambda f: f.total_ns)
