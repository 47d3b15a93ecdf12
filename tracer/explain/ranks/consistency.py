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
    """Whether the ranks agree, in words: hot origin, calls per step, a slower rank and where, clocks,
    and the steps themselves. Ranks whose step counts differ are compared per call, never by dividing
    one rank's totals by its own step count and another's by a different one: the disagreement is
    the first finding."""
    if len(results) < 2:
        return ["one rank only: nothing to compare"]
    names = {r.rank: f"rank {r.rank}" for r in results}
    agree = steps_agree(results)
    lines = [] if agree else [_steps_differ(results, names)]
    lines += [_hot_origin(results, names), *_calls_per_step(results, combined, names, agree)]
    lines.extend(_slower_rank(results, combined, names, agree))
    lines.extend(_clocks(results, names, agree))
    if agree:
        lines.append(_steps_agree(results))
    return lines


def step_methods_to_align(results: Sequence[RankResult]) -> dict[int, str]:
    """Ranks (by position in ``results``) to explain again with one step method, when the ranks found
    their steps in different ways: the way most ranks found them (of equal counts, the first in the
    order of `tracer.explain.steps.find_steps`), as a `method_key`."""
    from tracer.explain.steps import method_key

    keys = [method_key(r.analysis.step_method) if r.analysis.step_method else None for r in results]
    found = [k for k in keys if k is not None]
    if len(set(keys)) < 2 or not found:
        return {}
    order = ("profiler", "sglang", "range", "graph", "forwards", "period")
    common = max(set(found), key=lambda k: (found.count(k), -order.index(k)))
    return {i: common for i, k in enumerate(keys) if k != common}


def steps_agree(results: Sequence[RankResult]) -> bool:
    """Every rank has the same number of steps (per-step figures compare like with like)."""
    counts = {r.analysis.steps for r in results}
    return len(counts) == 1 and None not in counts


def _steps_agree(results: Sequence[RankResult]) -> str:
    methods = {r.analysis.step_method for r in results}
    steps = results[0].analysis.steps
    if len(methods) == 1:
        return f"steps: {steps} on every rank, found the same way ({methods.pop()})"
    how = "; ".join(f"rank {r.rank} by {r.analysis.step_method}" for r in results)
    return f"steps: {steps} on every rank, found in different ways ({how})"


def _steps_differ(results: Sequence[RankResult], names: dict[int, str]) -> str:
    per = "; ".join(
        f"{names[r.rank]}: {r.analysis.steps or 'none'} ({r.analysis.step_method or 'no steps found'})"
        for r in results
    )
    return (
        f"the ranks disagree on the steps ({per}): that is the first thing to explain (a rank that ran other "
        "work, or a trace cut elsewhere); ranks are compared per call below, not per step"
    )


def finding_label(finding: Finding | CombinedFinding) -> str:
    """``file.py:209 (kernel)``: a finding named by its line (else its origin key) and short kernel name."""
    location = finding.origin.location if isinstance(finding, Finding) else finding.location
    key = finding.origin.key if isinstance(finding, Finding) else finding.origin_key
    where = location if location not in ("?", None) and ":" in location else key
    return f"{where} ({finding.kernel_short})"


def _hot_origin(results: Sequence[RankResult], names: dict[int, str]) -> str:
    """The ranks' hottest origins of their own work: a collective's time on a fast rank is mostly
    waiting for a slow one (communication is compared on its own, and the slower rank by own work)."""
    tops = {}
    for r in results:
        own = [f for f in r.analysis.findings if f.category != "communication"] or r.analysis.findings
        if own:
            tops[r.rank] = own[0]
    if not tops:
        return "no findings on any rank"
    aside = any(tops[r.rank] is not r.analysis.findings[0] for r in results if r.rank in tops)
    note = " (communication aside)" if aside else ""
    keys = {(f.kernel, f.origin.key) for f in tops.values()}
    if len(keys) == 1 and len(tops) == len(results):
        top = next(iter(tops.values()))
        shares = ", ".join(f"{tops[r].share:.0%}" for r in sorted(tops))
        return (
            f"same hot origin on all {len(results)} ranks{note}: {finding_label(top)}, "
            f"{shares} of each rank's time"
        )
    parts = "; ".join(f"{names[r]}: {finding_label(f)} {f.share:.0%}" for r, f in sorted(tops.items()))
    return f"the hot origin differs between ranks{note}: {parts}"


def _calls_per_step(results, combined, names, agree: bool = True) -> list[str]:
    compared = [c for c in combined if len(c.ranks) == len(results)][:TOP_COMPARED]
    if not agree:
        # Calls per step over each rank's own steps are still a count of the work in a step.
        own = [{f.calls_per_step for f in c.ranks} for c in compared]
        if compared and all(len(values) == 1 and None not in values for values in own):
            counts = ", ".join(f"{next(iter(values)):g}" for values in own)
            return [
                (
                    f"calls differ only as the steps do: the same calls/step on every rank, over its own steps, for "
                    f"the top {len(compared)} findings ({counts})"
                )
            ]
        differing = []
        for c in compared:
            calls = {f.rank: f.calls for f in c.ranks}
            if len(set(calls.values())) > 1:
                per_rank = ", ".join(f"{v} on {names[r]}" for r, v in sorted(calls.items()))
                differing.append(f"calls differ for {finding_label(c)}: {per_rank}")
        return differing or [f"same calls on all ranks for the top {len(compared)} findings"]
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


