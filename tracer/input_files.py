"""Read the small files given beside a trace (``--config``, ``--sites``, rule files, ``KERNELTRACE_SITES``)
with the trace's own checks: a regular file (a FIFO would block, ``/dev/zero`` never end), at most a
size, JSON within orjson's depth and number limits, each failure one line naming the file."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import orjson

from tracer.errors import InputError

MAX_CONFIG_BYTES = 16 << 20  # a model config.json is a few KB
MAX_SITES_BYTES = 256 << 20  # `scan --json` of all of sglang (23k sites) is about 20 MB
MAX_RULES_BYTES = 4 << 20  # a rule file is a few KB


def read_side_input(path: str | Path, what: str, max_bytes: int) -> bytes:
    """The bytes of the `what` file at `path` (say ``--config``), or `InputError` in one line.

    Opened without blocking and checked through the descriptor, so a FIFO or device named as the
    file (or swapped in after a check) is refused rather than read.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise InputError(path, f"no such file ({what})") from None
    except (OSError, ValueError) as err:
        raise InputError(path, f"cannot read ({what}): {getattr(err, 'strerror', None) or err}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputError(path, f"is a directory, not a file ({what})")
        if not stat.S_ISREG(info.st_mode):
            raise InputError(path, f"not a regular file (a FIFO, device or socket) ({what})")
        if info.st_size > max_bytes:
            raise InputError(path, f"too large for a {what} file ({info.st_size:,} bytes > {max_bytes:,})")
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(min(max_bytes, info.st_size) + 1)  # read(n) reserves n bytes up front
    except OSError as err:
        raise InputError(path, f"cannot read ({what}): {err.strerror or err}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # grew after the size check
        raise InputError(path, f"too large for a {what} file (over {max_bytes:,} bytes)")
    return data


def read_json_side_input(path: str | Path, what: str, max_bytes: int) -> Any:
    """The decoded JSON of a side input; orjson bounds depth (1024) and refuses numbers beyond a double."""
    data = read_side_input(path, what, max_bytes)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise InputError(path, f"not JSON ({what}): {err}") from None
