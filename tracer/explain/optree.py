"""The CPU op tree of a trace: parent of each cpu_op, self time, and "what ran next on this thread".

Built per thread on first use: a GPU trace needs only the launching thread, and only for the few
calls whose waste is checked; a CPU-only trace needs every thread (self times).
"""

from __future__ import annotations

import bisect
from array import array

from tracer.model.events import NONE, Cat, EventTable


def rows_of(events: EventTable, *cats: Cat) -> list[int]:
    """Rows of the given categories, in table order (numpy does the scan)."""
    import numpy as np

    column = np.frombuffer(events.cat, dtype=np.int8)
    mask = np.isin(column, np.asarray([int(c) for c in cats], dtype=np.int8))
    return np.flatnonzero(mask).tolist()


class OpTree:
    """cpu_op rows per (pid, tid) in start order, with parents found by one nesting sweep per thread.

    cpu_ops nest perfectly per thread (trace facts), so a stack sweep gives exact parents.
    """

    def __init__(self, events: EventTable) -> None:
        self.events = events
        self._by_thread: dict[tuple[int, int], list[int]] | None = None
        self.parent = array("q", [NONE]) * len(events)  # by row: cheaper to fill than a dict
        self.child_ns: dict[int, int] = {}  # filled per thread on the first self_ns (CPU traces)
        self._child_ns_done: set[tuple[int, int]] = set()
        self.thread_rows: dict[tuple[int, int], list[int]] = {}
        self.thread_starts: dict[tuple[int, int], list[int]] = {}

    def _thread(self, row: int) -> tuple[int, int]:
        thread = (self.events.pid[row], self.events.tid[row])
        if thread not in self.thread_rows:
            self._build(thread)
        return thread

    def _build(self, thread: tuple[int, int]) -> None:
        import numpy as np

        from tracer.join.columns import column, group_by_thread

        events = self.events
        if self._by_thread is None:
            cpu_ops = np.flatnonzero(column(events.cat) == int(Cat.CPU_OP))
            self._by_thread = group_by_thread(events, cpu_ops)
        rows = self._by_thread.get(thread, [])
        starts: list[int] = []
        ends: list[int] = []
        if rows:
            index = np.asarray(rows, dtype=np.int64)
            ts = column(events.ts_ns)[index]
            dur = column(events.dur_ns)[index]
            order = np.lexsort((-dur, ts))  # by start, longer first (parents first)
            rows = index[order].tolist()
            starts = ts[order].tolist()
            ends = (ts[order] + dur[order]).tolist()
        self.thread_rows[thread] = rows
        self.thread_starts[thread] = starts
        stack: list[int] = []
        stack_ends: list[int] = []
        parent = self.parent
        for row, start, end in zip(rows, starts, ends):
            while stack_ends and stack_ends[-1] <= start:
                stack.pop()
                stack_ends.pop()
            if stack:
                parent[row] = stack[-1]
            stack.append(row)
            stack_ends.append(end)

    def _sum_children(self, thread: tuple[int, int]) -> None:
        """child_ns of the thread's ops: the time of their direct children (integer sums)."""
        self._child_ns_done.add(thread)
        parent, child_ns, dur = self.parent, self.child_ns, self.events.dur_ns
        for row in self.thread_rows[thread]:
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
        self._thread(row)
        out = []
        parent = self.parent[row]
        while parent != NONE:
            out.append(parent)
            parent = self.parent[parent]
        return out

    def following(self, row: int, limit: int = 8) -> list[int]:
        """Up to ``limit`` cpu_ops on the same thread that start at or after ``row`` ends."""
        thread = self._thread(row)
        starts = self.thread_starts[thread]
        end = self.events.ts_ns[row] + self.events.dur_ns[row]
        first = bisect.bisect_left(starts, end)
        return [r for r in self.thread_rows[thread][first : first + limit] if r != row]

    def inside(self, row: int, limit: int = 16) -> list[int]:
        """Up to ``limit`` cpu_ops nested in ``row`` (its descendants), in start order."""
        thread = self._thread(row)
        events = self.events
        starts, rows = self.thread_starts[thread], self.thread_rows[thread]
        end = events.ts_ns[row] + events.dur_ns[row]
        first = bisect.bisect_left(starts, events.ts_ns[row])
        out = []
        for r in rows[first : first + limit + 1]:
            if r == row:
                continue
            if events.ts_ns[r] >= end:
                break
            out.append(r)
        return out[:limit]
