"""Combine the ranks' findings by (kernel, origin) and say in words whether the ranks agree."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence

from tracer.explain.ranks.records import CombinedFinding, RankFigure, RankResult
from tracer.model.finding import Finding

SLOWER_BY = 0.10  # a rank whose own work per step exceeds the fastest's by this much is "slower"
TOP_COMPARED = 5  # findings whose calls/step are compared across ranks


def combine(results: Sequence[RankResult]) -> tuple[CombinedFinding, ...]:
    """Findings keyed by (kernel, origin key) across ranks, biggest total first."""
    grand_total = sum(r.analysis.total_ns for r in results) or 1
    by_key: dict[tuple[str, str], list[tuple[RankResult, Finding]]] = defaultdict(list)
    for result in results:
        for finding in result.analysis.findings:
            by_key[(finding.kernel, finding.origin.key)].append((result, finding))
    out = []
    for (kernel, key), pairs in by_key.items():
        first = pairs[0][1]
        figures = tuple(
            RankFigure(r.rank, f.calls, f.total_ns, f.total_ns / r.steps, f.calls_per_step, f.share)
            for r, f in sorted(pairs, key=lambda p: p[0].rank)
        )
        total = sum(f.total_ns for _, f in pairs)
        out.append(
            CombinedFinding(
                kernel,
                first.kernel_short,
                first.category,
                key,
                first.origin.location,
                first.origin.source,
                total,
                total / grand_total,
                figures,
            )
        )
    out.sort(key=lambda c: (-c.total_ns, c.kernel_short, c.origin_key))
    return tuple(out)


def consistency(results: Sequence[RankResult], combined: Sequence[CombinedFinding]) -> list[str]:
    """Whether the ranks agree, in words: hot origin, calls per step, a slower rank and where, clocks."""
    if len(results) < 2:
        return ["one rank only: nothing to compare"]
    names = {r.rank: f"rank {r.rank}" for r in results}
    lines = [_hot_origin(results, names), *_calls_per_step(results, combined, names)]
    lines.extend(_slower_rank(results, combined, names))
    lines.extend(_clocks(results, names))
    return lines


def finding_label(finding: Finding | CombinedFinding) -> str:
    """``file.py:209 (kernel)``: a finding named by its line (else its origin key) and short kernel name."""
    location = finding.origin.location if isinstance(finding, Finding) else finding.location
    key = finding.origin.key if isinstance(finding, Finding) else finding.origin_key
    where = location if location not in ("?", None) and ":" in location else key
    return f"{where} ({finding.kernel_short})"


def _hot_origin(results: Sequence[RankResult], names: dict[int, str]) -> str:
    tops = {r.rank: r.analysis.findings[0] for r in results if r.analysis.findings}
    if not tops:
        return "no findings on any rank"
    keys = {(f.kernel, f.origin.key) for f in tops.values()}
    if len(keys) == 1 and len(tops) == len(results):
        top = next(iter(tops.values()))
        shares = ", ".join(f"{tops[r].share:.0%}" for r in sorted(tops))
        return (
            f"same hot origin on all {len(results)} ranks: {finding_label(top)}, {shares} of each rank's time"
        )
    parts = "; ".join(f"{names[r]}: {finding_label(f)} {f.share:.0%}" for r, f in sorted(tops.items()))
    return f"the hot origin differs between ranks: {parts}"


def _calls_per_step(results, combined, names) -> list[str]:
    compared = [c for c in combined if len(c.ranks) == len(results)][:TOP_COMPARED]
    differing = []
    for c in compared:
        values = {f.rank: f.calls_per_step for f in c.ranks}
        known = [v for v in values.values() if v is not None]
        if known and max(known) - min(known) > 1e-6 * max(1.0, max(known)):
            per_rank = ", ".join(f"{v:g} on {names[r]}" for r, v in sorted(values.items()) if v is not None)
            differing.append(f"calls/step differ for {finding_label(c)}: {per_rank}")
    missing = [c for c in combined[:TOP_COMPARED] if len(c.ranks) < len(results)]
    for c in missing:
        present = ", ".join(names[f.rank] for f in c.ranks)
        differing.append(f"{finding_label(c)} runs on {present} only")
    if differing:
        return differing
    if not compared:
        return ["no finding appears on every rank"]
    counts = ", ".join(
        f"{c.ranks[0].calls_per_step:g}" if c.ranks[0].calls_per_step is not None else "?" for c in compared
    )
    return [f"same calls/step on all ranks for the top {len(compared)} findings ({counts})"]


def _slower_rank(results, combined, names) -> list[str]:
    work = {r.rank: r.own_work_per_step_ns for r in results}
    fastest = min(work, key=work.get)
    slowest = max(work, key=work.get)
    unit = "step" if all(r.analysis.steps for r in results) else "trace"
    if work[fastest] <= 0 or work[slowest] <= work[fastest] * (1 + SLOWER_BY):
        spread = (work[slowest] / work[fastest] - 1) if work[fastest] > 0 else 0.0
        return [
            f"no rank is slower: own work per {unit} within {spread:.0%} across ranks (communication excluded)"
        ]
    line = (
        f"{names[slowest]} is slower: {work[slowest] / 1e6:.3f} ms of its own work per {unit} against "
        f"{work[fastest] / 1e6:.3f} ms on {names[fastest]} (x{work[slowest] / work[fastest]:.2f}, communication excluded)"
    )
    gaps = []
    for c in combined:
        if c.category == "communication":
            continue
        per = {f.rank: f.per_step_ns for f in c.ranks}
        gaps.append((per.get(slowest, 0.0) - per.get(fastest, 0.0), c))
    gaps.sort(key=lambda g: -g[0])
    lines = [line]
    if gaps and gaps[0][0] > 0:
        gap, c = gaps[0]
        per = {f.rank: f.per_step_ns for f in c.ranks}
        total_gap = work[slowest] - work[fastest]
        lines.append(
            f"{names[slowest]} is slower in {finding_label(c)}: {per.get(slowest, 0) / 1e6:.3f} ms per {unit} against "
            f"{per.get(fastest, 0) / 1e6:.3f} ms on {names[fastest]} ({gap / total_gap:.0%} of the difference)"
        )
    waits = {r.rank: r.collective_ns for r in results if r.collectives}
    if len(waits) == len(results) and waits[fastest] > waits[slowest]:
        lines.append(
            f"the other ranks wait for {names[slowest]} in collectives: {waits[fastest] / 1e6:.3f} ms in them on "
            f"{names[fastest]} against {waits[slowest] / 1e6:.3f} ms on {names[slowest]}"
        )
    return lines


def _clocks(results: Sequence[RankResult], names: dict[int, str]) -> list[str]:
    """Aligned clocks (baseTimeNanoseconds + ts): who arrives last at collectives, step-start skew."""
    lines = []
    if any(r.base_time_ns is None for r in results):
        lines.append("some traces lack baseTimeNanoseconds: clocks not aligned, no arrival times compared")
        return lines
    counts = {len(r.collectives) for r in results}
    if len(counts) == 1 and counts != {0}:
        calls = counts.pop()
        lateness: dict[int, list[int]] = defaultdict(list)
        end_spread = []
        for k in range(calls):
            starts = {r.rank: r.collectives[k].start_ns for r in results}
            ends = [r.collectives[k].end_ns for r in results]
            first = min(starts.values())
            for rank, start in starts.items():
                lateness[rank].append(start - first)
            end_spread.append(max(ends) - min(ends))
        median_late = {rank: statistics.median(v) for rank, v in lateness.items()}
        last = max(median_late, key=median_late.get)
        source = results[0].collective_source
        lines.append(
            f"{names[last]} arrives last at the {calls} collectives ({source}): median "
            f"{median_late[last] / 1e6:.3f} ms after the first rank; they end within "
            f"{statistics.median(end_spread) / 1e3:.1f} us of each other (median), clocks aligned by baseTimeNanoseconds"
        )
    elif len(counts) > 1:
        per = ", ".join(f"{len(r.collectives)} on {names[r.rank]}" for r in results)
        lines.append(f"collective calls differ between ranks ({per}): arrival times not compared")
    stepped = [r for r in results if r.step_starts_ns]
    if len(stepped) == len(results):
        n = min(len(r.step_starts_ns) for r in stepped)
        skew = max(
            max(r.step_starts_ns[k] for r in stepped) - min(r.step_starts_ns[k] for r in stepped)
            for k in range(n)
        )
        lines.append(f"step starts differ by at most {skew / 1e6:.3f} ms across ranks over {n} steps")
    return lines
