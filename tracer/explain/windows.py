"""The analyses of consecutive windows of one trace (`tracer.load.window_plan`) -> one `Analysis` of the
whole trace: calls, times, steps and bytes summed, calls/step, shares and fractions recomputed.

Exact (the numbers a whole-trace analysis gives): each finding's calls, total time, steps and
calls/step, the total time, the steps and their spans. Within rounding: GB/s and bytes/call where the
windows measured different bytes per call, the busy fraction (each window's union of GPU activity,
weighted). Not combined: per-step invariants and step evidence the windows word differently (the
rank's note names them, never as if they were whole). A note of one window is marked with its number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tracer.model.finding import Analysis, Finding

LOADED_ONLY = "loaded only "  # tracer.load's note of a windowed load: not a note of the whole trace


def combine_window_analyses(analyses: Sequence[Analysis]) -> tuple[Analysis, tuple[str, ...]]:
    """One analysis of the whole trace from those of its windows (in time order), and the fields
    that could not be combined exactly (empty when every number is the whole trace's)."""
    if len(analyses) == 1:
        return analyses[0], ()
    inexact: list[str] = []
    total_ns = sum(a.total_ns for a in analyses)
    groups: dict[tuple[Any, ...], list[Finding]] = {}
    for analysis in analyses:
        for finding in analysis.findings:
            groups.setdefault(_finding_key(finding), []).append(finding)
    steps = sum(a.steps or 0 for a in analyses) or None
    first = analyses[0]
    findings = [
        _combined_finding(parts, total_ns, steps, first.peak_gbps, inexact) for parts in groups.values()
    ]
    findings.sort(key=lambda f: (-f.total_ns, f.kernel_short, f.origin.key))

    starts = tuple(s for a in analyses for s in a.step_starts_ns)
    ends = tuple(e for a in analyses for e in a.step_ends_ns)
    kinds_known = any(a.step_kinds for a in analyses)
    kinds = (
        tuple(k for a in analyses for k in (a.step_kinds or ("",) * len(a.step_starts_ns)))
        if kinds_known
        else ()
    )
    window_ns = (max(ends) - min(starts)) if starts else sum(a.window_ns for a in analyses)
    busy_ns = [a.gpu_busy_fraction * a.window_ns for a in analyses if a.gpu_busy_fraction is not None]
    busy = sum(busy_ns) / window_ns if busy_ns and window_ns else None
    if busy is not None:
        inexact.append("GPU busy fraction (weighted over the windows)")
    methods = {a.step_method for a in analyses}
    if len(methods) > 1:
        inexact.append(f"step method (the windows found their steps {len(methods)} ways)")
    layers = {a.layers for a in analyses}
    if len(layers) > 1:
        inexact.append("layers (the windows disagree)")
    replay_ns = sum(a.replay_fraction * a.total_ns for a in analyses)
    evidence = tuple(dict.fromkeys(e for a in analyses for e in a.step_evidence))
    combined = replace(
        first,
        findings=tuple(findings),
        total_ns=total_ns,
        window_ns=window_ns,
        gpu_busy_fraction=busy,
        steps=steps,
        step_ns=(sum(e - s for s, e in zip(starts, ends)) / len(starts)) if starts else None,
        step_method=first.step_method if len(methods) == 1 else "; ".join(str(m) for m in methods),
        step_evidence=(
            (f"{len(starts)} steps found window by window ({len(analyses)} windows)", *evidence)
            if starts
            else evidence
        ),
        step_starts_ns=starts,
        step_ends_ns=ends,
        step_kinds=kinds if any(kinds) else (),
        steps_exact=all(a.steps_exact for a in analyses),
        attributed_fraction=_weighted(analyses, "attributed_fraction", total_ns),
        replay_fraction=replay_ns / total_ns if total_ns else 0.0,
        replay_attributed_fraction=(
            sum(a.replay_attributed_fraction * a.replay_fraction * a.total_ns for a in analyses) / replay_ns
            if replay_ns
            else 0.0
        ),
        notes=_notes(analyses),
    )
    return combined, tuple(dict.fromkeys(inexact))


def _finding_key(finding: Finding) -> tuple[Any, ...]:
    o = finding.origin
    return (finding.kernel, finding.category, o.key, o.location, o.ranges, o.ops, o.replay, o.before_trace)


def _combined_finding(
    parts: list[Finding], total_ns: int, steps: int | None, peak: float | None, inexact: list[str]
) -> Finding:
    calls = sum(f.calls for f in parts)
    time_ns = sum(f.total_ns for f in parts)
    # calls/step: each window's calls in its steps (calls_per_step x its steps), over all the steps
    in_steps = sum((f.calls_per_step or 0.0) * (f.steps or 0) for f in parts)
    per_step = in_steps / steps if steps else None
    if per_step is not None and abs(per_step - round(per_step)) < 1e-9:
        per_step = float(round(per_step))
    invariants = {f.invariant for f in parts}
    invariant = parts[0].invariant if len(invariants) == 1 else None
    if len(invariants) > 1:
        inexact.append("per-step invariants where the windows word them differently (left out)")
    bytes_per_call, gbps, peak_fraction, basis = _combined_bytes(parts, peak, inexact)
    shapes = tuple(dict.fromkeys(s for f in parts for s in f.shapes))
    return replace(
        parts[0],
        calls=calls,
        total_ns=time_ns,
        share=time_ns / total_ns if total_ns else 0.0,
        steps=steps,
        calls_per_step=per_step,
        invariant=invariant,
        bytes_per_call=bytes_per_call,
        gbps=gbps,
        peak_fraction=peak_fraction,
        shapes=shapes if len({f.shapes for f in parts}) > 1 else parts[0].shapes,
        waste=next((f.waste for f in parts if f.waste), None),
        bytes_basis=basis,
    )


def _combined_bytes(
    parts: list[Finding], peak: float | None, inexact: list[str]
) -> tuple[int | None, float | None, float | None, str | None]:
    """bytes/call weighted by calls; GB/s as all the bytes over all their time."""
    known = [f for f in parts if f.bytes_per_call is not None and f.gbps]
    if not known:
        return None, None, None, parts[0].bytes_basis
    byte_sums = [f.bytes_per_call * f.calls for f in known]  # type: ignore[operator]
    seconds = [b / f.gbps for b, f in zip(byte_sums, known)]  # type: ignore[operator]
    calls = sum(f.calls for f in known)
    bytes_per_call = round(sum(byte_sums) / calls) if calls else known[0].bytes_per_call
    gbps = sum(byte_sums) / sum(seconds) if sum(seconds) else known[0].gbps
    if len({f.bytes_per_call for f in known}) > 1:
        inexact.append("bytes/call and GB/s of kernels whose bytes differ between windows (within rounding)")
    basis = known[0].bytes_basis if len({f.bytes_basis for f in known}) == 1 else "estimate"
    return bytes_per_call, gbps, (gbps / peak if peak and gbps is not None else None), basis


def _weighted(analyses: Sequence[Analysis], field: str, total_ns: int) -> float:
    return sum(getattr(a, field) * a.total_ns for a in analyses) / total_ns if total_ns else 0.0


def _notes(analyses: Sequence[Analysis]) -> tuple[str, ...]:
    """The notes every window has, once; a window's own (its steps, its busy time) named by its
    number; the windows' load notes left out (the rank's note says how it was cut)."""
    shared = set.intersection(*(set(a.notes) for a in analyses))
    notes: list[str] = []
    for number, analysis in enumerate(analyses, 1):
        for note in analysis.notes:
            if note.startswith(LOADED_ONLY):
                continue
            notes.append(note if note in shared else f"window {number}: {note}")
    return tuple(dict.fromkeys(notes))
