"""Interval-containment sweeps per thread: who encloses whom, in O(n log n).

Two families nest perfectly on their own, and interleave with each other (a record_function range
begins inside a Python call), so each is swept on its own:
- the op family: cpu_ops, record_function ranges and runtime/driver calls -> `op_parents`;
- Python frames -> `frame_parents`, and for any query row, its innermost enclosing frame.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence

from tracer.model.events import NONE, Cat, EventTable

# Rounding ts and dur to ns separately can leave a child 1-2 ns past its parent's end.
TOLERANCE_NS = 2
_DUR_BITS = 42  # durations below 2**42 ns (73 minutes) sort under their start time in one int key


def by_start(table: EventTable, rows: Iterable[int]) -> list[int]:
    """Rows by start time, longer first at equal starts (so a parent precedes its children)."""
    ts, dur = table.ts_ns, table.dur_ns
    shift = _DUR_BITS
    return sorted(rows, key=lambda r: (ts[r] << shift) - dur[r])


def enclosing_parents(
    table: EventTable, sorted_rows: Sequence[int], parents: array, leaves: set[int], top_ops: set[int]
) -> None:
    """Set ``parents[r]`` to the innermost row of `sorted_rows` enclosing r (NONE at top level).

    Rows whose category is in `leaves` get a parent but never become one (runtime calls). CPU ops
    with no CPU op around them (ranges do not count) are added to `top_ops`.
    """
    ts, dur, cat = table.ts_ns, table.dur_ns, table.cat
    cpu_op = Cat.CPU_OP
    stack: list[int] = []
    ends: list[int] = []
    ops_open: list[int] = []  # CPU ops on the stack up to and including each entry
    for row in sorted_rows:
        end = ts[row] + dur[row]
        while ends and ends[-1] + TOLERANCE_NS < end:
            stack.pop()
            ends.pop()
            ops_open.pop()
        parents[row] = stack[-1] if stack else NONE
        category = cat[row]
        if category in leaves:
            continue
        below = ops_open[-1] if ops_open else 0
        if category == cpu_op:
            if below == 0:
                top_ops.add(row)
            below += 1
        stack.append(row)
        ends.append(end)
        ops_open.append(below)


def frames_around(
    table: EventTable,
    sorted_frames: Sequence[int],
    sorted_queries: Sequence[int],
    frame_parents: array,
    innermost: dict[int, int],
) -> None:
    """Sweep Python frames; set their parents, and ``innermost[q]`` = the frame around each query's start."""
    ts, dur = table.ts_ns, table.dur_ns
    stack: list[int] = []
    ends: list[int] = []
    frames, queries = sorted_frames, sorted_queries
    i = j = 0
    n_frames, n_queries = len(frames), len(queries)
    while i < n_frames or j < n_queries:
        # A frame starting at the same instant as a query goes first: it may enclose it.
        if j >= n_queries or (i < n_frames and ts[frames[i]] <= ts[queries[j]]):
            row = frames[i]
            i += 1
            end = ts[row] + dur[row]
            while ends and ends[-1] + TOLERANCE_NS < end:
                stack.pop()
                ends.pop()
            frame_parents[row] = stack[-1] if stack else NONE
            stack.append(row)
            ends.append(end)
        else:
            row = queries[j]
            j += 1
            start = ts[row]
            while ends and ends[-1] < start:
                stack.pop()
                ends.pop()
            innermost[row] = stack[-1] if stack else NONE
