"""Leave out events nested deeper than any real profile nests them, so no later stage pays depth^2.

The join keeps each context (ranges, ops, frames around a kernel) as a chain, and a chain of depth d
costs d^2 to build; a crafted trace with ranges nested 5,000 deep took gigabytes. Real ones nest
record_function ranges and ops a few tens deep, and Python frames at most as deep as Python's
recursion limit (1,000), so events beyond `MAX_DEPTH` are dropped here, with a note saying so.
Depth per thread is computed without a Python loop per event: for intervals that nest, the ones
containing an event are those started at or before it and not yet ended when it starts.
"""

from __future__ import annotations

import numpy as np

from tracer.model.events import Cat, EventTable
from tracer.model.threads import one_thread, thread_numbers

MAX_DEPTH = {
    Cat.USER_ANNOTATION: 256,
    Cat.CPU_OP: 256,
    Cat.PYTHON_FUNCTION: 1_100,
}


def without_deep_nesting(table: EventTable) -> tuple[EventTable, int]:
    """`table` without the events nested deeper than `MAX_DEPTH` in their thread (and category), and
    how many were left out (the table itself when none were)."""
    cats = np.frombuffer(table.cat, dtype=np.int8) if len(table) else np.zeros(0, np.int8)
    drop = np.zeros(len(table), dtype=bool)
    for cat, limit in MAX_DEPTH.items():
        rows = np.flatnonzero(cats == int(cat))
        if len(rows) <= limit:
            continue
        drop[rows[_depths(table, rows) > limit]] = True
    dropped = int(drop.sum())
    if not dropped:
        return table, 0
    return table.taken(np.flatnonzero(~drop).tolist()), dropped


def _depths(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """Nesting depth (1 = outermost) of each of `rows` among `rows` of the same (pid, tid)."""
    pid = np.asarray(table.pid, dtype=np.int64)[rows]
    tid = np.asarray(table.tid, dtype=np.int64)[rows]
    start = np.asarray(table.ts_ns, dtype=np.int64)[rows]
    end = start + np.asarray(table.dur_ns, dtype=np.int64)[rows]
    lanes = _lanes(pid, tid, start, end)
    if lanes is not None:  # all threads in one pass: each thread's times shifted past the one before
        if not isinstance(lanes, int):
            start, end = start + lanes, end + lanes
        # kind="stable" (timsort): a trace's rows come nearly in start order, and timsort takes the
        # runs as they are (1 ms for 1M python frames, where the default quicksort takes 60 ms).
        # Rows already in start order (a thread's frames as Kineto writes them) are their own sort:
        # no copy of a million starts to fault in.
        in_order = not (start[1:] < start[:-1]).any()
        begun = np.searchsorted(start if in_order else np.sort(start, kind="stable"), start, side="right")
        begun -= np.searchsorted(np.sort(end, kind="stable"), start, side="right")
        return begun
    depth = np.zeros(len(rows), dtype=np.int64)
    order = np.lexsort((start, tid, pid))
    keys = np.stack((pid[order], tid[order]), axis=1)
    bounds = np.flatnonzero(np.any(keys[1:] != keys[:-1], axis=1)) + 1
    for group in np.split(order, bounds):
        starts = np.sort(start[group], kind="stable")
        ends = np.sort(end[group], kind="stable")
        begun = np.searchsorted(starts, start[group], side="right")  # started at or before it (itself too)
        over = np.searchsorted(ends, start[group], side="right")  # ended by the time it starts
        depth[group] = begun - over
    return depth


def _lanes(pid: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray | int | None:
    """A shift per row that lays each thread's times after the previous thread's, so that rows of
    other threads count alike among those started and those ended (their counts cancel); 0 (no
    shift) when all rows are of one thread; None when the shifted times would not fit in int64."""
    if len(start) == 0:
        return None
    if one_thread(pid, tid):
        return 0
    span = int(end.max()) - int(start.min()) + 1
    thread = thread_numbers(pid, tid)
    lanes = int(thread.max()) + 1
    if span <= 0 or lanes * span >= 1 << 61 or max(abs(int(start.min())), abs(int(end.max()))) >= 1 << 61:
        return None
    return thread.astype(np.int64) * span
