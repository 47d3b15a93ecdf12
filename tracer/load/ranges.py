"""Split an uncompressed trace file into byte ranges of whole events, for workers that read it themselves.

The parent reads only the header (the keys before ``traceEvents``) and the tail (the last event and
the keys after the array); the cuts between are found by `mmap.find` of the event boundary that
`tracer.load.chunks` cuts at (``\\n`` + the array's indentation + ``{``) near each multiple of the
range size, so no event byte passes through the parent or a pipe. A range read back by
`read_range` is the same raw JSON array `EventChunks` would have produced for those events.
"""

from __future__ import annotations

import itertools
import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tracer.load.chunks import (
    MAX_CHUNK_BYTES,
    Unchunkable,
    _array_indent,
    _last_comma_before,
    _loads,
    _read_header,
)

RANGE_BYTES = 8 << 20  # one worker task, at most
MIN_RANGE_BYTES = 1 << 20  # smaller ranges cost more in per-task merging than they save in memory
PARSE_PER_RANGE_BYTE = 6  # a worker's peak grows ~5.5x its range (measured: 8 MB -> 44 MB, 2 -> 14)
WORKERS_SHARE = 0.5  # the workers' parse buffers together: at most this share of the trace
_WHITESPACE = b" \t\r\n"
_HEADER_BLOCK = 1 << 20


@dataclass(frozen=True)
class EventRange:
    """Events in ``[start, end)`` of the file: `start` is the whitespace byte before the first event's
    ``{``, `end` the start of the boundary after the last event (its comma lies before)."""

    start: int
    end: int


@dataclass
class RangePlan:
    """Where the events lie: `ranges` in file order, then `tail` (the last events, as a raw JSON
    array, parsed by the parent) and `top` (the document's other top-level keys)."""

    ranges: list[EventRange]
    tail: bytes | None
    top: dict[str, Any]


def range_bytes(size: int, workers: int) -> int:
    """How big a range to give each of `workers` so that their parses together hold at most
    `WORKERS_SHARE` of a trace of `size` bytes (16 workers on 535 MB: ~2.8 MB each)."""
    fitting = int(size * WORKERS_SHARE / (max(1, workers) * PARSE_PER_RANGE_BYTE))
    return max(MIN_RANGE_BYTES, min(RANGE_BYTES, fitting))


def plan_ranges(path: Path, range_bytes: int | None = None) -> RangePlan | None:
    """Cut `path`'s ``traceEvents`` into ranges of about `range_bytes` (default `RANGE_BYTES`).

    None when the file is not laid out for it (no event after the array's opening bracket): the
    caller streams it instead. Raises `Unchunkable` when it is not laid out as Kineto writes it.
    """
    size = range_bytes or RANGE_BYTES
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
        rest, header, rest_at = _header(view)
        lead = len(rest) - len(rest.lstrip(_WHITESPACE))
        if lead == len(rest) or rest[lead : lead + 1] != b"{":
            return None  # an empty array, or a first event the stream path should judge
        indent = _array_indent(rest[:lead])
        boundary = indent + b"{"
        first = rest_at + lead - len(indent)  # where the first event's boundary starts
        last = view.rfind(boundary, first)
        cuts = [first]
        position = first + size
        while position < last:
            cut = view.find(boundary, position, last + 1)
            if cut < 0 or cut >= last:
                break
            cuts.append(cut)
            position = cut + size
        cuts.append(last)
        skip = len(indent) - 1  # from a boundary to the whitespace byte before its "{"
        ranges = [EventRange(a + skip, b) for a, b in itertools.pairwise(cuts) if b > a]
        if any(r.end - r.start > MAX_CHUNK_BYTES for r in ranges):
            raise Unchunkable("an event, or the space between two, is longer than a chunk may be")
        tail, top = _tail(view[last + skip :], header)
    return RangePlan(ranges=ranges, tail=tail, top=top)


def read_range(path: str | Path, events: EventRange) -> bytes:
    """The events of `events` as a raw JSON array (``[`` ... ``]``), read from the file at `path`."""
    with open(path, "rb") as handle:
        handle.seek(events.start)
        raw = bytearray(handle.read(events.end - events.start))
    if len(raw) != events.end - events.start:
        raise Unchunkable("the file changed while it was read")
    comma = _last_comma_before(raw, len(raw))
    raw[0] = 0x5B  # "["
    raw[comma] = 0x5D  # "]"
    del raw[comma + 1 :]
    return bytes(raw)


def _header(view: mmap.mmap) -> tuple[bytes, dict[str, Any], int]:
    """`_read_header` over the mapped file: the bytes read after ``[``, the keys before, and where
    those bytes start in the file."""
    consumed = 0

    def blocks() -> Iterator[bytes]:
        nonlocal consumed
        while consumed < len(view):
            block = view[consumed : consumed + _HEADER_BLOCK]
            consumed += len(block)
            yield block

    rest, header = _read_header(blocks())
    return rest, header, consumed - len(rest)


def _tail(raw: bytes, header: dict[str, Any]) -> tuple[bytes | None, dict[str, Any]]:
    """The last events (re-encoded as a JSON array, or None) and the top-level keys, from the bytes
    after the last boundary: parsed as ``{"traceEvents":[`` + them, as `EventChunks` parses its end."""
    document = _loads(b'{"traceEvents":[' + raw[1:])
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise Unchunkable("the end of the document is not the end of traceEvents")
    last = document.pop("traceEvents")
    header.update(document)
    if not last:
        return None, header
    try:
        return orjson.dumps(last), header
    except orjson.JSONEncodeError:  # deeper than orjson writes (it reads deeper than it writes)
        raise Unchunkable("an event nests too deeply to re-chunk") from None
