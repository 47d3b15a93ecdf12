"""Numpy views of an `EventTable`'s columns, the per-thread row groups the join needs, and codes for
the values of its object columns (names, args).

The join's passes (split rows by category and thread, sort by start, compare names) are plain
column work; doing them in numpy instead of a Python loop per row is what keeps a 500 MB trace's
join fast. Every helper returns its rows in exactly the order the per-row loops produced.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from tracer.model.events import EventTable

if TYPE_CHECKING:
    import numpy as np

_DUR_BITS = 42  # must match nesting's sort key: durations below 2**42 ns sort under their start
_FEW_THREADS = 16  # up to this many threads are split off by comparison, the rest by sorting


def column(values: Any):
    """A zero-copy int64/int8 numpy view of an ``array`` column (or a copy of a list)."""
    import numpy as np

    if hasattr(values, "typecode"):
        return np.frombuffer(values, dtype=np.int8 if values.typecode == "b" else np.int64)
    return np.asarray(values, dtype=np.int64)


def rows_where(cat, wanted: Sequence[int]):
    """Row numbers (ascending, numpy) whose category is one of `wanted`."""
    import numpy as np

    mask = np.zeros(len(cat), dtype=bool)
    for value in wanted:  # a few categories: one comparison each beats np.isin's setup
        mask |= cat == value
    return np.flatnonzero(mask)


def group_by_thread(table: EventTable, rows) -> dict[tuple[int, int], Any]:
    """`rows` (ascending, numpy) grouped by (pid, tid): threads in first-appearance order, each a
    numpy array of its rows, ascending."""
    import numpy as np

    groups: dict[tuple[int, int], Any] = {}
    if len(rows) == 0:
        return groups
    pid, tid = column(table.pid)[rows], column(table.tid)[rows]
    # Traces have few threads: one comparison pass per thread beats sorting by thread.
    left = np.arange(len(rows))
    while len(left) and len(groups) < _FEW_THREADS:
        first = left[0]
        mine = (pid[left] == pid[first]) & (tid[left] == tid[first])
        groups[(int(pid[first]), int(tid[first]))] = rows[left[mine]]
        left = left[~mine]
    if len(left):
        rows, pid, tid = rows[left], pid[left], tid[left]
        # One int per (pid, tid) pair: a 1-D unique is much faster than a row-wise (axis=0) one.
        _, pid_code = np.unique(pid, return_inverse=True)
        tid_values, tid_code = np.unique(tid, return_inverse=True)
        pair_code = pid_code.reshape(-1) * len(tid_values) + tid_code.reshape(-1)
        _, first, inverse = np.unique(pair_code, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        order = np.argsort(inverse, kind="stable")  # rows of each thread together, still ascending
        bounds = np.searchsorted(inverse[order], np.arange(len(first) + 1))
        grouped_rows = rows[order]
        for g in np.argsort(first, kind="stable").tolist():  # threads as the row loop met them
            key = (int(pid[first[g]]), int(tid[first[g]]))
            groups[key] = grouped_rows[bounds[g] : bounds[g + 1]]
    return groups


def sorted_by_start(table: EventTable, rows: Iterable[int]):
    """Rows (numpy) by (start, longer first), ties in the given order; None if a duration breaks the key."""
    import numpy as np

    if isinstance(rows, np.ndarray):
        picked = rows.astype(np.int64, copy=False)
    elif isinstance(rows, list):
        picked = np.asarray(rows, dtype=np.int64)
    else:
        picked = np.fromiter(rows, dtype=np.int64)
    if len(picked) == 0:
        return picked
    dur = column(table.dur_ns)[picked]
    if dur.min() < 0 or dur.max() >= 1 << _DUR_BITS:
        return None  # the caller's exact Python key handles what (start, -dur) would not
    return picked[start_order(column(table.ts_ns)[picked], dur)]


def start_order(starts, durations):
    """The order that sorts spans by (start, longer first), ties in their given order (stable).

    A stable argsort of the starts alone is many times faster than a two-key lexsort, and traces
    rarely have equal starts: only the runs of equal starts are then ordered by duration.
    """
    import numpy as np

    order = np.argsort(starts, kind="stable")
    ranked = starts[order]
    tied = ranked[1:] == ranked[:-1]
    if tied.any():
        in_run = np.zeros(len(order), dtype=bool)
        in_run[1:] |= tied
        in_run[:-1] |= tied
        at = np.flatnonzero(in_run)
        run = np.cumsum(np.concatenate([[True], ~tied]))[at]
        order[at] = order[at][np.lexsort((-durations[order[at]], run))]
    return order


def values_at(values: list[Any], rows) -> list[Any]:
    """``[values[r] for r in rows]``, at C speed."""
    if len(rows) == 0:
        return []
    picked = itemgetter(*rows.tolist())(values)
    return list(picked) if len(rows) > 1 else [picked]


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, ascending (a sort: faster than `np.unique`'s hashing on int64 here; a
    stable one, timsort, takes the runs of rows already in order as they are)."""
    import numpy as np

    ordered = np.sort(values, kind="stable")
    if len(ordered) < 2:
        return ordered
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])]


class ValueCodes:
    """Equal values get equal small ints (codes), however many distinct objects hold them."""

    def __init__(self) -> None:
        self.codes: dict[Any, int] = {}

    def of(self, values: list[Any]) -> np.ndarray:
        """Codes of `values` (new values coded in order of first appearance). Two passes of dict
        lookups in C; the loader interns names, so most compare by identity (a sort of the values'
        ids, as before, took 3x as long)."""
        import numpy as np

        codes = self.codes
        for value in dict.fromkeys(values):
            codes.setdefault(value, len(codes))
        return np.fromiter(map(codes.__getitem__, values), dtype=np.int64, count=len(values))

    def flags(self, predicate) -> np.ndarray:
        """``predicate(value)`` for every value coded so far, indexed by code."""
        import numpy as np

        out = np.zeros(len(self.codes), dtype=bool)
        for value, code in self.codes.items():
            out[code] = predicate(value)
        return out
