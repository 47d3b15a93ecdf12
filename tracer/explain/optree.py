"""The CPU op tree of a trace: parent of each cpu_op, self time, and "what ran next on this thread".

Built per thread on first use: a GPU trace needs only the launching thread, and only for the few
calls whose waste is checked; a CPU-only trace needs every thread (self times).
"""

from __future__ import annotations

import bisect

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
        self.parent: dict[int, int] = {}
        self.child_ns: dict[int, int] = {}
        self.thread_rows: dict[tuple[int, int], list[int]] = {}
        self.thread_starts: dict[tuple[int, int], list[int]] = {}

    def _thread(self, row: int) -> tuple[int, int]:
        thread = (self.events.pid[row], self.events.tid[row])
        if thread not in self.thread_rows:
            self._build(thread)
        return thread

    def _build(self, thread: tuple[int, int]) -> None:
        import numpy as np

        events = self.events
        if self._by_thread is None:
            self._by_thread = {}
            for row in rows_of(events, Cat.CPU_OP):
                self._by_thread.setdefault((events.pid[row], events.tid[row]), []).append(row)
        rows = self._by_thread.get(thread, [])
        if rows:
            index = np.asarray(rows, dtype=np.int64)
            ts = np.frombuffer(events.ts_ns, dtype=np.int64)[index]
            dur = np.frombuffer(events.dur_ns, dtype=np.int64)[index]
            rows = index[np.lexsort((-dur, ts))].tolist()  # by start, longer first (parents first)
        self.thread_rows[thread] = rows
        ts_col, dur_col = events.ts_ns, events.dur_ns
        self.thread_starts[thread] = [ts_col[r] for r in rows]
        stack: list[int] = []
        parent, child_ns = self.parent, self.child_ns
        for row in rows:
            start = ts_col[row]
            while stack and ts_col[stack[-1]] + dur_col[stack[-1]] <= start:
                stack.pop()
            if stack:
                parent[row] = stack[-1]
                child_ns[stack[-1]] = child_ns.get(stack[-1], 0) + dur_col[row]
            stack.append(row)

    def self_ns(self, row: int) -> int:
        self._thread(row)
        return max(0, self.events.dur_ns[row] - self.child_ns.get(row, 0))

    def ancestors(self, row: int) -> list[int]:
        """Enclosing cpu_ops of ``row``, innermost first."""
        self._thread(row)
        out = []
        parent = self.parent.get(row, NONE)
        while parent != NONE:
            out.append(parent)
            parent = self.parent.get(parent, NONE)
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
