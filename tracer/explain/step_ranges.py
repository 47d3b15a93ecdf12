"""Steps from the caller's own record_function ranges, found without a flag.

A range is a step when it repeats, is not nested in another such range, holds most of the work and,
where the trace marks its layers, holds exactly one whole set of them each time: a range around the
whole run holds several sets, a range around attention holds a part of one layer, and neither is a
step. Ranges of other names that also hold one set (a ``prefill`` before the ``decode`` ranges) are
steps of another kind.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracer.explain.optree import rows_of
from tracer.explain.structure import ModelShape, is_layer_range
from tracer.model.events import Cat, Trace

if TYPE_CHECKING:
    from tracer.explain.steps import StepWork

NOT_STEPS = ("ProfilerStep#", "kt:site:", "gloo:", "nccl:", "step[", "## ")  # found elsewhere, or never steps
MOST_OF_THE_WORK = 0.5
_NUMBER = re.compile(r"\d+")


@dataclass(frozen=True)
class RangeSteps:
    """The range occurrences that are the steps (rows, in start order) and why, in words."""

    rows: tuple[int, ...]
    families: tuple[str, ...]  # the names they go by, digits as '#' ("iteration #")
    evidence: tuple[str, ...]
    left_out: tuple[str, ...] = ()  # occurrences holding part of a set (cut by the trace's edges)
    stops: tuple[int, ...] = ()  # starts of the occurrences left out: no step takes in their work


@dataclass
class _Family:
    name: str
    spans: list[tuple[int, int, int]]  # (start, end, row), outermost occurrences, in start order


def family_of(name: str) -> str:
    """A range's name with its numbers as ``#``: ``iteration 3`` and ``iteration 4`` are one family."""
    return _NUMBER.sub("#", name)


def find_range_steps(trace: Trace, work: StepWork, shape: ModelShape) -> RangeSteps | None:
    """The step ranges, or None when no range qualifies (``work``: what the coverage is measured on)."""
    families = _families(trace)
    if not families:
        return None
    cover = _Coverage(work)
    if shape.marks is not None:
        return _by_layer_sets(families, cover, shape)
    return _by_repetition(families, cover, work, shape)


def _families(trace: Trace) -> dict[str, _Family]:
    events = trace.events
    by_family: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for row in rows_of(events, Cat.USER_ANNOTATION):
        name = events.name[row]
        if name.startswith(NOT_STEPS) or is_layer_range(name):
            continue
        by_family[family_of(name)].append((events.ts_ns[row], events.end_ns(row), row))
    out = {}
    for name, spans in by_family.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        outer: list[tuple[int, int, int]] = []
        for span in spans:  # a range re-entered inside itself counts once
            if outer and span[0] < outer[-1][1]:
                continue
            outer.append(span)
        out[name] = _Family(name, outer)
    return out


class _Coverage:
    """Share of the work placed inside given spans (work placed by launch time: the CPU clock)."""

    def __init__(self, work: StepWork) -> None:
        import numpy as np

        order = np.argsort(work.when_ns, kind="stable")
        self.when = work.when_ns[order]
        self.cumulative = np.concatenate([[0], np.cumsum(work.ns[order])])
        self.total = int(self.cumulative[-1]) or 1

    def share(self, spans: list[tuple[int, int, int]]) -> float:
        import numpy as np

        if not spans:
            return 0.0
        starts = np.asarray([s for s, _, _ in spans], dtype=np.int64)
        ends = np.asarray([e for _, e, _ in spans], dtype=np.int64)
        lo = np.searchsorted(self.when, starts, side="left")
        hi = np.searchsorted(self.when, ends, side="left")
        return float((self.cumulative[hi] - self.cumulative[lo]).sum()) / self.total


