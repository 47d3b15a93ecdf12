"""Open a trace file as a stream of decompressed byte blocks, sniffing gzip by its magic bytes."""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path

from tracer import progress
from tracer.errors import InputError
from tracer.load.memory import human, way_forward

GZIP_MAGIC = b"\x1f\x8b"
BLOCK_BYTES = 8 << 20  # read and decompress this much at a time: bounds the loader's working memory
# Kineto JSON compresses 13-16:1; deflate allows up to 1032:1. Past this ratio (once enough has
# inflated that a small file cannot trip it) the data is a decompression bomb, refused in a second.
MAX_INFLATION_RATIO = 200
RATIO_CHECKED_AFTER = 64 << 20


def check_readable(path: Path) -> None:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except (OSError, ValueError) as err:  # name too long, a loop of symlinks, no permission, a NUL
        raise InputError(path, f"cannot read: {getattr(err, 'strerror', None) or err}") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(path, "is a directory, not a trace file")
    if not stat.S_ISREG(info.st_mode):
        # A FIFO or device would block or never end; decompress it to a file first.
        raise InputError(path, "not a regular file (a FIFO, device or socket): save the trace to a file")
    if info.st_size == 0:
        raise InputError(path, "empty file, not a profiler trace")


def is_gzip(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def read_blocks(
    path: Path, notes: list[str] | None = None, *, max_bytes: int | None = None, why: str = ""
) -> Iterator[bytes]:
    """Yield the file's decompressed bytes in blocks of about `BLOCK_BYTES`.

    gzip is recognised by content, not by name: a plain JSON file named ``.gz`` still loads (with a
    note), and other bytes named ``.gz`` are reported as not gzip. More than `max_bytes` in all
    raises `InputError` (`why` says what the limit is for), as does gzip data inflating like a bomb.
    """
    check_readable(path)
    blocks = _gunzip_blocks(path) if is_gzip(path) else _plain_blocks(path, notes)
    if max_bytes is None:
        yield from blocks
        return
    total = 0
    for block in blocks:
        total += len(block)
        if total > max_bytes:
            raise InputError(
                path,
                f"holds more than {human(max_bytes)} of JSON, more than {why or 'the memory available'} "
                f"allows; {way_forward()}",
            )
        yield block


def read_all(
    path: Path, notes: list[str] | None = None, *, max_bytes: int | None = None, why: str = ""
) -> bytearray:
    """The file's decompressed bytes in one buffer (grown in place, not copied per block)."""
    whole = bytearray()
    for block in read_blocks(path, notes, max_bytes=max_bytes, why=why):
        whole += block
    return whole


def _plain_blocks(path: Path, notes: list[str] | None) -> Iterator[bytes]:
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        first = handle.read(BLOCK_BYTES)
        if path.suffix == ".gz":
            if first.lstrip()[:1] not in (b"{", b"["):
                raise InputError(path, f"named .gz but is not gzip data (starts with {first[:8]!r})")
            if notes is not None:
                notes.append("file is named .gz but holds plain JSON; read it as JSON")
        while first:
            progress.report(f"reading {path.name}", handle.tell(), size)
            yield first
            first = handle.read(BLOCK_BYTES)


def _gunzip_blocks(path: Path) -> Iterator[bytes]:
    # zlib with wbits=31 reads one gzip member; concatenated members (gzip -c a b) restart it, and
    # bytes after the last member that are not gzip are ignored, as gzip(1) does.
    inflater = zlib.decompressobj(31)
    member_open = False  # fed bytes of a member whose end marker has not been seen yet
    more_members = True
    consumed = inflated = 0
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        while more_members and (compressed := handle.read(BLOCK_BYTES // 4)):
            progress.report(f"reading {path.name}", handle.tell(), size)  # by the file's own bytes
            while compressed and more_members:
                member_open = True
                fed = len(compressed)
                try:
                    out = inflater.decompress(compressed, BLOCK_BYTES)
                except zlib.error as err:
                    raise InputError(path, f"corrupt gzip data ({err})") from None
                compressed = inflater.unconsumed_tail
                if inflater.eof:
                    member_open = False
                    compressed = inflater.unused_data
                    more_members = not compressed or compressed.startswith(GZIP_MAGIC)
                    inflater = zlib.decompressobj(31)
                consumed += fed - len(compressed)
                inflated += len(out)
                if inflated > RATIO_CHECKED_AFTER and inflated > MAX_INFLATION_RATIO * max(consumed, 1):
                    raise InputError(
                        path,
                        f"gzip data inflating over {MAX_INFLATION_RATIO}:1 ({human(consumed)} -> "
                        f"{human(inflated)} so far): a decompression bomb, not a profiler trace "
                        "(those compress about 15:1)",
                    )
                if out:
                    yield out
    if member_open:
        raise InputError(path, "truncated gzip: the compressed stream ends before its end marker")
