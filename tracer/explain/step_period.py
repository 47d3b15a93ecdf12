"""Steps from the period of the kernel sequence, when nothing in the trace marks them; and the layer
count from the block that repeats inside one step.

A model of identical layers repeats its kernel sequence once per layer *and* once per step (and, over
a few steps, once per few steps). Every kernel count m that a few kernels share is a candidate: those
kernels (the *anchors*; for steps the ones that run least often, such as embedding, sampling and the
LM head) must run once between each other's calls, the repeats they cut must look alike, and with a
layer count known a repeat must hold a multiple of it calls of some kernel, so a period of one layer
is never taken for a step. Of the candidates left, the step is the shortest whose cuts fall on idle
gaps as long as the longest periods' (a step ends with a wait for the device; layers run back to
back, and a period of several steps cuts at step gaps too but is longer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

PARTIAL_SHARE = 0.6  # a repeat with fewer kernels than this share of a typical one is cut
MIN_SIMILAR = 0.75  # median share of a repeat's kernels that the typical repeat also runs
LAYER_SHARE = 0.25  # share of a step's kernels that run a multiple of the layer count in it
STEP_GAP = 0.5  # a step's cuts sit on gaps at least this share of the widest-cut period's
MAX_OFFSETS = 64  # repeat starts tried per candidate period
SAME_BLOCK = 0.75  # share of a layer's kernels equal to the typical layer's, position by position
RESYNC = 0.2  # share of its kernels a layer may differ in length from the typical one
MAX_PERIOD_SEARCH = 4096  # longest layer block looked for inside a step (kernels)
MAX_STEP_SEARCH = 65536  # kernels of a step read when looking for its layer block


@dataclass(frozen=True)
class Period:
    """The sequence cut into repeats: repeat i is positions ``cuts[i]..ends[i]`` of the sequence in
    start order; ``whole[i]`` whether it holds every anchor once and enough kernels (the first and
    last may be cut by the trace's edges)."""

    repeats: int  # m: how many times the anchor kernels run
    cuts: tuple[int, ...]
    ends: tuple[int, ...]
    whole: tuple[bool, ...]
    anchors: tuple[str, ...]  # kernels that run once in every repeat
    per_layer_kernel: str | None  # with a layer count: a kernel that runs a multiple of it per repeat
    layer_check: bool  # a layer count was known and some kernel ran a multiple of it in each repeat
    typical: int  # kernels in a typical repeat
    cut_gap: float  # median idle time before the repeats' first kernels (ns)
    covered: float = 1.0  # share of the kernels inside whole repeats
    group: int = 1  # repeats of a finer period (one layer each) that make one of these


@dataclass(frozen=True)
class PeriodChoice:
    """The period taken for the step, and the other periods the sequence has, in words."""

    period: Period
    passed_over: tuple[str, ...]


def find_period(
    codes: np.ndarray, gaps: np.ndarray, names: list[str], layers: int | None
) -> PeriodChoice | None:
    """The step period of ``codes`` (one int per kernel name, in start order); ``gaps``: idle time
    before each kernel. None when no period of whole repeats exists."""
    import numpy as np

    n = len(codes)
    if n < 4:
        return None
    counts = np.bincount(codes)
    order = np.argsort(codes, kind="stable")  # positions of code c: order[bounds[c]:bounds[c + 1]]
    bounds = np.concatenate([[0], np.cumsum(counts)])
    where = [order[bounds[c] : bounds[c + 1]] for c in range(len(counts))]
    shared = np.bincount(counts)  # how many kernels run m times
    candidates = [m for m in range(2, min(len(shared), n // 2 + 1)) if shared[m] >= 2]
    found = [p for m in candidates if (p := _try(codes, gaps, counts, where, names, m, layers)) is not None]
    if not found:
        return None
    passed_over = []
    if layers:
        holding = [p for p in found if p.layer_check]
        if not holding:  # no period holds the layers: maybe the layers' own, L of them to a step
            holding = [c for p in found if (c := _coarsened(p, codes, gaps, layers)) is not None]
        passed_over += [
            f"every {_per(p)}: no kernel runs a multiple of the {layers} layers in it"
            for p in found
            if not p.layer_check
        ]
        found = holding or found
    elif len(found) > 1:
        # No layer count: a step holds a block that repeats back to back (its layers); a layer does not.
        blocked = [p for p in found if _holds_block(p, codes)]
        passed_over += [
            f"every {_per(p)}: no block of kernels repeats inside it (a layer)"
            for p in found
            if blocked and p not in blocked
        ]
        found = blocked or found
    # Periods covering much less of the sequence with whole repeats (a decode-only kernel's period,
    # leaving the prefill out) are not the step when another covers it all.
    most = max(p.covered for p in found)
    passed_over += [
        f"every {_per(p)}: its whole repeats cover {p.covered:.0%} of the kernels"
        for p in found
        if p.covered < most - 0.02
    ]
    found = [p for p in found if p.covered >= most - 0.02]
    widest = max(p.cut_gap for p in found)
    steps = [p for p in found if p.cut_gap >= STEP_GAP * widest]
    chosen = max(steps, key=lambda p: p.repeats)  # the shortest period cutting at step-long gaps
    passed_over += [
        f"every {_per(p)}: {'longer, made of several steps' if p.repeats < chosen.repeats else 'cuts where the device does not wait (layers)'}"
        for p in found
        if p is not chosen
    ]
    if not layers:
        coarse = _coarsened(chosen, codes, gaps, None)
        if coarse is not None:
            passed_over.append(
                f"every {_per(chosen)}: one layer; every {coarse.group} of them hold kernels the others do not, "
                "after a wait for the device: that is the step"
            )
            chosen = coarse
    return PeriodChoice(chosen, tuple(passed_over))


def _coarsened(fine: Period, codes: np.ndarray, gaps: np.ndarray, layers: int | None) -> Period | None:
    """Steps made of repeats of a finer period (one layer each): the whole repeats that hold kernels
    the typical repeat does not (a step's embedding and sampling, sharing their kernel names with
    layer kernels) mark where steps meet, every k repeats when there are several; the step starts at
    the widest idle gap inside each, a wait at least twice the fine cuts' (without a layer count, and
    only when a fine repeat holds no repeated block itself: then it is a layer). A step holding fewer
    kernels than nine tenths of the largest is cut by the trace's edge."""
    import numpy as np

    n = len(codes)
    sizes = np.asarray(fine.ends) - np.asarray(fine.cuts)
    whole = np.asarray(fine.whole)
    odd = np.flatnonzero(whole & (sizes != fine.typical))
    if not len(odd):
        return None
    if len(odd) >= 2:
        spacing = np.diff(odd)
        if int(spacing[0]) < 2 or (spacing != spacing[0]).any():
            return None
    # The last repeat of the trace holds the last step's tail (its sampling), not the start of another.
    starting = [i for i in odd.tolist() if i < len(sizes) - 1] or odd.tolist()
    bounds = [fine.cuts[i] + int(np.argmax(gaps[fine.cuts[i] : fine.ends[i]])) for i in starting]
    wait = float(np.median(gaps[np.asarray(bounds)]))
    if layers is None:
        if wait < 2 * max(1.0, fine.cut_gap):
            return None
        typical_repeat = int(np.flatnonzero(whole & (sizes == fine.typical))[0])
        if find_layer_block(codes[fine.cuts[typical_repeat] : fine.ends[typical_repeat]]) is not None:
            return None  # the fine repeats hold repeated blocks themselves: they are steps, not layers
    cuts = sorted({0, *bounds})
    ends = [*cuts[1:], n]
    held = np.asarray(ends) - np.asarray(cuts)
    group_whole = held >= 0.9 * held.max()
    group = round(float(np.median(held[group_whole])) / fine.typical)
    if group_whole.sum() < 2 or group < 2 or (layers and abs(group - layers) > 1):
        return None
    return Period(
        repeats=len(cuts),
        cuts=tuple(cuts),
        ends=tuple(ends),
        whole=tuple(group_whole.tolist()),
        anchors=fine.anchors,
        per_layer_kernel=fine.anchors[0] if fine.anchors else None,
        layer_check=True,
        typical=round(float(np.median(held[group_whole]))),
        cut_gap=wait,
        covered=float(held[group_whole].sum()) / n,
        group=group,
    )


def _holds_block(period: Period, codes: np.ndarray) -> bool:
    """Whether a typical whole repeat of ``period`` is made of a block that repeats (layers)."""
    sizes = [b - a for a, b in zip(period.cuts, period.ends)]
    typical = min((i for i, w in enumerate(period.whole) if w), key=lambda i: abs(sizes[i] - period.typical))
    return find_layer_block(codes[period.cuts[typical] : period.ends[typical]]) is not None


def _per(period: Period) -> str:
    return f"~{period.typical} kernels ({period.repeats} repeats)"


def _try(
    codes: np.ndarray,
    gaps: np.ndarray,
    counts: np.ndarray,
    where: list[np.ndarray],
    names: list[str],
    m: int,
    layers: int | None,
) -> Period | None:
    """The period whose anchors run ``m`` times (``where[c]``: positions of code c), or None."""
    import numpy as np

    exact = np.flatnonzero(counts == m).tolist()
    near = np.flatnonzero((counts == m) | (counts == m - 1)).tolist()  # a step cut by an edge loses one
    anchor = min(exact, key=lambda c: int(where[c][0]))
    positions = where[anchor]
    lengths = np.diff(positions)
    typical = float(np.median(lengths))
    if typical < 2 or lengths.min() < typical / 2 or lengths.max() > typical * 2:
        return None
    # Kernels that run once between consecutive anchors (the part before the first counts too).
    agreeing = []
    for code in near:
        segment = np.searchsorted(positions, where[code], side="right") - 1
        if bool((np.diff(segment) > 0).all()):
            agreeing.append(code)
    full = [c for c in agreeing if counts[c] == m]
    if len(full) < 2:
        return (
            None  # a step runs several kernels once (embedding, LM head, sampling); one alone is an accident
        )
    cuts, whole, cut_gap = _best_cuts(codes, gaps, where, positions, full, typical)
    n = len(codes)
    ends = cuts[1:] + [n]
    if sum(whole) < 2:
        return None
    whole_counts = np.stack(
        [np.bincount(codes[a:b], minlength=len(counts)) for a, b, w in zip(cuts, ends, whole) if w]
    )
    typical_repeat = np.median(whole_counts, axis=0)
    similar = np.minimum(whole_counts, typical_repeat).sum(axis=1) / np.maximum(
        1.0, np.maximum(whole_counts, typical_repeat).sum(axis=1)
    )
    if float(np.median(similar)) < MIN_SIMILAR:
        return None  # the repeats do not look alike: not a period
    per_layer, layer_check = None, False
    if layers:
        # Holding the layers: most of a repeat's kernels run a multiple of the layer count in it.
        multiple = (whole_counts >= layers) & (whole_counts % layers == 0)
        steady = multiple.mean(axis=0) >= 0.5  # in most whole repeats
        if typical_repeat[steady].sum() >= LAYER_SHARE * typical_repeat.sum():
            best = int(np.argmax(np.where(steady, typical_repeat, -1)))
            per_layer, layer_check = names[best], True
        else:  # or it is made of a block repeated once per layer
            sizes = [b - a for a, b in zip(cuts, ends)]
            pick = min((i for i, w in enumerate(whole) if w), key=lambda i: abs(sizes[i] - typical))
            block = find_layer_block(codes[cuts[pick] : ends[pick]])
            if block is not None and abs(block.repeats - layers) <= 1:
                per_layer, layer_check = (
                    f"a block of {block.kernels} kernels repeated {block.repeats} times",
                    True,
                )
    covered = sum(b - a for a, b, w in zip(cuts, ends, whole) if w) / n
    return Period(
        repeats=m,
        cuts=tuple(cuts),
        ends=tuple(ends),
        whole=tuple(whole),
        anchors=tuple(names[c] for c in full),
        per_layer_kernel=per_layer,
        layer_check=layer_check,
        typical=round(float(typical)),
        cut_gap=cut_gap,
        covered=covered,
    )


def _best_cuts(
    codes: np.ndarray,
    gaps: np.ndarray,
    where: list[np.ndarray],
    positions: np.ndarray,
    full: list[int],
    typical: float,
) -> tuple[list[int], list[bool], float]:
    """Where the repeats start, which are whole, and the median gap at the cuts.

    Tried: before (or after) each anchor kernel in every repeat, and at one offset from the first
    anchor's calls (the widest gap found at one offset, just before the first per-step kernel, and
    starts spread over the span where the whole repeats fit between the trace's edges: a trace that
    begins with work of no step). Of each kind, the cuts leaving the most repeats whole (each anchor
    once, at least PARTIAL_SHARE of a typical repeat), then on the widest gaps.
    """
    import numpy as np

    n = len(codes)
    first = int(positions[0])
    lengths = np.diff(positions)
    # A step starts with a per-step kernel (embedding) or the one before it ended with one (sampling):
    # cut before (or after) the same anchor kernel in every repeat; relative to a kernel, not to a
    # position, so a prefill laid out unlike the decode steps after it is cut at the same place.
    slots = [where[c] for c in full] + [where[c] + 1 for c in full]
    by_anchor = [sorted({0, *(c for c in at.tolist() if c < n)}) for at in slots]
    offsets = [
        _widest_gap_offset(gaps, positions, int(lengths.min())),
        min(int(where[c][0]) for c in full) - first,
    ]
    latest = max(-first, n - round(len(positions) * typical) - first)
    offsets += (
        np.linspace(-first, latest, num=min(MAX_OFFSETS, latest + first + 1)).round().astype(int).tolist()
    )
    by_offset = [
        sorted({0} | {int(p) + offset for p in positions.tolist() if 0 < int(p) + offset < n})
        for offset in dict.fromkeys(offsets)
    ]
    best_anchor = max(
        (_score(cuts, codes, gaps, where, full, typical) for cuts in by_anchor), key=lambda b: b[0]
    )
    best_offset = max(
        (_score(cuts, codes, gaps, where, full, typical) for cuts in by_offset), key=lambda b: b[0]
    )
    # Cuts next to the per-step kernels are the trace's own structure: they win unless cuts at one
    # offset leave more than the two edge repeats more whole (on a CPU, a range around each layer
    # can leave longer gaps between layers than between steps, so gaps alone would cut inside a step).
    best = best_anchor if best_anchor[0][0] >= best_offset[0][0] - 2 else best_offset
    return best[1], best[2], best[0][1]


def _score(
    cuts: list[int],
    codes: np.ndarray,
    gaps: np.ndarray,
    where: list[np.ndarray],
    full: list[int],
    typical: float,
) -> tuple[tuple[int, float], list[int], list[bool]]:
    """((whole repeats, median gap at the cuts), the cuts, which repeats are whole)."""
    import numpy as np

    n = len(codes)
    bounds = np.asarray(cuts, dtype=np.int64)
    sizes = np.diff(np.append(bounds, n))
    whole = sizes >= PARTIAL_SHARE * typical
    for code in full:
        held = np.bincount(np.searchsorted(bounds, where[code], side="right") - 1, minlength=len(cuts))
        whole &= held == 1
    gap = float(np.median(gaps[bounds[1:]])) if len(bounds) > 1 else 0.0
    return (int(whole.sum()), gap), cuts, whole.tolist()


def _widest_gap_offset(gaps: np.ndarray, anchor: np.ndarray, span: int, sample: int = 32) -> int:
    """Offset from each anchor where consecutive repeats are separated: the widest idle gap found at
    the same offset in every repeat (steps end with a wait; layers run back to back)."""
    import numpy as np

    picks = anchor[1 : sample + 1]
    if not len(picks):
        return 0
    span = min(span, len(gaps) - int(picks.max()))
    if span <= 0:
        return 0
    window = gaps[picks[:, None] + np.arange(span)[None, :]]
    return int(np.argmax(np.median(window, axis=0)))


@dataclass(frozen=True)
class LayerBlock:
    """A block of kernels that repeats back to back inside one step: the layers."""

    repeats: int
    kernels: int  # kernels per block
    covered: float  # share of the step's kernels inside the repeated blocks


def find_layer_block(codes: np.ndarray) -> LayerBlock | None:
    """The block that repeats most inside one step's kernel sequence (``codes``): for each shift p,
    how many kernels equal the one p later; the best shift is one layer's kernels and the matches
    it finds, plus one block, are the layers. None when no block repeats over most of the step."""
    import numpy as np

    codes = codes[:MAX_STEP_SEARCH]
    n = len(codes)
    if n < 4:
        return None
    best_p, best_matches = 0, 0
    for p in range(1, min(n // 2, MAX_PERIOD_SEARCH) + 1):
        matches = int(np.count_nonzero(codes[:-p] == codes[p:]))
        if matches > best_matches:
            best_p, best_matches = p, matches
    if best_p == 0:
        return None
    # The layers: blocks of best_p kernels, back to back, each mostly equal to the one where the
    # matches start (a first layer reading the embedding differs in a kernel or two).
    equal = codes[:-best_p] == codes[best_p:]
    start = int(np.argmax(equal))
    block = codes[start : start + best_p]
    repeats = 1
    resync = int(RESYNC * best_p)  # below best_p: every move goes on in its direction
    for direction in (1, -1):
        at = start
        while True:  # the next block, a few kernels either way (a layer with one kernel more)
            nearby = [
                (int(np.count_nonzero(codes[b : b + best_p] == block)), b)
                for shift in range(-resync, resync + 1)
                if (b := at + direction * best_p + shift) >= 0 and b + best_p <= n
            ]
            if not nearby or max(nearby)[0] < SAME_BLOCK * best_p:
                break
            at = max(nearby)[1]
            repeats += 1
    covered = min(1.0, repeats * best_p / n)
    if repeats < 2 or covered < 0.5:
        return None
    return LayerBlock(repeats, best_p, covered)
