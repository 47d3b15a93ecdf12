"""Parse a big trace's chunks in worker processes: each returns compact columns, the parent merges.

A worker does the expensive part (the JSON parse + the per-event work) and sends back what the
parent can append at C speed: numeric columns as raw array bytes, names and args as small tables
of unique values plus an index per row. For a plain JSON file the workers read their byte ranges
themselves (`tracer.load.ranges`); a gzip stream is inflated by the parent and sent chunk by chunk.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tracer import progress
from tracer.errors import InputError
from tracer.load import source
from tracer.load.chunks import EventChunks
from tracer.load.columns import CleanedArgs, EventTableBuilder
from tracer.load.fast import add_chunk
from tracer.load.ranges import EventRange, RangePlan, read_range
from tracer.load.window import WindowBounds
from tracer.model.events import INT_COLUMNS

PARALLEL_MIN_BYTES = 48 << 20  # below this, starting workers costs more than it saves
LOAD_WORKERS_ENV = "KERNELTRACE_LOAD_WORKERS"


def worker_count(size_bytes: int) -> int:
    """How many processes to parse with: KERNELTRACE_LOAD_WORKERS (at most one per core and per
    block of the trace), else one per idle core for big files (the load average says how many are
    busy; at least 2 on a machine of 2 or more unless every core is busy, when the workers' extra
    pickling makes the load slower, not faster)."""
    if multiprocessing.current_process().daemon:
        return 1  # a daemonic process (a multiprocessing.Pool worker) may not start processes
    cores = usable_cores()
    blocks = 1 + size_bytes // source.BLOCK_BYTES  # a worker parses whole blocks: no more than those
    configured = os.environ.get(LOAD_WORKERS_ENV)
    if configured is not None and configured.strip():
        text = configured.strip()
        if not (text.isascii() and text.isdigit() and 0 < len(text) < 6 and int(text) >= 1):
            raise InputError(LOAD_WORKERS_ENV, f"{configured!r} is not a number of processes (1 or more)")
        return max(1, min(int(text), cores, blocks))
    if size_bytes < PARALLEL_MIN_BYTES or cores < 2:
        return 1
    try:
        busy = os.getloadavg()[0]
    except OSError:
        busy = 0.0
    if busy >= cores:
        return 1
    return max(2, min(cores, blocks, math.ceil(cores - busy)))


def usable_cores() -> int:
    """The cores this process may run on (taskset, cgroup cpusets), else all of the machine's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass
class ChunkColumns:
    """One chunk's rows, compact: what `EventTableBuilder.merge` appends."""

    rows: int
    events: int  # events in the chunk (rows + those skipped), to number the next chunk
    ints: dict[str, bytes]
    names: list[str]
    name_index: bytes  # int32 into names
    args: list[bytes]  # orjson of each distinct args dict
    args_index: bytes  # int32: 0 for None, k + 1 for args[k]
    fwdbwd_points: list[tuple[str, int, int, int, int]]
    string_ids: dict[str, int]
    skipped_no_ts: int
    call_from: bool
    malformed: int = 0
    outside_window: int = 0
    missing_dur: int = 0


_CLEANED: CleanedArgs = {}  # in a worker: the args its chunks' builders have cleaned


def parse_chunk(raw: bytes, bounds: WindowBounds | None = None) -> ChunkColumns:
    """Worker side: parse one raw JSON array of events into `ChunkColumns` (raw_index from 0)."""
    builder = EventTableBuilder(bounds, cleaned=_CLEANED)
    count = add_chunk(builder, raw, 0)
    del raw
    table = builder.table
    # The chunk's distinct names and args are those its builder interned (each once, a few hundred),
    # then one index per row by a dict lookup in C (into numpy: 2x array("i")'s append per item),
    # with no pass over the rows to find them.
    names = list(dict.fromkeys(builder.names.values()))
    name_code = {name: k for k, name in enumerate(names)}
    name_index = np.fromiter(map(name_code.__getitem__, table.name), dtype=np.int32, count=len(table))
    shared = builder.shared_args()
    args_code = {id(args): k for k, args in enumerate(shared, 1)}
    args_code[id(None)] = 0
    args_index = np.fromiter(
        map(args_code.__getitem__, map(id, table.args)), dtype=np.int32, count=len(table)
    )
    return ChunkColumns(
        rows=len(table),
        events=count,
        ints={name: getattr(table, name).tobytes() for name in INT_COLUMNS},
        names=names,
        name_index=name_index.tobytes(),
        args=[orjson.dumps(args) for args in shared],
        args_index=args_index.tobytes(),
        fwdbwd_points=builder.fwdbwd_points,
        string_ids=builder.string_ids,
        skipped_no_ts=builder.skipped_no_ts,
        call_from=builder.call_from,
        malformed=builder.malformed,
        outside_window=builder.outside_window,
        missing_dur=builder.missing_dur,
    )


