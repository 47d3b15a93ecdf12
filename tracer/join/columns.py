"""Numpy views of an `EventTable`'s integer columns, and the per-thread row groups the join needs.

The join's first passes (split rows by category and thread, sort by start) are plain column work;
doing them in numpy instead of a Python loop per row is what keeps a 500 MB trace's join fast.
Every helper returns Python lists/dicts in exactly the order the per-row loops produced.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tracer.model.events import EventTable

_DUR_BITS = 42  # must match nesting's sort key: durations below 2**42 ns sort under their start


def column(values: Any):
    """A zero-copy int64/int8 numpy view of an ``array`` column (or a copy of a list)."""
    import numpy as np

    if hasattr(values, "typecode"):
        return np.frombuffer(values, dtype=np.int8 if values.typecode == "b" else np.int64)
    return np.asarray(values, dtype=np.int64)


def rows_where(cat, wanted: Sequence[int]):
    """Row numbers (ascending, numpy) whose category is one of `wanted`."""
    import numpy as np

    return np.flatnonzero(np.isin(cat, np.asarray(wanted, dtype=cat.dtype)))


def group_by_thread(table: EventTable, rows) -> dict[tuple[int, int], list[int]]:
    """`rows` (ascending) grouped by (pid, tid): threads in first-appearance order, rows ascending."""
    import numpy as np

    if len(rows) == 0:
        return {}
    pid, tid = column(table.pid)[rows], column(table.tid)[rows]
    # One int per (pid, tid) pair: a 1-D unique is much faster than a row-wise (axis=0) one.
    _, pid_code = np.unique(pid, return_inverse=True)
    tid_values, tid_code = np.unique(tid, return_inverse=True)
    pair_code = pid_code.reshape(-1) * len(tid_values) + tid_code.reshape(-1)
    _, first, inverse = np.unique(pair_code, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")  # rows of each thread together, still ascending
    bounds = np.searchsorted(inverse[order], np.arange(len(first) + 1))
    grouped_rows = rows[order]
    groups = {}
    for g in np.argsort(first, kind="stable").tolist():  # threads as the row loop met them
        key = (int(pid[first[g]]), int(tid[first[g]]))
        groups[key] = grouped_rows[bounds[g] : bounds[g + 1]].tolist()
    return groups


def first_row_by_value(values, rows, none: int, last: bool = False) -> dict[int, int]:
    """{value: its first (or last) row among `rows`} for the rows whose value is not `none`."""
    import numpy as np

    picked = rows[values[rows] != none]
    if last:
        picked = picked[::-1]
    keys, at = np.unique(values[picked], return_index=True)
    return dict(zip(keys.tolist(), picked[at].tolist()))


def sorted_by_start(table: EventTable, rows: Iterable[int]) -> list[int] | None:
    """Rows by (start, longer first), ties in the given order; None if a duration breaks the key."""
    import numpy as np

    picked = np.asarray(rows, dtype=np.int64) if isinstance(rows, list) else np.fromiter(rows, dtype=np.int64)
    if len(picked) == 0:
        return []
    dur = column(table.dur_ns)[picked]
    if dur.min() < 0 or dur.max() >= 1 << _DUR_BITS:
        return None  # the caller's exact Python key handles what (start, -dur) would not
    order = np.lexsort((-dur, column(table.ts_ns)[picked]))  # stable, like sorted()
    return picked[order].tolist()
