"""Load a torch.profiler (Kineto) Chrome trace, ``.json`` or ``.json.gz``, into a columnar `Trace`."""

from __future__ import annotations

import functools
import gc
from pathlib import Path
from typing import Any

import orjson

from tracer.errors import InputError
from tracer.load.chunks import Unchunkable, parse_in_chunks
from tracer.load.columns import EventTableBuilder
from tracer.load.depth import without_deep_nesting
from tracer.load.fast import add_chunk
from tracer.load.memory import check_memory, json_size, streaming_limit, way_forward, whole_parse_limit
from tracer.load.meta import trace_meta
from tracer.load.parallel import parse_in_workers, parse_ranges_in_workers, worker_count
from tracer.load.ranges import RangePlan, plan_ranges, range_bytes
from tracer.load.source import check_readable, is_gzip, read_all, read_blocks
from tracer.load.window import TraceWindow, resolve_window
from tracer.model.events import Cat, EventTable, Trace

__all__ = ["TraceWindow", "load_trace"]


def load_trace(path: str | Path, window: TraceWindow | None = None) -> Trace:
    """Parse the trace at `path` once into `Trace` (columns + metadata + notes).

    `window`: load only that part (a time span or ProfilerStep#N..M); events outside it are dropped
    while parsing, so a trace too big for memory can still be explained piece by piece.

    Raises `InputError` (one line) for a missing, truncated, non-JSON or non-trace file, a trace with
    no duration events, or one that would not fit in the memory available (saying how to proceed;
    also when memory runs out anyway: the estimate is an estimate, other processes use memory too).
    A trace without GPU events loads, with a note.
    """
    try:
        return _load(Path(path), window)
    except MemoryError:
        raise InputError(path, f"ran out of memory while loading it; {way_forward()}") from None


def _load(path: Path, window: TraceWindow | None) -> Trace:
    check_readable(path)  # before anything opens it: a FIFO would block the size probe below
    size = json_size(path, is_gzip(path))
    bounds = resolve_window(path, window) if window is not None else None
    if bounds is None:
        check_memory(path, size)
    else:
        check_memory(path, size, share=bounds.share, window_label=bounds.label)
    notes: list[str] = []
    # The bytes are counted as they stream in (gzip's size field can lie): a whole load stops at what
    # the memory allows; a windowed one keeps only its window, so only the bomb check applies.
    limit = streaming_limit() if bounds is None else None
    gc_was_enabled = gc.isenabled()
    # An earlier load's frozen objects become collectable again: frozen, any that later turn into
    # cyclic garbage (a process explaining rank after rank) would never be freed.
    gc.unfreeze()
    gc.disable()  # the parse allocates millions of small objects, none of them cyclic
    try:
        builder = EventTableBuilder(bounds)
        try:
            workers = worker_count(int(size * bounds.share) if bounds else size)
            plan = _range_plan(path, size, limit, workers) if workers > 1 else None
            blocks = read_blocks(path, notes, max_bytes=limit, why="this machine's memory")
            if plan is not None:
                top = parse_ranges_in_workers(path, plan, builder, workers)
            elif workers > 1:
                top = parse_in_workers(blocks, builder, workers)
            else:
                top = parse_in_chunks(blocks, functools.partial(add_chunk, builder))
        except Unchunkable:
            builder = EventTableBuilder(bounds)
            notes.clear()
            top = _parse_whole(path, builder, notes)
        trace = _finish(path, top, builder, notes)
        # The table lives as long as the analysis: keep the cycle collector from re-scanning its
        # millions of objects on every later collection (refcounting still frees them).
        gc.freeze()
    finally:
        if gc_was_enabled:
            gc.enable()
    return trace


def _range_plan(path: Path, size: int, limit: int | None, workers: int) -> RangePlan | None:
    """Byte ranges for workers that read the file themselves: plain JSON only (gzip must stream
    through one inflater), named as such, and within the memory limit (else the stream says why)."""
    if path.suffix == ".gz" or is_gzip(path) or (limit is not None and size > limit):
        return None
    return plan_ranges(path, range_bytes(size, workers))


def _parse_whole(path: Path, builder: EventTableBuilder, notes: list[str]) -> dict[str, Any]:
    data = read_all(
        path,
        notes,
        max_bytes=whole_parse_limit(),
        why="the memory available for a document parsed whole (not laid out as torch.profiler writes "
        "it, which needs about 5x its size)",
    )
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        problem = "truncated JSON" if "end of data" in str(err).lower() or "EOF" in str(err) else "not JSON"
        raise InputError(path, f"{problem}: {err}") from None
    del data
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        kind = type(document).__name__ if not isinstance(document, dict) else "object"
        raise InputError(path, f'JSON {kind} but not a torch.profiler trace (no "traceEvents" list)')
    events = document.pop("traceEvents")
    step = 100_000
    for start in range(0, len(events), step):
        builder.add_events(events[start : start + step], start)
    del events
    return document


