"""The timed units of work findings are made of (GPU kernels and copies, or CPU ops' self time), by step."""

from __future__ import annotations

from dataclasses import dataclass

from tracer.explain.optree import OpTree, rows_of
from tracer.explain.steps import Steps
from tracer.model.events import NONE, Cat, EventTable, Trace
from tracer.model.origin import Attributions


@dataclass
class Activity:
    """One timed unit of work: a GPU kernel/memcpy/memset, or a CPU op's self time (CPU-only traces)."""

    row: int
    ns: int
    origin_id: int
    op_row: int
    when_ns: int  # the time that places it in a step (launch time on the CPU clock, start on the GPU)
    # The op whose shapes size it: the launching op, or for a graph replay its capture-time op (in
    # the capture's table, maybe another trace's); `launch` tells one replay's call from another's.
    shape_table: EventTable | None = None
    shape_row: int = NONE
    launch: int = NONE


_GPU_CATS = frozenset(int(c) for c in Cat if c.is_gpu)  # ints: no Cat(...) per row


def has_gpu_events(trace: Trace) -> bool:
    return bool(rows_of(trace.events, Cat.KERNEL, Cat.MEMCPY, Cat.MEMSET))


def gpu_activities(attributions: Attributions) -> list[Activity]:
    """Every GPU kernel/memcpy/memset, placed in time by its launch (a graph replay: by its launch call)."""
    events = attributions.trace.events
    launch_ts = _launch_times(attributions)
    out = []
    for i, row in enumerate(attributions.gpu_rows):
        if events.cat[row] not in _GPU_CATS:
            continue
        op = attributions.op_rows[i]
        when = events.ts_ns[op] if op != NONE else launch_ts.get(events.correlation[row], events.ts_ns[row])
        activity = Activity(row, events.dur_ns[row], attributions.origin_ids[i], op, when)
        if op != NONE:
            activity.shape_table, activity.shape_row = events, op
        elif row in attributions.capture_ops:
            capture, capture_op = attributions.capture_ops[row]
            activity.shape_table, activity.shape_row = capture.events, capture_op
            activity.launch = events.correlation[row]  # the graph launch: one call of the op per replay
        out.append(activity)
    return out


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


def cpu_activities(attributions: Attributions, tree: OpTree) -> list[Activity]:
    """CPU-only traces: every attributed cpu_op with its self time (so nested ops are not counted twice)."""
    events = attributions.trace.events
    out = []
    for i, row in enumerate(attributions.gpu_rows):
        if events.cat[row] != Cat.CPU_OP:
            continue
        self_ns = tree.self_ns(row)
        if self_ns > 0:
            out.append(
                Activity(row, self_ns, attributions.origin_ids[i], row, events.ts_ns[row], events, row)
            )
    return out


def in_steps(activities: list[Activity], steps: Steps | None) -> tuple[list[Activity], list[int]]:
    """The activities inside the steps, and the step index of each (-1 everywhere without steps)."""
    if steps is None:
        return activities, [-1] * len(activities)
    kept, step_of = [], []
    for a in activities:
        index = steps.index_of(a.when_ns)
        if index is not None:
            kept.append(a)
            step_of.append(index)
    return kept, step_of


def busy_window(
    events, activities: list[Activity], steps: Steps | None, basis: str
) -> tuple[int, float | None]:
    """(window wall ns, union of GPU activity / window); the fraction is None on the CPU basis."""
    if not activities:
        return 0, None
    starts = [events.ts_ns[a.row] for a in activities]
    ends = [events.ts_ns[a.row] + events.dur_ns[a.row] for a in activities]
    if steps is not None:
        begin, finish = steps.window
        finish = max(finish, max(ends)) if basis == "gpu" else finish
    else:
        begin, finish = min(starts), max(ends)
    window = max(0, finish - begin)
    if basis != "gpu" or window == 0:
        return window, None
    by_device: dict[int, list[tuple[int, int]]] = {}
    for a, start, end in zip(activities, starts, ends):
        by_device.setdefault(events.pid[a.row], []).append((start, end))
    busy = 0
    for spans in by_device.values():
        spans.sort()
        current_start, current_end = spans[0]
        for start, end in spans[1:]:
            if start > current_end:
                busy += current_end - current_start
                current_start, current_end = start, end
            elif end > current_end:
                current_end = end
        busy += current_end - current_start
    return window, min(1.0, busy / (window * len(by_device)))