def _slower_rank(results, combined, names, agree: bool = True) -> list[str]:
    """The slower rank by its own work (communication excluded): per step when the ranks agree on
    the steps, else over the calls every rank made (each finding's per-call time times the calls
    the ranks share); and where, with the per-call ratio."""
    if agree:
        work = {r.rank: r.own_work_per_step_ns for r in results}
        unit = "step"
    else:
        work = _matched_call_work(results, combined)
        unit = "set of calls every rank made"
    fastest = min(work, key=work.__getitem__)
    slowest = max(work, key=work.__getitem__)
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
        per = {f.rank: f for f in c.ranks}
        if agree:
            gap = (per[slowest].per_step_ns if slowest in per else 0.0) - (
                per[fastest].per_step_ns if fastest in per else 0.0
            )
        elif slowest in per and fastest in per:
            shared = min(per[slowest].calls, per[fastest].calls)
            gap = shared * (
                per[slowest].total_ns / per[slowest].calls - per[fastest].total_ns / per[fastest].calls
            )
        else:
            continue
        gaps.append((gap, c))
    gaps.sort(key=lambda g: -g[0])
    lines = [line]
    if gaps and gaps[0][0] > 0:
        gap, c = gaps[0]
        per = {f.rank: f for f in c.ranks}
        total_gap = work[slowest] - work[fastest]
        if agree:
            where = (
                f"{names[slowest]} is slower in {finding_label(c)}: "
                f"{(per[slowest].per_step_ns if slowest in per else 0) / 1e6:.3f} ms per step against "
                f"{(per[fastest].per_step_ns if fastest in per else 0) / 1e6:.3f} ms on {names[fastest]} "
                f"({gap / total_gap:.0%} of the difference)"
            )
        else:
            where = (
                f"{names[slowest]} is slower in {finding_label(c)} ({gap / total_gap:.0%} of the difference)"
            )
        ratio = _per_call_ratio(per, slowest, fastest)
        if ratio is not None:
            where += (
                f"; per call x{ratio:.2f}: {per[slowest].total_ns / per[slowest].calls / 1e3:.1f} us against "
                f"{per[fastest].total_ns / per[fastest].calls / 1e3:.1f} us"
            )
            if agree and per[slowest].calls_per_step == per[fastest].calls_per_step:
                where += f", {per[slowest].calls_per_step:g} calls/step on both"
            else:
                where += f", {per[slowest].calls} and {per[fastest].calls} calls"
        lines.append(where)
    waits = {r.rank: r.collective_ns for r in results if r.collectives}
    if len(waits) == len(results) and waits[fastest] > waits[slowest]:
        lines.append(
            f"the other ranks wait for {names[slowest]} in collectives: {waits[fastest] / 1e6:.3f} ms in them on "
            f"{names[fastest]} against {waits[slowest] / 1e6:.3f} ms on {names[slowest]}"
        )
    return lines


def _per_call_ratio(per: dict, slowest: int, fastest: int) -> float | None:
    if slowest not in per or fastest not in per or not per[slowest].calls or not per[fastest].calls:
        return None
    fast = per[fastest].total_ns / per[fastest].calls
    return (per[slowest].total_ns / per[slowest].calls) / fast if fast > 0 else None


def _matched_call_work(
    results: Sequence[RankResult], combined: Sequence[CombinedFinding]
) -> dict[int, float]:
    """Per rank, the time of the calls every rank made (communication excluded): for each finding on
    every rank, its per-call time times the fewest calls any rank made of it."""
    work = {r.rank: 0.0 for r in results}
    for c in combined:
        if c.category == "communication" or len(c.ranks) < len(results):
            continue
        shared = min(f.calls for f in c.ranks)
        for f in c.ranks:
            if f.calls:
                work[f.rank] += f.total_ns / f.calls * shared
    return work


def _clocks(results: Sequence[RankResult], names: dict[int, str], agree: bool = True) -> list[str]:
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
        last = max(median_late, key=median_late.__getitem__)
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
    if agree and len(stepped) == len(results):
        n = min(len(r.step_starts_ns) for r in stepped)
        skews = [
            max(r.step_starts_ns[k] for r in stepped) - min(r.step_starts_ns[k] for r in stepped)
            for k in range(n)
        ]
        lines.append(
            f"step starts differ by at most {max(skews) / 1e6:.3f} ms across ranks over {n} aligned steps "
            f"(median {statistics.median(skews) / 1e6:.3f} ms)"
        )
    return lines
