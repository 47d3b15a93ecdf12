"""Which source call a traced call was: the k-th of its kind, in the if-branches its run took."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from tracer.join.source_calls import CallPoint, FunctionCalls

MAX_BRANCHES = 12  # if-statements enumerated per function (2**12 combinations at most)


@dataclass(frozen=True)
class CallChoice:
    """The call point chosen (or None), how sure, why, and the alternatives when unsure."""

    point: CallPoint | None
    confidence: float
    evidence: tuple[str, ...]
    candidates: tuple[CallPoint, ...] = ()


def choose_call(
    function: FunctionCalls,
    wanted: Callable[[CallPoint], bool],
    *,
    nth: int,
    calls: int,
    observed: Counter,
) -> CallChoice:
    """The point of the `nth` of `calls` wanted calls in one run, given what else the run called.

    Without branches (or when the counts agree) the nth wanted point in evaluation order. Else the
    if-arms are enumerated, and those whose calls best match `observed` (counts by `CallPoint.key`)
    decide; a wanted call inside a loop can repeat, so then only the count rule applies.
    """
    same = [p for p in function.points if wanted(p)]
    if not same:
        return CallChoice(None, 0.0, ())
    if len(same) == calls and not any(p.arms or p.in_loop for p in same):
        return CallChoice(same[nth], 1.0, (f"the source has {len(same)}, in evaluation order",))
    if not any(p.in_loop for p in same):
        choice = _by_branches(function, wanted, nth, calls, observed)
        if choice is not None:
            return choice
    if len(same) == calls:
        return CallChoice(
            same[nth], 0.9, (f"the source has {len(same)}, in evaluation order (some in branches)",)
        )
    if all(p.in_loop for p in same) and not any(p.arms for p in same) and calls % len(same) == 0:
        # One loop body ran calls/len(same) times: the calls cycle through its points in order.
        runs = calls // len(same)
        evidence = (f"the source has {len(same)} in a loop that ran {runs} times",)
        return CallChoice(same[nth % len(same)], 0.9, evidence)
    guess = same[min(nth, len(same) - 1)]
    return CallChoice(
        guess,
        0.4,
        (f"the source has {len(same)}: counts disagree (branches or loops); ranked by order",),
        (guess, *(p for p in same if p is not guess)),
    )


def _by_branches(function, wanted, nth, calls, observed) -> CallChoice | None:
    branch_of = function.branch_of
    branches = sorted({branch_of[arm][0] for p in function.points for arm in p.arms})
    if not branches or len(branches) > MAX_BRANCHES:
        return None
    bit = {if_id: 1 << i for i, if_id in enumerate(branches)}
    # A point runs when, for each if around it, the assignment took its arm: bits under `mask`
    # (1 = the else arm) must equal `need`.
    needs = []
    for p in function.points:
        mask = need = 0
        for arm in p.arms:
            if_id, which = branch_of[arm]
            mask |= bit[if_id]
            need |= bit[if_id] if which else 0
        needs.append((mask, need))
    looped = {p.key for p in function.points if p.in_loop}
    keys = [p.key if p.key not in looped else None for p in function.points]
    is_wanted = [wanted(p) for p in function.points]
    comparable = {k for k in keys if k is not None}
    best: dict[CallPoint, int] = {}  # the nth wanted point of each best assignment
    best_mismatch = None
    for taken in range(1 << len(branches)):
        chosen = []
        counts: Counter = Counter()
        for p, (mask, need), key, hit in zip(function.points, needs, keys, is_wanted):
            if (taken & mask) == need:
                if hit:
                    chosen.append(p)
                if key is not None:
                    counts[key] += 1
        if len(chosen) != calls:
            continue
        mismatch = sum(abs(counts[key] - observed.get(key, 0)) for key in comparable)
        if best_mismatch is None or mismatch < best_mismatch:
            best_mismatch, best = mismatch, {}
        if mismatch == best_mismatch:
            best[chosen[nth]] = mismatch
    if not best:
        return None
    points = sorted(best, key=lambda p: (p.line, p.col))
    if len(points) == 1:
        fit = (
            "matches every other call of this run"
            if best_mismatch == 0
            else "fits this run's other calls best"
        )
        return CallChoice(points[0], 1.0, (f"the if-branches whose calls {fit}, in evaluation order",))
    return CallChoice(
        points[0],
        0.4,
        (f"{len(points)} branch choices fit this run equally; ranked by order",),
        tuple(points),
    )