def parse_in_workers(blocks: Iterable[bytes], builder: EventTableBuilder, workers: int) -> dict[str, Any]:
    """Parse chunks in `workers` processes, merging their columns into `builder` in file order."""
    chunks = EventChunks(blocks)
    context = multiprocessing.get_context(_start_method())
    pending: list[Future] = []
    first_index = 0
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        for raw in chunks:
            pending.append(pool.submit(parse_chunk, raw, builder.bounds))
            del raw
            # A bounded window: at most two chunks queued per worker, so memory stays flat.
            while len(pending) > 2 * workers:
                first_index = merge(builder, pending.pop(0).result(), first_index)
        for future in pending:
            first_index = merge(builder, future.result(), first_index)
    return chunks.top


def parse_range(path: str, events: EventRange, bounds: WindowBounds | None = None) -> ChunkColumns:
    """Worker side: read one byte range of the file itself, then parse it as `parse_chunk` does."""
    return parse_chunk(read_range(path, events), bounds)


def parse_ranges_in_workers(
    path: Path, plan: RangePlan, builder: EventTableBuilder, workers: int
) -> dict[str, Any]:
    """Parse `plan`'s ranges in `workers` processes that read the file themselves (only the compact
    columns come back through the pipe), merging them into `builder` in file order; then the tail."""
    context = multiprocessing.get_context(_start_method())
    pending: list[tuple[Future, EventRange]] = []
    first_index = 0
    name, what = str(path), f"reading {path.name}"
    total = plan.ranges[-1].end if plan.ranges else 0
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        for events in plan.ranges:
            pending.append((pool.submit(parse_range, name, events, builder.bounds), events))
            # At most two ranges queued per worker: results wait small, in file order.
            while len(pending) > 2 * workers:
                future, merged = pending.pop(0)
                first_index = merge(builder, future.result(), first_index)
                progress.report(what, merged.end, total)
        for future, merged in pending:
            first_index = merge(builder, future.result(), first_index)
            progress.report(what, merged.end, total)
    if plan.tail is not None:
        add_chunk(builder, plan.tail, first_index)
    return plan.top


def merge(builder: EventTableBuilder, chunk: ChunkColumns, first_index: int) -> int:
    """Parent side: append one chunk's columns to the table; returns the next chunk's first index."""
    table = builder.table
    for name in INT_COLUMNS:
        column = getattr(table, name)
        if name == "raw_index":
            local = np.frombuffer(chunk.ints[name], dtype=np.int64) + first_index
            column.frombytes(local.tobytes())
        else:
            column.frombytes(chunk.ints[name])
    names = [builder.intern_name(n) for n in chunk.names]
    table.name.extend(_pick(names, chunk.name_index))
    args = [None, *map(builder.intern_args_json, chunk.args)]
    table.args.extend(_pick(args, chunk.args_index))
    builder.fwdbwd_points.extend(chunk.fwdbwd_points)
    builder.string_ids.update(chunk.string_ids)
    builder.skipped_no_ts += chunk.skipped_no_ts
    builder.malformed += chunk.malformed
    builder.outside_window += chunk.outside_window
    builder.missing_dur += chunk.missing_dur
    builder.call_from = builder.call_from or chunk.call_from
    return first_index + chunk.events


def _pick(values: list[Any], index: bytes) -> list[Any]:
    """``[values[i] for i in index]`` (int32 as bytes) by numpy's object take: ~2x `map`."""
    table = np.empty(len(values), dtype=object)
    table[:] = values
    return table[np.frombuffer(index, dtype=np.int32)].tolist()


def _start_method() -> str:
    # fork is fast and needs no re-import, but is unsafe once other threads run (a CLI progress bar).
    if sys.platform == "linux" and threading.active_count() == 1:
        return "fork"
    return "spawn"
