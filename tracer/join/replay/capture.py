"""Profiled CUDA-graph captures: find each capture's launches (the graph's nodes) and join them to origins.

The capture-time ``cudaLaunchKernel``/``cuLaunchKernel``/memcpy/memset calls between
``cudaStreamBeginCapture`` and ``cudaStreamEndCapture`` create the graph's nodes, in order, each
inside its CPU op, ranges and Python frames. Traces whose profiler dropped the capture markers still
show them as launches that produced no GPU activity. The join (`tracer.join.attribute`) explains
each launch as it would a kernel, through a stand-in kernel carrying the launch's ids.
"""

from __future__ import annotations

import bisect
from array import array
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tracer.join.replay.report import CapturedGraph
from tracer.model.events import INT_COLUMNS, NONE, Cat, EventTable, Trace
from tracer.model.origin import Origin
from tracer.model.site import Site

GRAPH_LAUNCH_PREFIXES = ("cudaGraphLaunch", "cuGraphLaunch")
CAPTURE_BEGIN = ("cudaStreamBeginCapture", "cuStreamBeginCapture")
CAPTURE_END = ("cudaStreamEndCapture", "cuStreamEndCapture")
GRAPH_INSTANTIATE = ("cudaGraphInstantiate", "cuGraphInstantiate")

KERNEL, MEMCPY, MEMSET = "kernel", "memcpy", "memset"
GPU_KIND = {Cat.KERNEL: KERNEL, Cat.MEMCPY: MEMCPY, Cat.MEMSET: MEMSET}


def launch_kind(name: str) -> str | None:
    """What a runtime/driver call puts into a graph when captured: a kernel, memcpy or memset node."""
    if name.startswith(("cudaLaunch", "cuLaunch")):
        return None if "HostFunc" in name else KERNEL
    if name.startswith(("cudaMemcpy", "cuMemcpy")):
        return MEMCPY
    if name.startswith(("cudaMemset", "cuMemset")):
        return MEMSET
    return None


def gpu_kind(cat: int) -> str:
    """The node kind of a GPU activity row's category."""
    return GPU_KIND.get(Cat(cat), KERNEL)


@dataclass
class Capture:
    """One profiled capture: its launches in capture order and, once joined, each launch's origin."""

    trace: Trace
    rows: list[int]  # launch rows in capture order
    kinds: list[str]
    record: CapturedGraph
    origins: list[Origin] = field(default_factory=list)  # per launch, from the capture-time join
    ops: list[str] = field(default_factory=list)  # per launch: the innermost op name ("" if none)
    op_rows: list[int] = field(default_factory=list)  # per launch: that op's row in `trace` (NONE if none)
    window: tuple[int, int] = (0, 0)


def find_captures(trace: Trace) -> list[Capture]:
    """Capture windows (begin..end capture on one thread) and the node-creating launches inside."""
    table = trace.events
    calls: dict[tuple[int, int], list[int]] = defaultdict(list)
    for r, c in enumerate(table.cat):
        if c == Cat.RUNTIME or c == Cat.DRIVER:
            calls[(table.pid[r], table.tid[r])].append(r)
    # Launches that ran on the GPU at once were not captured (another stream, relaxed capture mode).
    produced = {table.correlation[r] for r, c in enumerate(table.cat) if Cat(c).is_gpu}
    found: list[Capture] = []
    for (_, tid), rows in calls.items():
        rows.sort(key=lambda r: table.ts_ns[r])
        if any(table.name[r].startswith(CAPTURE_BEGIN) for r in rows):
            found.extend(_windowed(trace, tid, rows, produced))
        else:
            found.extend(_orphaned(trace, tid, rows, produced))
    found.sort(key=lambda c: c.record.start_ns)
    return found


def _windowed(trace: Trace, tid: int, rows: list[int], produced: set[int]) -> list[Capture]:
    table = trace.events
    out: list[Capture] = []
    begin: int | None = None
    launches: list[int] = []
    for r in rows:
        name = table.name[r]
        if name.startswith(CAPTURE_BEGIN):
            begin, launches = r, []
        elif name.startswith(CAPTURE_END) and begin is not None:
            if launches:
                window = (table.ts_ns[begin], table.end_ns(r))
                out.append(
                    _capture(trace, tid, launches, "cudaStreamBeginCapture..cudaStreamEndCapture", window)
                )
            begin = None
        elif begin is not None and launch_kind(name) is not None and table.correlation[r] not in produced:
            launches.append(r)
    return out


