"""Load a torch.profiler (Kineto) Chrome trace, ``.json`` or ``.json.gz``, into a columnar `Trace`."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import orjson

from tracer.errors import InputError
from tracer.load.chunks import Unchunkable, parse_in_chunks
from tracer.load.columns import EventTableBuilder
from tracer.load.meta import trace_meta
from tracer.load.parallel import parse_in_workers, worker_count
from tracer.load.source import is_gzip, read_blocks
from tracer.model.events import Cat, Trace

__all__ = ["load_trace"]


def load_trace(path: str | Path) -> Trace:
    """Parse the trace at `path` once into `Trace` (columns + metadata + notes).

    Raises `InputError` (one line) for a missing, truncated, non-JSON or non-trace file, or a trace
    with no duration events. A trace without GPU events loads, with a note.
    """
    path = Path(path)
    notes: list[str] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the parse allocates millions of small objects, none of them cyclic
    try:
        builder = EventTableBuilder()
        try:
            workers = worker_count(_uncompressed_estimate(path))
            if workers > 1:
                top = parse_in_workers(read_blocks(path, notes), builder, workers)
            else:
                top = parse_in_chunks(read_blocks(path, notes), builder.add_events)
        except Unchunkable:
            builder = EventTableBuilder()
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


def _uncompressed_estimate(path: Path) -> int:
    try:
        size = path.stat().st_size
        return size * 10 if is_gzip(path) else size  # Kineto JSON compresses about 10:1
    except OSError:
        return 0  # read_blocks reports the problem


def _parse_whole(path: Path, builder: EventTableBuilder, notes: list[str]) -> dict[str, Any]:
    data = b"".join(read_blocks(path, notes))
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
    if len(table) == 0:
        raise InputError(path, 'profiler trace with no duration events ("ph": "X"): nothing to analyse')
    cats = set(table.cat)
    has_python = Cat.PYTHON_FUNCTION in cats
    meta = trace_meta(path, top, has_python=has_python, has_call_from=builder.call_from)
    if not any(Cat(c).is_gpu for c in cats):
        notes.append("no GPU activity (kernels, memcpys, memsets) in this trace: CPU op time only")
    if meta.with_stack and not has_python:
        notes.append("with_stack is set but the trace has no python_function events")
    if builder.skipped_no_ts:
        notes.append(f"skipped {builder.skipped_no_ts} duration events without a timestamp")
    trace = Trace(meta=meta, events=table, notes=notes)
    trace.fwdbwd.update(_bind_fwdbwd(table, builder.fwdbwd_points))
    return trace


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
        row = op_at.get((p, t, ts))
        if row is not None:
            (starts if phase == "s" else ends)[flow_id] = row
    return {ends[f]: starts[f] for f in ends.keys() & starts.keys()}
