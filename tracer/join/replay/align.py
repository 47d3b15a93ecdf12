"""Aligning a replayed graph's kernels to a profiled capture's launches: which capture, which position.

Replay kernel k of a graph is capture launch k when the kinds (kernel, memcpy, memset) agree at
every position; a replay spread over several streams is merged back into capture order stream by
stream (beam search); a banded sequence alignment takes over when the counts differ. Kernel names
only check a match (against what the same origin launched eagerly, or what its op computes): one
name often comes from several lines, so names alone never decide.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeAlias

from tracer.join.replay.capture import Capture, gpu_kind
from tracer.model.events import EventTable
from tracer.model.origin import Origin

BAND = 64  # extra diagonals the sequence alignment explores beyond the length difference
BEAM = 32  # partial interleavings the stream merge keeps
BEAM_STREAMS = 4  # more streams than this in one replay: a greedy merge (a beam costs streams^2 per kernel)

# Kernel names each origin launched outside graphs (eager): a check on the position-based match.
EagerNames = dict[Origin, set[str]]


@dataclass(frozen=True)
class Placement:
    """Where one replayed graph's kernels (in replay order) sit in the best-fitting capture."""

    capture: int  # index into the captures searched
    positions: list[int | None]  # per replay kernel: its capture position, None when unplaced
    method: str  # "launch order" or "sequence alignment"
    evidence: tuple[str, ...]
    note: str | None = None  # a doubt worth the trace's notes


@dataclass(frozen=True)
class StreamMerge:
    """A multi-stream replay merged into one capture's launch order."""

    capture: int
    order: list[tuple[int, int]]  # (stream, index within that stream) per capture position
    mismatches: int  # positions whose kernel family disagrees with the launch's op


def merge_streams(
    table: EventTable, per_stream: dict[int, list[int]], captures: Sequence[Capture], eager: EagerNames
) -> StreamMerge | None:
    """The best capture and interleaving for a replay whose kernels ran on several streams.

    Without node ids, start times do not give capture order across streams (concurrent branches
    start in either order). Each stream's own order is kept; a beam search interleaves the
    streams so that, position by position, the kernel's kind matches the captured launch and its
    family (GEMM, copy, softmax, ...) matches what the launch's op computes; ties keep start order.
    """
    streams = sorted(per_stream)
    seqs = [per_stream[s] for s in streams]
    total = sum(len(q) for q in seqs)
    kinds = sorted(gpu_kind(table.cat[r]) for q in seqs for r in q)
    best = None
    for index, cap in enumerate(captures):
        if len(cap.kinds) != total or sorted(cap.kinds) != kinds:
            continue
        order, score, mismatches = _beam_merge(table, seqs, cap, eager)
        if order is not None and (best is None or score > best[0]):
            best = (score, index, [(streams[s], i) for s, i in order], mismatches)
    if best is None:
        return None
    return StreamMerge(best[1], best[2], best[3])


def best_capture(
    kinds: list[str], names: list[str], captures: Sequence[Capture], eager: EagerNames
) -> Placement:
    """The capture (and position per replay kernel) that fits a replay's kind and name sequence best."""
    scored = []
    for index, cap in enumerate(captures):
        if len(cap.kinds) == len(kinds) and cap.kinds == kinds:
            positions: list[int | None] = list(range(len(kinds)))
            agree = _name_score(names, cap, positions, eager)
            scored.append((2.0 + agree, index, positions, "launch order"))
        else:
            positions, matched = _sequence_alignment(kinds, names, cap, eager)
            scored.append(
                (matched / max(len(kinds), len(cap.kinds), 1), index, positions, "sequence alignment")
            )
    scored.sort(key=lambda s: (-s[0], -captures[s[1]].record.start_ns))
    score, index, positions, method = scored[0]
    cap = captures[index]
    evidence: tuple[str, ...]
    if method == "launch order":
        evidence = (
            (
                f"replay kernel k = capture launch k: {len(kinds)} kernels per replay, {len(cap.kinds)} "
                f"captured launches, kinds agree at every position"
            ),
        )
    else:
        placed = sum(p is not None for p in positions)
        evidence = (
            (
                f"sequence alignment: {placed} of {len(kinds)} kernels per replay placed among "
                f"{len(cap.kinds)} captured launches (counts or kinds differ)"
            ),
        )
    tied = [s for s in scored[1:] if abs(s[0] - score) < 1e-9 and s[3] == method]
    if tied:
        mine = [cap.origins[p] if p is not None else None for p in positions]
        differ = [
            s for s in tied if [captures[s[1]].origins[p] if p is not None else None for p in s[2]] != mine
        ]
        if differ:
            evidence += (
                (
                    f"{len(differ)} other capture(s) fit equally well with different origins; "
                    "the latest one was taken"
                ),
            )
            note = "a replayed graph fits several profiled captures with different origins"
            return Placement(index, positions, "sequence alignment", evidence, note)
        evidence += (f"{len(tied)} other capture(s) fit equally well, with the same origins",)
    return Placement(index, positions, method, evidence)


