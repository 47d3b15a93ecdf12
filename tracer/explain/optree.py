"""The CPU op tree of a trace: parent of each cpu_op, self time, and "what ran next on this thread".

Built per thread on first use: a GPU trace needs only the launching thread, and only for the few
calls whose waste is checked; a CPU-only trace needs every thread (self times).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

from tracer.model.events import NONE, Cat, EventTable

if TYPE_CHECKING:
    import numpy as np

_BLOCK = 512  # ops per block of `_block_ends`: a parent search scans one block and the block maxima


def rows_of(events: EventTable, *cats: Cat) -> list[int]:
    """Rows of the given categories, in table order (numpy does the scan)."""
    import numpy as np

    column = np.frombuffer(events.cat, dtype=np.int8)
    mask = np.isin(column, np.asarray([int(c) for c in cats], dtype=np.int8))
    return np.flatnonzero(mask).tolist()


class OpTree:
    """cpu_op rows per (pid, tid) in start order, with their parents by the nesting stack sweep.

    cpu_ops nest perfectly per thread (trace facts), so a stack sweep gives exact parents: an op's
    parent is the latest op before it (in start order) that ends after it starts. A GPU trace asks
    for a few ops' ancestors only, so those are found one by one (`_parent_of`); self times need
    every parent, found in one sweep per thread.
    """

    def __init__(self, events: EventTable) -> None:
        self.events = events
        self._by_thread: dict[tuple[int, int], np.ndarray] | None = None
        self.parent = array("q", [NONE]) * len(events)  # by row, filled per thread for self times
        self._parents_done: set[tuple[int, int]] = set()
        self.child_ns: dict[int, int] = {}  # filled per thread on the first self_ns (CPU traces)
        self._child_ns_done: set[tuple[int, int]] = set()
        self.thread_rows: dict[tuple[int, int], np.ndarray] = {}  # in start order, longer first
        self.thread_starts: dict[tuple[int, int], np.ndarray] = {}
        self._thread_ends: dict[tuple[int, int], np.ndarray] = {}
        self._block_ends: dict[tuple[int, int], np.ndarray] = {}  # latest end per block of ops
        self._position: np.ndarray | None = None  # by row: its index in its thread's start order

    def _thread(self, row: int) -> tuple[int, int]:
        thread = (self.events.pid[row], self.events.tid[row])
        if thread not in self.thread_rows:
            self._build(thread)
        return thread

    def _build(self, thread: tuple[int, int]) -> None:
        import numpy as np

        from tracer.join.columns import column, group_by_thread, start_order

        events = self.events
        if self._by_thread is None:
            cpu_ops = np.flatnonzero(column(events.cat) == int(Cat.CPU_OP))
            self._by_thread = group_by_thread(events, cpu_ops)
            self._position = np.full(len(events), -1, dtype=np.int64)
        position = self._position
        assert position is not None  # made with _by_thread, just above
        rows = self._by_thread.get(thread, np.zeros(0, dtype=np.int64))
        ts = column(events.ts_ns)[rows]
        dur = column(events.dur_ns)[rows]
        order = start_order(ts, dur)  # by start, longer first (parents first)
        rows, ts = rows[order], ts[order]
        self.thread_rows[thread] = rows
        self.thread_starts[thread] = ts
        self._thread_ends[thread] = ends = ts + dur[order]
        position[rows] = np.arange(len(rows))
        if len(ends):
            self._block_ends[thread] = np.maximum.reduceat(ends, np.arange(0, len(ends), _BLOCK))

    def _parents(self, thread: tuple[int, int]) -> None:
        """Every parent on the thread: the stack pops the ops that ended by this one's start."""
        import numpy as np

        from tracer.join.columns import column
        from tracer.join.sweep import stack_tops

        self._parents_done.add(thread)
        rows, starts = self.thread_rows[thread], self.thread_starts[thread]
        tops = stack_tops(
            starts + 1, self._thread_ends[thread], np.ones(len(rows), dtype=bool), monotone=True
        )
        inner = tops >= 0
        column(self.parent)[rows[inner]] = rows[tops[inner]]

    def _parent_of(self, row: int) -> int:
        """The parent of one op: the latest op before it ending after it starts (NONE if none)."""
        import numpy as np

        thread = self._thread(row)
        if thread in self._parents_done:
            return self.parent[row]
        assert self._position is not None  # _thread built the thread's rows
        at = int(self._position[row])
        if at < 0:
            return NONE
        ends, blocks = self._thread_ends[thread], self._block_ends[thread]
        start = self.events.ts_ns[row]
        block = at // _BLOCK
        hits = np.flatnonzero(ends[block * _BLOCK : at] > start)
        if not len(hits):
            earlier = np.flatnonzero(blocks[:block] > start)
            if not len(earlier):
                return NONE
            block = int(earlier[-1])
            hits = np.flatnonzero(ends[block * _BLOCK : (block + 1) * _BLOCK] > start)
        return int(self.thread_rows[thread][block * _BLOCK + int(hits[-1])])

    def _sum_children(self, thread: tuple[int, int]) -> None:
        """child_ns of the thread's ops: the time of their direct children (integer sums)."""
        if thread not in self._parents_done:
            self._parents(thread)
        self._child_ns_done.add(thread)
        parent, child_ns, dur = self.parent, self.child_ns, self.events.dur_ns
        for row in self.thread_rows[thread].tolist():
            top = parent[row]
            if top != NONE:
                child_ns[top] = child_ns.get(top, 0) + dur[row]

    def self_ns(self, row: int) -> int:
        thread = self._thread(row)
        if thread not in self._child_ns_done:
            self._sum_children(thread)
        return max(0, self.events.dur_ns[row] - self.child_ns.get(row, 0))

    def ancestors(self, row: int) -> list[int]:
        """Enclosing cpu_ops of ``row``, innermost first."""
        out = []
        parent = self._parent_of(row)
        while parent != NONE:
            out.append(parent)
            parent = self._parent_of(parent)
        return out

    def following(self, row: int, limit: int = 8) -> list[int]:
        """Up to ``limit`` cpu_ops on the same thread that start at or after ``row`` ends."""
        import numpy as np

        thread = self._thread(row)
        end = self.events.ts_ns[row] + self.events.dur_ns[row]
        first = int(np.searchsorted(self.thread_starts[thread], end, side="left"))
        return [r for r in self.thread_rows[thread][first : first + limit].tolist() if r != row]

    def inside(self, row: int, limit: int = 16) -> list[int]:
        """Up to ``limit`` cpu_ops nested in ``row`` (its descendants), in start order."""
        import numpy as np

        thread = self._thread(row)
        events = self.events
        starts, rows = self.thread_starts[thread], self.thread_rows[thread]
        end = events.ts_ns[row] + events.dur_ns[row]
        first = int(np.searchsorted(starts, events.ts_ns[row], side="left"))
        out = []
        for r in rows[first : first + limit + 1].tolist():
            if r == row:
                continue
            if events.ts_ns[r] >= end:
                break
            out.append(r)
        return out[:limit]
