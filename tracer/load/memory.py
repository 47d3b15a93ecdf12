"""Refuse a trace that would not fit in memory before parsing it, and say how to proceed instead.

The estimate is the loader's measured peak: on a 247 MB Kineto trace (986k events, built by
bench/bench_explain.py's replicator from the shared llama trace), the peak resident memory above the
interpreter's own was 0.74 x the JSON size for the load and 0.86 x for load + join + explain (one
process), plus about 100-150 MB of chunk buffers on small traces. It is compared with the memory
available now (``MemAvailable``), which `KERNELTRACE_MEMORY_LIMIT` (bytes) overrides.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from tracer.errors import InputError

MEMORY_LIMIT_ENV = "KERNELTRACE_MEMORY_LIMIT"
PEAK_PER_JSON_BYTE = 1.0  # measured 0.74-0.86; rounded up
FIXED_BYTES = 256 << 20  # chunk buffers (a few 8 MB blocks and their parsed events), imports
MAX_DEFLATE_RATIO = 1032  # deflate's limit: a gzip member never inflates more than this
TYPICAL_GZIP_RATIO = 13  # Kineto JSON compresses 13-16:1 (the fixtures); used only past 4 GiB
_WRAP = 1 << 32


def json_size(path: Path, compressed: bool) -> int:
    """The trace's JSON size in bytes: the file size, or gzip's recorded size (ISIZE, modulo 4 GiB)."""
    size = path.stat().st_size
    if not compressed:
        return size
    try:
        with path.open("rb") as handle:
            handle.seek(-4, os.SEEK_END)
            recorded = struct.unpack("<I", handle.read(4))[0]
    except (OSError, struct.error):
        return size * TYPICAL_GZIP_RATIO
    if recorded > size * MAX_DEFLATE_RATIO:  # not what deflate can produce: bytes after the member
        return size * TYPICAL_GZIP_RATIO
    if size * 20 < _WRAP:  # no trace compresses 20:1, so the true size is below 4 GiB: ISIZE is exact
        return max(recorded, size)
    wraps = max(0, round((size * TYPICAL_GZIP_RATIO - recorded) / _WRAP))
    return recorded + wraps * _WRAP


def available_memory() -> int | None:
    """Bytes this process may still use: `KERNELTRACE_MEMORY_LIMIT`, else MemAvailable, else free RAM."""
    configured = os.environ.get(MEMORY_LIMIT_ENV)
    if configured is not None and configured.strip():
        text = configured.strip()
        if not (text.isascii() and text.isdigit()):
            raise InputError(MEMORY_LIMIT_ENV, f"{configured!r} is not a number of bytes")
        return int(text)
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def estimated_peak(json_bytes: int, share: float = 1.0) -> int:
    return FIXED_BYTES + int(PEAK_PER_JSON_BYTE * json_bytes * share)


def check_memory(path: Path, json_bytes: int, *, share: float = 1.0, window_label: str | None = None) -> None:
    """Raise `InputError` when loading (the `share` of) the trace would need more than is available."""
    available = available_memory()
    if available is None:
        return
    needed = estimated_peak(json_bytes, share)
    if needed <= available:
        return
    size = f"{_human(json_bytes)} of JSON" if share >= 1.0 else f"{window_label}, ~{share:.0%} of the trace"
    how = (
        "explain a part of it with --steps N-M (ProfilerStep#N..#M) or --window START_MS:END_MS"
        if window_label is None
        else "narrow the window (--steps, --window)"
    )
    raise InputError(
        path,
        f"too big for this machine's memory: loading it needs about {_human(needed)} ({size}), "
        f"{_human(available)} is available; {how}, or set {MEMORY_LIMIT_ENV}=BYTES to override",
    )


def _human(count: int) -> str:
    return f"{count / 1e9:.1f} GB" if count >= 1e9 else f"{count / 1e6:.0f} MB"