def _orphaned(trace: Trace, tid: int, rows: list[int], produced: set[int]) -> list[Capture]:
    """No capture markers: runs of launches whose correlation produced no GPU activity, ended by an
    instantiate call or an ordinary launch (captured launches never run at capture time)."""
    table = trace.events
    out: list[Capture] = []
    run: list[int] = []

    def close() -> None:
        if len(run) > 1:  # one stray launch at the end of a trace is a lost kernel, not a capture
            window = (table.ts_ns[run[0]], table.end_ns(run[-1]))
            out.append(_capture(trace, tid, list(run), "launches without GPU activity", window))
        run.clear()

    for r in rows:
        name = table.name[r]
        if name.startswith(GRAPH_INSTANTIATE):
            close()
        elif launch_kind(name) is not None:
            if table.correlation[r] in produced:
                close()
            else:
                run.append(r)
    close()
    return out


def _capture(trace: Trace, tid: int, rows: list[int], found_by: str, window: tuple[int, int]) -> Capture:
    table = trace.events
    kinds = [launch_kind(table.name[r]) or KERNEL for r in rows]
    record = CapturedGraph(trace.meta.path, tid, table.ts_ns[rows[0]], len(rows), found_by)
    return Capture(trace, rows, kinds, record, window=window)


def attach_capture_origins(
    captures: Sequence[Capture],
    sites: Sequence[Site] | None,
    source_roots: Sequence[str | Path],
    use_call_from: bool,
) -> None:
    """Run the join once per capture trace over its windows; keep each launch's origin and op (in place)."""
    from tracer.join.attribute import attribute

    by_trace: dict[int, list[Capture]] = defaultdict(list)
    for cap in captures:
        by_trace[id(cap.trace)].append(cap)
    for caps in by_trace.values():
        joined_trace, kept, stand_in = _capture_join_trace(caps[0].trace, caps)
        joined = attribute(joined_trace, sites, source_roots=source_roots, use_call_from=use_call_from)
        origin_of_row = {row: joined.origins[o] for row, o in zip(joined.gpu_rows, joined.origin_ids)}
        op_of_row = dict(zip(joined.gpu_rows, joined.op_rows))
        names = joined_trace.events.name
        for cap in caps:
            cap.origins = [origin_of_row[stand_in[r]] for r in cap.rows]
            ops = [op_of_row[stand_in[r]] for r in cap.rows]
            cap.ops = [names[op] if op != NONE else "" for op in ops]
            cap.op_rows = [kept[op] if op != NONE else NONE for op in ops]


def _capture_join_trace(trace: Trace, captures: list[Capture]) -> tuple[Trace, list[int], dict[int, int]]:
    """The rows overlapping the capture windows, plus one stand-in kernel per captured launch.

    The join explains a kernel from its launch (correlation) and op (External id); a captured launch
    has no kernel, so a stand-in with the launch's ids lets the unchanged join build its origin.
    Only rows overlapping the windows are kept (enclosing frames and ranges overlap too), so the
    extra join costs what the captures cost, not the whole trace. Returns that trace, the row in
    `trace` of each of its rows (stand-ins excepted), and a map launch row -> stand-in row.
    """
    table = trace.events
    merged: list[list[int]] = []
    for start, end in sorted(c.window for c in captures):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    starts = [w[0] for w in merged]
    ts, dur = table.ts_ns, table.dur_ns
    keep = []
    for r in range(len(table)):
        # Windows are disjoint and sorted: a row overlaps one iff it overlaps the last starting before it ends.
        i = bisect.bisect_right(starts, ts[r] + dur[r]) - 1
        if i >= 0 and merged[i][1] >= ts[r]:
            keep.append(r)
    index = {r: i for i, r in enumerate(keep)}
    sub = EventTable()
    for name in INT_COLUMNS:
        column = getattr(table, name)
        setattr(sub, name, array(column.typecode, (column[r] for r in keep)))
    sub.name = [table.name[r] for r in keep]
    sub.args = [table.args[r] for r in keep]
    stand_in: dict[int, int] = {}
    for cap in captures:
        for r in cap.rows:
            stand_in[r] = sub.add(
                Cat.KERNEL,
                "<captured launch>",
                NONE,
                NONE,
                ts[r],
                0,
                ext_id=table.ext_id[r],
                correlation=table.correlation[r],
            )
    fwdbwd = {index[b]: index[f] for b, f in trace.fwdbwd.items() if b in index and f in index}
    return Trace(meta=trace.meta, events=sub, notes=[], fwdbwd=fwdbwd), keep, stand_in
