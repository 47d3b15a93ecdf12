"""Decompression bombs shaped like traces: small ``.json.gz`` files that inflate to gigabytes.

Each is written in well under a second: one gzip member of a repeated pattern is compressed once and
then repeated (gzip(1) reads concatenated members as one stream), so the file is a few MB while its
JSON is GBs. Used by the hardening tests and `bench/fuzz_traces.py`'s bomb class.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

MEMBER_BYTES = 64 << 20  # inflated size of one member

HEAD = b'{\n  "schemaVersion": 1,\n  "traceEvents": [\n'
EVENT = b'  {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0, "args": {}}'
TAIL = b"\n  ]\n}\n"


def _member(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def _repeated(pattern: bytes, total: int) -> list[bytes]:
    """gzip members that together inflate to about `total` bytes of `pattern` repeated."""
    one = _member(pattern * (MEMBER_BYTES // len(pattern)))
    return [one] * max(1, total // MEMBER_BYTES)


def whitespace_between_events(path: Path, total: int = 8 << 30) -> Path:
    """Valid JSON: two events with `total` bytes of spaces and newlines between them."""
    parts = (
        [_member(HEAD + EVENT + b",")] + _repeated(b" " * 63 + b"\n", total) + [_member(b"\n" + EVENT + TAIL)]
    )
    path.write_bytes(b"".join(parts))
    return path


def whitespace_before_first_event(path: Path, total: int = 8 << 30) -> Path:
    """Spaces right after ``"traceEvents": [``: the header scan must not read them all."""
    parts = [_member(HEAD)] + _repeated(b" " * 64, total) + [_member(EVENT + TAIL)]
    path.write_bytes(b"".join(parts))
    return path


def huge_string(path: Path, total: int = 8 << 30) -> Path:
    """One event whose name is `total` bytes long."""
    parts = [_member(HEAD + b'  {"ph": "X", "cat": "kernel", "name": "')]
    parts += _repeated(b"a" * 64, total)
    parts += [_member(b'", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0}' + TAIL)]
    path.write_bytes(b"".join(parts))
    return path


def lying_size_field(path: Path, total: int = (4 << 30) + (64 << 20)) -> Path:
    """One member (no concatenation) of over 4 GiB, so its ISIZE trailer (modulo 4 GiB) claims 64 MB.

    Written as raw deflate with a full flush after each 64 MB block: the flush resets the history,
    so every block compresses to the same bytes, computed once."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = b" " * MEMBER_BYTES
    head = HEAD + EVENT + b",\n"
    tail = EVENT + TAIL
    first = deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH)
    one = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    count = total // MEMBER_BYTES
    last = deflate.compress(tail) + deflate.flush()
    crc = zlib.crc32(head)
    for _ in range(count):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(tail, crc)
    size = (len(head) + count * MEMBER_BYTES + len(tail)) & 0xFFFFFFFF
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = crc.to_bytes(4, "little") + size.to_bytes(4, "little")
    path.write_bytes(header + first + one * count + last + trailer)
    return path


BOMBS = {
    "whitespace_between_events": whitespace_between_events,
    "whitespace_before_first_event": whitespace_before_first_event,
    "huge_string": huge_string,
    "lying_size_field": lying_size_field,
}
