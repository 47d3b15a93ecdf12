"""Split a trace's ``traceEvents`` array into chunks at event boundaries and parse them one by one.

Kineto writes one event per line group, each starting on a new line at the array's indentation
(``\\n  {``); nested objects sit deeper. Cutting the byte stream at the last such boundary of each
block lets orjson parse a few MB at a time, so the whole parsed event list (~4x the JSON size in
Python objects) never exists at once. Any other layout raises `Unchunkable` and the caller parses
the document whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

HEADER_LIMIT = 64 << 20  # the "traceEvents" key (and the first event) must appear within this many bytes
MAX_CHUNK_BYTES = 64 << 20  # one event, or the space between two, longer than this is not Kineto's
_EVENTS_NAME = b'"traceEvents"'
_SPACE = re.compile(rb"[ \t\r\n]*")
_WHITESPACE = b" \t\r\n"


class Unchunkable(Exception):
    """The document is not laid out as Kineto writes it (or is not valid); parse it whole instead."""


def parse_in_chunks(blocks: Iterable[bytes], on_chunk: Callable[[bytes, int], int]) -> dict[str, Any]:
    """Feed each chunk of events (a raw JSON array, and the index of its first event) to `on_chunk`,
    which parses it and returns its number of events.

    Returns the document's other top-level keys (those before and after ``traceEvents``).
    """
    chunks = EventChunks(blocks)
    first_index = 0
    for raw in chunks:
        first_index += on_chunk(raw, first_index)
        del raw
    return chunks.top


def parse_array(raw: bytes) -> list[Any]:
    """One chunk's events, parsed (orjson); `Unchunkable` if it is not a JSON array."""
    events = _loads(raw)
    if not isinstance(events, list):
        raise Unchunkable("a chunk is not a JSON array")
    return events


class EventChunks:
    """Iterate over the ``traceEvents`` array as raw JSON arrays of whole events (bytes), in order.

    After the iteration, `top` holds the document's other top-level keys.
    """

    def __init__(self, blocks: Iterable[bytes]) -> None:
        self._stream = iter(blocks)
        self.top: dict[str, Any] = {}

    def __iter__(self) -> Iterator[bytes]:
        stream = self._stream
        rest, header = _read_header(stream)
        start = len(rest) - len(rest.lstrip(_WHITESPACE))
        indent = _array_indent(rest[:start])
        boundary = indent + b"{"
        # `buffer` starts with the whitespace before an event's "{": its first byte becomes the
        # "[" and the comma after the last whole event the "]" of one chunk.
        buffer = bytearray(rest[start - 1 :])
        del rest
        for block in stream:
            buffer += block
            # Only the new bytes can hold a boundary: the rest was searched when it arrived (a search
            # of the whole buffer per block is quadratic when events are huge or far apart).
            cut = buffer.rfind(boundary, max(1, len(buffer) - len(block) - len(boundary) + 1))
            if cut <= 0:
                if len(buffer) > MAX_CHUNK_BYTES:
                    raise Unchunkable("an event, or the space between two, is longer than a chunk may be")
                continue
            comma = _last_comma_before(buffer, cut)
            buffer[0] = 0x5B  # "["
            buffer[comma] = 0x5D  # "]"
            chunk = bytes(memoryview(buffer)[: comma + 1])
            del buffer[: cut + len(indent) - 1]
            yield chunk
            del chunk
        # The last events, the array's end and any top-level keys after it.
        buffer[0:1] = b'{"traceEvents":['
        document = _loads(buffer)
        del buffer
        if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
            raise Unchunkable("the end of the document is not the end of traceEvents")
        last = document.pop("traceEvents")
        header.update(document)
        self.top = header
        if last:
            try:
                yield orjson.dumps(last)
            except orjson.JSONEncodeError:  # deeper than orjson writes (it reads deeper than it writes)
                raise Unchunkable("an event nests too deeply to re-chunk") from None


def _read_header(stream: Iterator[bytes]) -> tuple[bytes, dict[str, Any]]:
    """Read until just after ``"traceEvents": [`` and the space before the first event; parse the
    keys before it. Each byte is looked at once (a rescan per block is quadratic), at most
    `HEADER_LIMIT` of them."""
    buffer = bytearray()
    name_at = -1  # where '"traceEvents"' starts, once found
    search_from = 0  # the name does not start before here
    position = 0  # how far the syntax after the name has been read
    expected = b":"  # then b"[", then the first event (b"" once the colon and bracket are read)
    array_at = -1
    opened = False
    for block in stream:
        buffer += block
        if not opened:
            first = _space_end(buffer, 0)
            if first < len(buffer):
                if buffer[first : first + 1] != b"{":
                    raise Unchunkable("not a JSON object")
                opened = True
        while opened:
            if name_at < 0:
                name_at = buffer.find(_EVENTS_NAME, search_from)
                if name_at < 0:
                    search_from = max(0, len(buffer) - len(_EVENTS_NAME) + 1)
                    break
                position, expected = name_at + len(_EVENTS_NAME), b":"
            position = _space_end(buffer, position)
            if position == len(buffer):
                break  # more bytes needed
            if not expected:  # the first event's leading space is read: its indentation is known
                head = bytes(buffer[:name_at]).strip(_WHITESPACE)
                if head.endswith(b","):
                    head = head[:-1]
                header = _loads(head + b"}")
                if not isinstance(header, dict):
                    raise Unchunkable("header is not an object")
                return bytes(buffer[array_at:]), header
            if buffer[position : position + 1] != expected:  # the name was a value, not the key
                search_from, name_at = name_at + 1, -1
                continue
            position += 1
            if expected == b"[":
                array_at = position
            expected = b"[" if expected == b":" else b""
        if len(buffer) > HEADER_LIMIT:
            break
    raise Unchunkable("no traceEvents array near the start")


def _last_comma_before(buffer: bytearray, cut: int) -> int:
    end = cut
    while end > 0 and buffer[end - 1] in _WHITESPACE:
        end -= 1
    if end == 0 or buffer[end - 1] != 0x2C:  # ","
        raise Unchunkable("events are not separated by commas at the array's indentation")
    return end - 1


def _space_end(buffer: bytearray, position: int) -> int:
    """Where the whitespace from `position` ends (`_SPACE` matches the empty string too: never None)."""
    match = _SPACE.match(buffer, position)
    assert match is not None
    return match.end()


def _array_indent(leading: bytes) -> bytes:
    newline = leading.rfind(b"\n")
    if newline < 0:
        raise Unchunkable("events are not on their own lines")
    return leading[newline:]


def _loads(data: bytes | bytearray) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise Unchunkable(str(err)) from None