def _finish(path: Path, top: dict[str, Any], builder: EventTableBuilder, notes: list[str]) -> Trace:
    table = builder.table
    if builder.bounds is not None:
        table, unlaunched = _without_unlaunched(table)
        kept = len(table)
        notes.append(
            f"loaded only {builder.bounds.label}: {kept} duration events kept, "
            f"{builder.outside_window + unlaunched} outside it left out"
        )
        if kept == 0:
            raise InputError(path, f"no duration events in {builder.bounds.label}")
    if len(table) == 0:
        if builder.skipped_no_ts:
            raise InputError(
                path,
                f"none of its {builder.skipped_no_ts} duration events has a usable timestamp "
                '("ts" missing, not a number, or out of range): nothing to analyse',
            )
        raise InputError(path, 'profiler trace with no duration events ("ph": "X"): nothing to analyse')
    table, too_deep = without_deep_nesting(table)
    if too_deep:
        notes.append(
            f"left out {too_deep} events nested deeper than any profile nests them "
            "(over 256 ranges or ops, or 1,100 Python frames, in one thread)"
        )
    cats = _categories(table)
    has_python = Cat.PYTHON_FUNCTION in cats
    meta = trace_meta(path, top, has_python=has_python, has_call_from=builder.call_from)
    if not any(Cat(c).is_gpu for c in cats):
        notes.append("no GPU activity (kernels, memcpys, memsets) in this trace: CPU op time only")
    if meta.with_stack and not has_python:
        notes.append("with_stack is set but the trace has no python_function events")
    if builder.skipped_no_ts:
        notes.append(
            f"skipped {builder.skipped_no_ts} duration events without a usable timestamp "
            "(missing, not a number, or out of range)"
        )
    if builder.missing_dur:
        notes.append(f'{builder.missing_dur} duration events have no usable "dur": read as instants (0 ns)')
    if builder.malformed:
        notes.append(f"{builder.malformed} events had fields of the wrong type or range: read as absent")
    trace = Trace(meta=meta, events=table, notes=notes)
    trace.fwdbwd.update(_bind_fwdbwd(table, builder.fwdbwd_points))
    return trace


def _categories(table: EventTable) -> set[int]:
    """The categories present: a count per byte value in numpy (a set of 1.7M ints took 80 ms)."""
    import numpy as np

    counts = np.bincount(np.frombuffer(table.cat, dtype=np.uint8), minlength=256)
    return set(np.flatnonzero(counts).astype(np.uint8).view(np.int8).tolist())


def _without_unlaunched(table: EventTable) -> tuple[EventTable, int]:
    """A windowed table without the GPU work whose launch fell outside the window (kernels of the
    steps before it that ran late, and of the steps after it that the GPU tail caught)."""
    launches = {
        table.correlation[row] for row, cat in enumerate(table.cat) if cat == Cat.RUNTIME or cat == Cat.DRIVER
    }
    gpu_work = (Cat.KERNEL, Cat.MEMCPY, Cat.MEMSET)
    keep = [
        row for row, cat in enumerate(table.cat) if cat not in gpu_work or table.correlation[row] in launches
    ]
    if len(keep) == len(table):
        return table, 0
    return table.taken(keep), len(table) - len(keep)


def _bind_fwdbwd(table: Any, points: list[tuple[str, int, int, int, int]]) -> dict[int, int]:
    """Map each backward op to its forward op: flow ends sit at the ops' start times."""
    if not points:
        return {}
    wanted = {(pid, tid, ts) for _, _, pid, tid, ts in points}
    op_at: dict[tuple[int, int, int], int] = {}
    pid, tid, ts_ns = table.pid, table.tid, table.ts_ns
    for row, cat in enumerate(table.cat):
        if cat == Cat.CPU_OP:
            key = (pid[row], tid[row], ts_ns[row])
            if key in wanted and key not in op_at:
                op_at[key] = row
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    for phase, flow_id, p, t, ts in points:
        op_row = op_at.get((p, t, ts))
        if op_row is not None:
            (starts if phase == "s" else ends)[flow_id] = op_row
    return {ends[f]: starts[f] for f in ends.keys() & starts.keys()}