def _by_layer_sets(families: dict[str, _Family], cover: _Coverage, shape: ModelShape) -> RangeSteps | None:
    """With layer marks: the outermost occurrences holding exactly one whole set of layers."""
    marks = shape.marks
    assert marks is not None
    one_set: list[tuple[int, int, int, str]] = []
    passed_over = []
    for family in families.values():
        held = [marks.sets_within(s, e) for s, e, _ in family.spans]
        ones = [
            span
            for span, (distinct, most) in zip(family.spans, held)
            if distinct == marks.count and most == 1
        ]
        one_set.extend((*span, family.name) for span in ones)
        if len(family.spans) > 1 and not ones:
            most = max(held, key=lambda h: (h[1], h[0]))
            if most[1] > 1:
                why = f"holds {most[1]} sets of the {marks.count} layers"
            else:
                why = f"holds {most[0]} of the {marks.count} layers"
            passed_over.append(f"range {family.name!r} ({len(family.spans)} times) {why}: not a step")
    one_set.sort(key=lambda s: (s[0], -s[1]))
    outer: list[tuple[int, int, int, str]] = []
    for span in one_set:  # step > forward > layers: the step is the outermost holding one set
        if outer and span[0] < outer[-1][1]:
            continue
        outer.append(span)
    if len(outer) < 2:
        return None
    spans = [(s, e, r) for s, e, r, _ in outer]
    share = cover.share(spans)
    if share < MOST_OF_THE_WORK:
        return None
    counts: dict[str, int] = defaultdict(int)
    for *_, name in outer:
        counts[name] += 1
    chosen = {r for _, _, r, _ in outer}
    others = [(s, e) for name in counts for s, e, r in families[name].spans if r not in chosen]
    cut = [(s, e) for s, e in others if 0 < marks.sets_within(s, e)[0] < marks.count]
    left_out = []
    if cut:
        left_out.append(
            f"{len(cut)} more of these ranges hold only part of the {marks.count} layers (cut by the trace's edge "
            "or --window): left out"
        )
    names = ", ".join(f"{name!r} x{count}" for name, count in counts.items())
    evidence = [
        (
            f"record_function ranges {names}: each holds one whole set of the {marks.count} layers "
            f"({marks.source}) and is the outermost range that does; together {share:.0%} of the work"
        ),
        *passed_over,
    ]
    return RangeSteps(
        tuple(r for _, _, r, _ in outer),
        tuple(counts),
        tuple(evidence),
        tuple(left_out),
        tuple(s for s, _ in others),
    )


def _by_repetition(
    families: dict[str, _Family], cover: _Coverage, work: StepWork, shape: ModelShape
) -> RangeSteps | None:
    """Without layer marks: a repeating range inside no other repeating range, holding most of the
    work; with a layer count (--layers, --config), one in which some kernel runs a multiple of it."""
    repeating = {name: f for name, f in families.items() if len(f.spans) > 1}
    candidates = []
    passed_over = []
    for family in repeating.values():
        nested = sum(
            1
            for s, e, _ in family.spans
            if any(_inside(s, e, other) for other in repeating.values() if other is not family)
        )
        if nested * 2 > len(family.spans):
            continue
        share = cover.share(family.spans)
        if share < MOST_OF_THE_WORK:
            passed_over.append(
                f"range {family.name!r} ({len(family.spans)} times) holds {share:.0%} of the work"
            )
            continue
        if shape.layers and not _holds_layers(family, work, shape.layers):
            passed_over.append(
                f"range {family.name!r} ({len(family.spans)} times): no kernel runs a multiple of the "
                f"{shape.layers} layers in it"
            )
            continue
        candidates.append((share, -len(family.spans), family))
    if not candidates:
        return None
    share, _, family = max(candidates, key=lambda c: (c[0], c[1]))
    layers = f"; some kernel runs a multiple of the {shape.layers} layers in each" if shape.layers else ""
    evidence = [
        (
            f"record_function range {family.name!r}: {len(family.spans)} times, inside no other repeating range, "
            f"{share:.0%} of the work{layers}"
        ),
        *passed_over,
    ]
    return RangeSteps(tuple(r for _, _, r in family.spans), (family.name,), tuple(evidence))


def _inside(start: int, end: int, other: _Family) -> bool:
    import bisect

    i = bisect.bisect_right(other.spans, (start, float("inf"), 0)) - 1
    return (
        i >= 0
        and other.spans[i][0] <= start
        and end <= other.spans[i][1]
        and other.spans[i][:2] != (start, end)
    )


def _holds_layers(family: _Family, work: StepWork, layers: int) -> bool:
    import numpy as np

    order = np.argsort(work.when_ns, kind="stable")
    when, codes = work.when_ns[order], work.codes[order]
    steady = None
    for start, end, _ in family.spans:
        lo, hi = np.searchsorted(when, [start, end], side="left")
        held = np.bincount(codes[lo:hi], minlength=len(work.names))
        ok = (held >= layers) & (held % layers == 0)
        steady = ok.astype(np.int64) if steady is None else steady + ok
    return steady is not None and bool((steady * 2 >= len(family.spans)).any())
