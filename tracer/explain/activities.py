"""The timed units of work findings are made of (GPU kernels and copies, or CPU ops' self time), by step.

They are kept as numpy columns: a 500 MB trace has over 100k of them, and every later pass
(steps, bytes, grouping, busy time) is a column operation. Sums that could pass 2**63 on a hostile
trace are summed as Python ints (`exact_sums`), so results never depend on int64 overflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracer.explain.optree import OpTree, rows_of
from tracer.explain.steps import Steps
from tracer.model.events import NONE, Cat, EventTable, Trace
from tracer.model.origin import Attributions

if TYPE_CHECKING:
    import numpy as np

_GPU_CATS = tuple(int(c) for c in Cat if c.is_gpu)
_INT64_LIMIT = 1 << 62  # a sum of values this small, fewer than 2 of them per unit of headroom, fits


@dataclass
class Activities:
    """Timed units of work as columns, one entry each: a GPU kernel/memcpy/memset, or a CPU op's self
    time (CPU-only traces).

    ``when_ns`` places an activity in a step (launch time on the CPU clock, start on the GPU). The
    op whose shapes size it is ``shape_row`` of ``tables[shape_table]``: the launching op, or for a
    graph replay its capture-time op (in the capture's table, maybe another trace's); ``launch``
    tells one replay's call from another's. -1 (NONE) where there is none.
    """

    row: np.ndarray
    ns: np.ndarray
    origin_id: np.ndarray
    op_row: np.ndarray
    when_ns: np.ndarray
    shape_table: np.ndarray
    shape_row: np.ndarray
    launch: np.ndarray
    tables: list[EventTable]

    def __len__(self) -> int:
        return len(self.row)

    def take(self, index: np.ndarray) -> Activities:
        """The activities at `index` (positions or a boolean mask), in that order."""
        return Activities(
            self.row[index],
            self.ns[index],
            self.origin_id[index],
            self.op_row[index],
            self.when_ns[index],
            self.shape_table[index],
            self.shape_row[index],
            self.launch[index],
            self.tables,
        )

    def total_ns(self) -> int:
        return sum(self.ns.tolist())


def exact_sums(values: np.ndarray, groups: np.ndarray, count: int) -> list[int]:
    """Per group (0..count-1) the sum of `values`, as exact Python ints."""
    import numpy as np

    if len(values) == 0:
        return [0] * count
    biggest = max(abs(int(values.max())), abs(int(values.min())))
    if biggest * len(values) < _INT64_LIMIT:
        order = np.argsort(groups, kind="stable")
        ranked = groups[order]
        starts = np.flatnonzero(np.concatenate([[True], ranked[1:] != ranked[:-1]]))
        sums = np.add.reduceat(values[order], starts)
        out = [0] * count
        for group, total in zip(ranked[starts].tolist(), sums.tolist()):
            out[group] = total
        return out
    out = [0] * count
    for group, value in zip(groups.tolist(), values.tolist()):
        out[group] += value
    return out


def has_gpu_events(trace: Trace) -> bool:
    return bool(rows_of(trace.events, Cat.KERNEL, Cat.MEMCPY, Cat.MEMSET))


def gpu_activities(attributions: Attributions) -> Activities:
    """Every GPU kernel/memcpy/memset, placed in time by its launch (a graph replay: by its launch call)."""
    import numpy as np

    from tracer.join.columns import column

    events = attributions.trace.events
    gpu_rows = column(attributions.gpu_rows)
    kept = np.flatnonzero(np.isin(column(events.cat)[gpu_rows], _GPU_CATS))
    rows = gpu_rows[kept]
    op = column(attributions.op_rows)[kept]
    ts = column(events.ts_ns)
    has_op = op != NONE
    when = ts[rows]
    when[has_op] = ts[op[has_op]]
    shape_table = np.where(has_op, 0, NONE)
    shape_row = np.where(has_op, op, NONE)
    launch = np.full(len(rows), NONE, dtype=np.int64)
    tables = [events]
    unlaunched = np.flatnonzero(~has_op)
    if len(unlaunched):
        launch_ts = _launch_times(attributions)
        correlation = events.correlation
        captures = attributions.capture_ops
        table_index = {id(events): 0}
        for i, row in zip(unlaunched.tolist(), rows[unlaunched].tolist()):
            when[i] = launch_ts.get(correlation[row], when[i])
            if row in captures:
                capture, capture_op = captures[row]
                index = table_index.get(id(capture.events))
                if index is None:
                    index = table_index[id(capture.events)] = len(tables)
                    tables.append(capture.events)
                shape_table[i], shape_row[i] = index, capture_op
                launch[i] = correlation[row]  # the graph launch: one call of the op per replay
    return Activities(
        rows,
        column(events.dur_ns)[rows],
        column(attributions.origin_ids)[kept],
        op,
        when,
        shape_table,
        shape_row,
        launch,
        tables,
    )


def _launch_times(attributions: Attributions) -> dict[int, int]:
    """correlation -> start of the runtime call that launched it (graph replays have no op)."""
    events = attributions.trace.events
    wanted = {
        events.correlation[row]
        for i, row in enumerate(attributions.gpu_rows)
        if attributions.op_rows[i] == NONE and events.correlation[row] != NONE
    }
    if not wanted:
        return {}
    return {
        events.correlation[r]: events.ts_ns[r]
        for r in rows_of(events, Cat.RUNTIME, Cat.DRIVER)
        if events.correlation[r] in wanted
    }


def cpu_activities(attributions: Attributions, tree: OpTree) -> Activities:
    """CPU-only traces: every attributed cpu_op with its self time (so nested ops are not counted twice)."""
    import numpy as np

    events = attributions.trace.events
    rows, ns, origin_ids = [], [], []
    for i, row in enumerate(attributions.gpu_rows):
        if events.cat[row] != Cat.CPU_OP:
            continue
        self_ns = tree.self_ns(row)
        if self_ns > 0:
            rows.append(row)
            ns.append(self_ns)
            origin_ids.append(attributions.origin_ids[i])
    row = np.asarray(rows, dtype=np.int64)
    when = np.asarray([events.ts_ns[r] for r in rows], dtype=np.int64)
    return Activities(
        row,
        np.asarray(ns, dtype=np.int64),
        np.asarray(origin_ids, dtype=np.int64),
        row,
        when,
        np.zeros(len(rows), dtype=np.int64),
        row,
        np.full(len(rows), NONE, dtype=np.int64),
        [events],
    )


def gpu_sequence(events: EventTable, activities: Activities) -> list[tuple[int, int, str]]:
    """(start ns, end ns, name) of each activity, in order: what step detection by repetition reads."""
    rows = activities.row.tolist()
    ts, dur, name = events.ts_ns, events.dur_ns, events.name
    return [(ts[r], ts[r] + dur[r], name[r]) for r in rows]


def in_steps(activities: Activities, steps: Steps | None) -> tuple[Activities, np.ndarray]:
    """The activities inside the steps, and the step index of each (-1 everywhere without steps)."""
    import numpy as np

    if steps is None:
        return activities, np.full(len(activities), -1, dtype=np.int64)
    when = activities.when_ns
    starts = np.asarray(steps.starts_ns, dtype=np.int64)
    ends = np.asarray(steps.ends_ns, dtype=np.int64)
    index = np.searchsorted(starts, when, side="right") - 1
    inside = index >= 0
    inside[inside] = when[inside] < ends[index[inside]]
    return activities.take(inside), index[inside]


def busy_window(
    events: EventTable, activities: Activities, steps: Steps | None, basis: str
) -> tuple[int, float | None]:
    """(window wall ns, union of GPU activity / window); the fraction is None on the CPU basis."""

    from tracer.join.columns import column

    if not len(activities):
        return 0, None
    starts = column(events.ts_ns)[activities.row]
    durations = column(events.dur_ns)[activities.row]
    # Python ints from here on where an end could pass int64 (hostile times): exact either way.
    safe = (
        max(abs(int(starts.max())), abs(int(starts.min())))
        + max(abs(int(durations.max())), abs(int(durations.min())))
        < _INT64_LIMIT
    )
    if steps is not None:
        begin, finish = steps.window
        if basis == "gpu":
            last = (
                int((starts + durations).max())
                if safe
                else max(s + d for s, d in zip(starts.tolist(), durations.tolist()))
            )
            finish = max(finish, last)
    elif safe:
        begin, finish = int(starts.min()), int((starts + durations).max())
    else:
        begin = int(starts.min())
        finish = max(s + d for s, d in zip(starts.tolist(), durations.tolist()))
    window = max(0, finish - begin)
    if basis != "gpu" or window == 0:
        return window, None
    devices = column(events.pid)[activities.row]
    exact = safe and int(durations.min()) >= 0  # the vectorized union assumes no span ends before it starts
    busy = 0
    for device in dict.fromkeys(devices.tolist()):
        mine = devices == device
        busy += _union_ns(starts[mine], durations[mine], exact)
    device_count = len(set(devices.tolist()))
    return window, min(1.0, busy / (window * device_count))


def _union_ns(starts: np.ndarray, durations: np.ndarray, vectorized: bool) -> int:
    """Length of the union of the spans [start, start + duration)."""
    import numpy as np

    if not vectorized:
        spans = sorted(zip(starts.tolist(), (s + d for s, d in zip(starts.tolist(), durations.tolist()))))
        busy = 0
        current_start, current_end = spans[0]
        for start, end in spans[1:]:
            if start > current_end:
                busy += current_end - current_start
                current_start, current_end = start, end
            elif end > current_end:
                current_end = end
        return busy + current_end - current_start
    ends = starts + durations
    order = np.lexsort((ends, starts))
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    # A span opens a new run when it starts after everything before it ended.
    opens = np.concatenate([[True], starts[1:] > reach[:-1]])
    first = np.flatnonzero(opens)
    last = np.concatenate([first[1:] - 1, [len(starts) - 1]])
    return sum((reach[last] - starts[first]).tolist())
