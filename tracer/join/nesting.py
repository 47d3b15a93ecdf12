"""Interval-containment sweeps per thread: who encloses whom, in O(n log n).

Two families nest perfectly on their own, and interleave with each other (a record_function range
begins inside a Python call), so each is swept on its own:
- the op family: cpu_ops, record_function ranges and runtime/driver calls -> `op_parents`;
- Python frames -> `frame_parents`, and for any query row, its innermost enclosing frame.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence

from tracer.join.columns import column, sorted_by_start
from tracer.model.events import NONE, Cat, EventTable

# Rounding ts and dur to ns separately can leave a child 1-2 ns past its parent's end.
TOLERANCE_NS = 2
_DUR_BITS = 42  # durations below 2**42 ns (73 minutes) sort under their start time in one int key


def by_start(table: EventTable, rows: Iterable[int]) -> list[int]:
    """Rows by start time, longer first at equal starts (so a parent precedes its children)."""
    ordered = sorted_by_start(table, rows)  # numpy: the same order, without a Python key per row
    if ordered is not None:
        return ordered
    ts, dur = table.ts_ns, table.dur_ns
    shift = _DUR_BITS
    return sorted(rows, key=lambda r: (ts[r] << shift) - dur[r])


def _starts_ends(table: EventTable, rows: Sequence[int]) -> tuple[list[int], list[int]]:
    """Start and end (ns) of each row, as lists: the sweeps below read them once per row."""
    import numpy as np

    picked = np.asarray(rows, dtype=np.int64)
    starts = column(table.ts_ns)[picked]
    return starts.tolist(), (starts + column(table.dur_ns)[picked]).tolist()


def enclosing_parents(
    table: EventTable, sorted_rows: Sequence[int], parents: array, leaves: set[int], top_ops: set[int]
) -> None:
    """Set ``parents[r]`` to the innermost row of `sorted_rows` enclosing r (NONE at top level).

    Rows whose category is in `leaves` get a parent but never become one (runtime calls). CPU ops
    with no CPU op around them (ranges do not count) are added to `top_ops`.
    """
    _, row_ends = _starts_ends(table, sorted_rows)
    cat = table.cat
    cpu_op = Cat.CPU_OP
    stack: list[int] = []
    ends: list[int] = []
    ops_open: list[int] = []  # CPU ops on the stack up to and including each entry
    for row, end in zip(sorted_rows, row_ends):
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
    frame_starts, frame_ends = _starts_ends(table, sorted_frames)
    query_starts, _ = _starts_ends(table, sorted_queries)
    queries = sorted_queries
    n_queries = len(queries)
    stack: list[int] = []
    ends: list[int] = []
    j = 0

    def answer_queries_before(limit: int | None) -> None:
        nonlocal j
        while j < n_queries and (limit is None or query_starts[j] < limit):
            start = query_starts[j]
            while ends and ends[-1] < start:
                stack.pop()
                ends.pop()
            innermost[queries[j]] = stack[-1] if stack else NONE
            j += 1

    for row, start, end in zip(sorted_frames, frame_starts, frame_ends):
        # A frame starting at the same instant as a query goes first: it may enclose it.
        if j < n_queries and query_starts[j] < start:
            answer_queries_before(start)
        while ends and ends[-1] + TOLERANCE_NS < end:
            stack.pop()
            ends.pop()
        frame_parents[row] = stack[-1] if stack else NONE
        stack.append(row)
        ends.append(end)
    answer_queries_before(None)