def _name_score(names: list[str], cap: Capture, positions: list[int | None], eager: EagerNames) -> float:
    """Share of positions whose kernel name is one their origin launched eagerly (where known)."""
    known = agree = 0
    for name, pos in zip(names, positions):
        launched = eager.get(cap.origins[pos]) if pos is not None else None
        if launched:
            known += 1
            agree += name in launched
    return agree / known if known else 0.0


# What a kernel computes, from its name, and what an op computes: used only to order concurrent
# kernels and to check a match, never to pick between origins that launch the same kernel name.
_KERNEL_FAMILIES = (
    ("sort", re.compile(r"topk|sort", re.IGNORECASE)),
    ("gemm", re.compile(r"gemm|nvjet|cutlass|xmma|splitk|cublas|wgmma", re.IGNORECASE)),
    ("softmax", re.compile(r"softmax", re.IGNORECASE)),
    ("copy", re.compile(r"copy", re.IGNORECASE)),
    ("gather", re.compile(r"gather|index", re.IGNORECASE)),
    ("reduce", re.compile(r"reduce_kernel", re.IGNORECASE)),
    ("communication", re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter", re.IGNORECASE)),
)
_OP_FAMILIES = {
    **dict.fromkeys(("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::_scaled_mm"), "gemm"),
    **dict.fromkeys(("aten::copy_", "aten::_to_copy", "aten::clone", "aten::cat"), "copy"),
    **dict.fromkeys(("aten::_softmax", "aten::softmax", "aten::_log_softmax"), "softmax"),
    **dict.fromkeys(
        ("aten::index", "aten::index_select", "aten::gather", "aten::_index_put_impl_"), "gather"
    ),
    **dict.fromkeys(("aten::embedding", "aten::take"), "gather"),
    **dict.fromkeys(("aten::topk", "aten::sort", "aten::argsort"), "sort"),
    **dict.fromkeys(("aten::sum", "aten::mean", "aten::amax", "aten::max", "aten::norm"), "reduce"),
}


@lru_cache(maxsize=4096)  # once per distinct name, not per launch: names can be long
def _kernel_family(name: str) -> str | None:
    return next((family for family, pattern in _KERNEL_FAMILIES if pattern.search(name)), None)


def _fit(op: str, kernel: str) -> int:
    """+1 when op and kernel name the same family, -1 when both are known and differ, else 0."""
    wanted = _OP_FAMILIES.get(op)
    found = _kernel_family(kernel)
    if wanted is None or found is None:
        return 0
    return 1 if wanted == found else -1


def families_disagree(op: str, kernel: str) -> bool:
    """Whether a kernel's name says it computes something else than its capture-time op."""
    return _fit(op, kernel) < 0


def _beam_merge(table: EventTable, seqs: list[list[int]], cap: Capture, eager: EagerNames):
    """Interleave per-stream sequences onto the capture's launches; (order, score, mismatches).

    A beam state holds its streams' heads (a tuple: one per stream) and its order as a linked list,
    so growing it costs the number of streams, not the positions so far; past `BEAM_STREAMS` streams
    the merge is greedy (linear): a beam over hundreds of streams costs their square per position."""
    if len(seqs) > BEAM_STREAMS:
        return _greedy_merge(table, seqs, cap, eager)
    Order: TypeAlias = tuple  # (stream, index, previous Order) or ()
    beams: list[tuple[float, tuple[int, ...], Order, int]] = [(0.0, (0,) * len(seqs), (), 0)]
    for pos in range(len(cap.kinds)):
        grown: dict[tuple[int, ...], tuple[float, tuple[int, ...], Order, int]] = {}
        for score, heads, order, mismatches in beams:
            starts = [table.ts_ns[q[h]] if h < len(q) else None for q, h in zip(seqs, heads)]
            earliest = min((t for t in starts if t is not None), default=None)
            for s, q in enumerate(seqs):
                h = heads[s]
                if h >= len(q):
                    continue
                row = q[h]
                if gpu_kind(table.cat[row]) != cap.kinds[pos]:
                    continue
                fit = _launch_fit(table, row, cap, pos, eager)
                gain = 2.0 * fit + (0.5 if starts[s] == earliest else 0.0)
                key = heads[:s] + (h + 1,) + heads[s + 1 :]
                candidate = (score + gain, key, (s, h, order), mismatches + (fit < 0))
                if key not in grown or candidate[0] > grown[key][0]:
                    grown[key] = candidate
        if not grown:
            return None, float("-inf"), 0
        beams = sorted(grown.values(), key=lambda b: -b[0])[:BEAM]
    score, _, order, mismatches = beams[0]
    return _unlinked(order), score, mismatches


def _launch_fit(table: EventTable, row: int, cap: Capture, pos: int, eager: EagerNames) -> int:
    known = eager.get(cap.origins[pos]) if cap.origins else None
    if known:
        return 1 if table.name[row] in known else -1
    return _fit(cap.ops[pos], table.name[row])


def _unlinked(order: tuple) -> list[tuple[int, int]]:
    out = []
    while order:
        stream, index, order = order
        out.append((stream, index))
    out.reverse()
    return out


def _greedy_merge(table: EventTable, seqs: list[list[int]], cap: Capture, eager: EagerNames):
    """Each capture position takes the earliest-starting stream head of its kind (ties: stream order):
    O(launches x log streams). Each stream's own order is kept, as in the beam."""
    import heapq

    heads: dict[str, list[tuple[int, int]]] = {}  # kind -> heap of (start, stream)
    position = [0] * len(seqs)

    def push(stream: int) -> None:
        q = seqs[stream]
        if position[stream] < len(q):
            row = q[position[stream]]
            heapq.heappush(heads.setdefault(gpu_kind(table.cat[row]), []), (table.ts_ns[row], stream))

    for stream in range(len(seqs)):
        push(stream)
    order: list[tuple[int, int]] = []
    score = 0.0
    mismatches = 0
    for pos, kind in enumerate(cap.kinds):
        waiting = heads.get(kind)
        if not waiting:
            return None, float("-inf"), 0
        _, stream = heapq.heappop(waiting)
        index = position[stream]
        fit = _launch_fit(table, seqs[stream][index], cap, pos, eager)
        score += 2.0 * fit + 0.5
        mismatches += fit < 0
        order.append((stream, index))
        position[stream] += 1
        push(stream)
    return order, score, mismatches


def _sequence_alignment(
    kinds: list[str], names: list[str], cap: Capture, eager: EagerNames
) -> tuple[list[int | None], int]:
    """Banded global alignment of the replay sequence to the capture's launches.

    A match needs the same kind; it scores more when the kernel name is one the capture position's
    origin launched eagerly. Gaps cost 1, except capture launches skipped at either end (a trace
    cut in the middle of a replay). Returns each replay kernel's capture position (or None).
    """
    n, m = len(kinds), len(cap.kinds)
    if n == 0 or m == 0:
        return [None] * n, 0
    band = abs(n - m) + BAND
    neg = float("-inf")
    # Row i keeps only columns lo[i]..hi[i]; moves: 1 diagonal, 2 skip a replay kernel, 3 skip a launch.
    lo = [0] * (n + 1)
    hi = [m] * (n + 1)
    scores: list[list[float]] = [[0.0] * (m + 1)]  # leading capture launches are free to skip
    moves: list[bytearray] = [bytearray([3]) * (m + 1)]

    def at(i: int, j: int) -> float:
        return scores[i][j - lo[i]] if lo[i] <= j <= hi[i] else neg

    for i in range(1, n + 1):
        centre = i * m // n
        lo[i], hi[i] = max(0, centre - band), min(m, centre + band)
        row = [neg] * (hi[i] - lo[i] + 1)
        how_row = bytearray(len(row))
        scores.append(row)
        moves.append(how_row)
        kind, name = kinds[i - 1], names[i - 1]
        skip_cost = 0.0 if i == n else 1.0  # trailing capture launches are free to skip
        for j in range(lo[i], hi[i] + 1):
            best, how = at(i - 1, j) - 1.0, 2
            if j > lo[i] and row[j - 1 - lo[i]] - skip_cost > best:
                best, how = row[j - 1 - lo[i]] - skip_cost, 3
            if j > 0 and kind == cap.kinds[j - 1]:
                diagonal = at(i - 1, j - 1)
                if diagonal > neg:
                    known = eager.get(cap.origins[j - 1]) if cap.origins else None
                    gain = 1.0 if not known else (2.0 if name in known else 0.25)
                    if diagonal + gain > best:
                        best, how = diagonal + gain, 1
            row[j - lo[i]], how_row[j - lo[i]] = best, how
    positions: list[int | None] = [None] * n
    i = n
    j = max(range(lo[n], hi[n] + 1), key=lambda c: scores[n][c - lo[n]])
    matched = 0
    while i > 0:
        how = moves[i][j - lo[i]] if lo[i] <= j <= hi[i] else 2
        if how == 1:
            positions[i - 1] = j - 1
            matched += 1
            i, j = i - 1, j - 1
        elif how == 3 and j > 0:
            j -= 1
        else:
            i -= 1
    return positions, matched
