"""Memory is bounded by design: what a load may use, checked before parsing and while streaming.

The estimate is the loader's measured peak: on a 247 MB Kineto trace (986k events, built by
bench/bench_explain.py's replicator from the shared llama trace), the peak resident memory above the
interpreter's own was 0.74 x the JSON size for the load and 0.86 x for load + join + explain (one
process), plus about 100-150 MB of chunk buffers on small traces. A document that must be parsed
whole (not laid out as Kineto writes it) holds its bytes and ~4x their size in Python objects.

The budget follows the machine: the least of the memory available now (``MemAvailable``), the
room left under the process's address-space limit (``ulimit -v``) and under its cgroup's memory limit
(a container). `KERNELTRACE_MEMORY_LIMIT` (bytes) overrides it; a rank worker gets its share.
The gzip size field (ISIZE) only gives an early answer: the bytes are counted as they inflate.
"""

from __future__ import annotations

import contextlib
import os
import resource
import struct
from collections.abc import Iterator
from pathlib import Path

from tracer.errors import InputError

MEMORY_LIMIT_ENV = "KERNELTRACE_MEMORY_LIMIT"
PEAK_PER_JSON_BYTE = 1.0  # measured 0.74-0.86; rounded up
WHOLE_PARSE_PER_JSON_BYTE = 5.0  # the bytes, and ~4x their size in parsed objects
FIXED_BYTES = 256 << 20  # chunk buffers (a few 8 MB blocks and their parsed events), imports
MIN_FIXED_BYTES = 32 << 20  # ... of which a trace smaller than one block needs only a little
FIXED_PER_JSON_BYTE = 8  # (buffers and parsed events of a small trace: a few times its size)
MAX_DEFLATE_RATIO = 1032  # deflate's limit: a gzip member never inflates more than this
TYPICAL_GZIP_RATIO = 13  # Kineto JSON compresses 13-16:1 (the fixtures); used only past 4 GiB
_WRAP = 1 << 32

_budget_override: int | None = None  # set by `memory_budget` (a rank worker's share)


def json_size(path: Path, compressed: bool) -> int:
    """The trace's JSON size in bytes: the file size, or gzip's recorded size (ISIZE, modulo 4 GiB).

    Only an estimate for gzip (a crafted file can state anything): `InflationGuard` counts the bytes.
    """
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


def json_size_of(path: Path) -> int:
    """`json_size` of a file that may not be readable (0 then: the load will say why)."""
    try:
        with path.open("rb") as handle:
            compressed = handle.read(2) == b"\x1f\x8b"
        return json_size(path, compressed)
    except OSError:
        return 0


@contextlib.contextmanager
def memory_budget(budget: int | None) -> Iterator[None]:
    """Within the block, loads may use at most `budget` bytes (None: no change)."""
    global _budget_override
    previous = _budget_override
    if budget is not None:
        _budget_override = budget
    try:
        yield
    finally:
        _budget_override = previous


def available_memory() -> int | None:
    """Bytes this process may still use: a worker's budget, else `KERNELTRACE_MEMORY_LIMIT`, else the
    least of what the machine, the address-space limit and the cgroup leave (None if none is known)."""
    if _budget_override is not None:
        return _budget_override
    configured = os.environ.get(MEMORY_LIMIT_ENV)
    if configured is not None and configured.strip():
        text = configured.strip()
        if not (text.isascii() and text.isdigit() and len(text) < 20):
            raise InputError(MEMORY_LIMIT_ENV, f"{configured!r} is not a number of bytes")
        return int(text)
    known = [room for room in (_mem_available(), _address_space_room(), _cgroup_room()) if room is not None]
    return max(0, min(known)) if known else None


def _mem_available() -> int | None:
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


def _address_space_room() -> int | None:
    """Under `ulimit -v`: the limit less the address space already mapped."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return soft - int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return soft


def _cgroup_room() -> int | None:
    """In a container: cgroup v2's memory.max less memory.current."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
    except (OSError, ValueError):
        return None


def fixed_bytes(json_bytes: int) -> int:
    """Memory a load needs besides what grows with the JSON: buffers of up to a few blocks."""
    return min(FIXED_BYTES, MIN_FIXED_BYTES + FIXED_PER_JSON_BYTE * json_bytes)


def estimated_peak(json_bytes: int, share: float = 1.0) -> int:
    loaded = int(json_bytes * share)
    return fixed_bytes(loaded) + int(PEAK_PER_JSON_BYTE * loaded)


def _most_json(available: int, per_byte: float) -> int:
    """The largest JSON size whose fixed part plus `per_byte` x its size fits in `available`."""
    small = (available - MIN_FIXED_BYTES) / (FIXED_PER_JSON_BYTE + per_byte)  # while the fixed part grows
    small = min(small, (FIXED_BYTES - MIN_FIXED_BYTES) / FIXED_PER_JSON_BYTE)
    large = (available - FIXED_BYTES) / per_byte  # once it is whole
    return max(0, int(max(small, large)))


def streaming_limit() -> int | None:
    """The most JSON bytes a whole (unwindowed) load may stream through: what fits in the budget."""
    available = available_memory()
    return None if available is None else _most_json(available, PEAK_PER_JSON_BYTE)


def whole_parse_limit() -> int | None:
    """The most JSON bytes a document parsed whole may have."""
    available = available_memory()
    return None if available is None else _most_json(available, WHOLE_PARSE_PER_JSON_BYTE)


def check_memory(path: Path, json_bytes: int, *, share: float = 1.0, window_label: str | None = None) -> None:
    """Raise `InputError` when loading (the `share` of) the trace would need more than is available."""
    available = available_memory()
    if available is None:
        return
    needed = estimated_peak(json_bytes, share)
    if needed <= available:
        return
    size = f"{human(json_bytes)} of JSON" if share >= 1.0 else f"{window_label}, ~{share:.0%} of the trace"
    raise InputError(
        path,
        f"too big for this machine's memory: loading it needs about {human(needed)} ({size}), "
        f"{human(available)} is available; {way_forward(window_label)}",
    )


def way_forward(window_label: str | None = None) -> str:
    how = (
        "explain a part of it with --steps N-M (ProfilerStep#N..#M) or --window START_MS:END_MS"
        if window_label is None
        else "narrow the window (--steps, --window)"
    )
    return f"{how}, or set {MEMORY_LIMIT_ENV}=BYTES to override"


def human(count: int) -> str:
    return f"{count / 1e9:.1f} GB" if count >= 1e9 else f"{count / 1e6:.0f} MB"
