"""Write the input trace back with each attributed GPU event's ``args`` naming its origin.

Perfetto and chrome://tracing show ``args`` on click, so a user sees ``origin: file.py:512`` on the
kernel itself. Only ``args`` of attributed GPU events gain keys; every other byte of meaning (events,
order, top-level keys, values) stays as it was, so the file loads wherever the original did.
"""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from tracer.errors import InputError
from tracer.explain.diff import origin_where
from tracer.load.chunks import EventChunks, Unchunkable, parse_array
from tracer.load.memory import whole_parse_limit
from tracer.load.source import read_all, read_blocks
from tracer.model import Attributions, Origin
from tracer.output_files import output_file, protect_inputs

ADDED_KEYS = ("origin", "site", "source", "rule", "confidence")


@dataclass(frozen=True)
class AnnotateSummary:
    path: str
    gpu_events: int  # GPU events the join saw
    annotated: int  # of those, events given an origin (a file at least)
    with_line: int  # of those, events whose origin names the exact line
    origins: int  # distinct origins written


def origin_args(origin: Origin) -> dict[str, Any] | None:
    """The keys added to an event's args, or None where the origin names no source file."""
    if origin.file is None:
        return None
    args: dict[str, Any] = {"origin": origin_where(origin)}
    if origin.site_id:
        args["site"] = origin.site_id
    if origin.source:
        args["source"] = origin.source
    if origin.rule:
        args["rule"] = origin.rule
    args["confidence"] = round(float(origin.confidence), 3)
    return args


def read_raw_trace(path: str | Path) -> dict[str, Any]:
    """The trace file as parsed JSON (gzip or plain, by content), within the memory budget."""
    path = Path(path)
    data = read_all(path, max_bytes=whole_parse_limit(), why="the memory available to parse it whole")
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise InputError(path, f"not a readable JSON trace: {err}") from err
    del data
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise InputError(path, 'not a torch.profiler trace (no "traceEvents" list)')
    return document


def origin_updates(attributions: Attributions) -> tuple[dict[int, dict[str, Any]], int, int]:
    """Per event position in ``traceEvents``: the keys its args gain; with (with a line, origins)."""
    raw_index = attributions.trace.events.raw_index
    per_origin = [origin_args(origin) for origin in attributions.origins]
    updates: dict[int, dict[str, Any]] = {}
    with_line = 0
    used: set[int] = set()
    for gpu_row, origin_id in zip(attributions.gpu_rows, attributions.origin_ids, strict=True):
        if origin_id < 0 or per_origin[origin_id] is None:
            continue
        updates[raw_index[gpu_row]] = per_origin[origin_id]
        with_line += attributions.origins[origin_id].line is not None
        used.add(origin_id)
    return updates, with_line, len(used)


def annotate_events(events: list[Any], first: int, updates: dict[int, dict[str, Any]]) -> int:
    """Add the keys of `updates` to the args of `events` (event `first` onwards), in place."""
    annotated = 0
    for position in range(first, first + len(events)):
        added = updates.get(position)
        event = events[position - first]
        if added is None or not isinstance(event, dict):
            continue
        args = event.get("args")
        if not isinstance(args, dict):
            args = event["args"] = {}
        args.update(added)
        annotated += 1
    return annotated


def annotate_document(document: dict[str, Any], attributions: Attributions) -> tuple[int, int, int]:
    """Add origin keys to the args of attributed GPU events in `document` (in place).

    Returns (events annotated, of them with an exact line, distinct origins written).
    """
    updates, with_line, origins = origin_updates(attributions)
    return annotate_events(document["traceEvents"], 0, updates), with_line, origins


def write_annotated_trace(attributions: Attributions, out_path: str | Path) -> AnnotateSummary:
    """Write ``attributions.trace`` with origins in its GPU events' args to `out_path`
    (gzip when the name ends in ``.gz``). Refuses to overwrite the input trace.

    The trace is rewritten chunk by chunk as the loader reads it (events untouched keep their bytes),
    so it needs no more memory than the load; a document not laid out as Kineto writes it is parsed
    whole, within the memory budget."""
    source = Path(attributions.trace.meta.path)
    out_path = Path(out_path)
    with contextlib.suppress(OSError):
        if out_path.exists() and source.exists() and out_path.resolve() == source.resolve():
            raise InputError(out_path, "is the input trace; write the annotated trace to another file")
    protect_inputs([source])
    updates, with_line, origins = origin_updates(attributions)
    try:
        with output_file(out_path) as handle:
            annotated = _write_streamed(source, updates, handle, out_path.name.lower().endswith(".gz"))
    except Unchunkable:
        document = read_raw_trace(source)
        annotated = annotate_events(document["traceEvents"], 0, updates)
        with output_file(out_path) as handle:
            _write_whole(document, handle, out_path.name.lower().endswith(".gz"))
    return AnnotateSummary(str(out_path), len(attributions), annotated, with_line, origins)


def _write_streamed(
    source: Path, updates: dict[int, dict[str, Any]], handle: IO[bytes], compress: bool
) -> int:
    chunks = EventChunks(read_blocks(source))
    annotated = first = 0
    with _maybe_gzip(handle, compress) as out:
        out.write(b'{"traceEvents":[')
        for raw in chunks:
            events = parse_array(raw)
            count = annotate_events(events, first, updates)
            if first:
                out.write(b",\n")
            # The chunk is ``[`` + events + ``]``: untouched chunks are copied as they were read.
            out.write(_dumps(events)[1:-1] if count else memoryview(raw)[1:-1])
            annotated += count
            first += len(events)
        out.write(b"]")
        for key, value in chunks.top.items():
            out.write(b"," + _dumps(key) + b":" + _dumps(value))
        out.write(b"}")
    return annotated


def _write_whole(document: dict[str, Any], handle: IO[bytes], compress: bool) -> None:
    with _maybe_gzip(handle, compress) as out:
        out.write(_dumps(document))


@contextlib.contextmanager
def _maybe_gzip(handle: IO[bytes], compress: bool) -> Iterator[IO[bytes]]:
    if not compress:
        yield handle
        return
    with gzip.GzipFile(fileobj=handle, mode="wb", compresslevel=6, mtime=0) as zipped:
        yield zipped  # type: ignore[misc]


def _dumps(value: Any) -> bytes:
    """orjson, or for values nested deeper than orjson writes (255) the standard library with room."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        import json
        import sys

        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 20_000))  # orjson reads at most 1024 levels: far below this
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(
                "utf-8", "surrogatepass"
            )
        finally:
            sys.setrecursionlimit(limit)
