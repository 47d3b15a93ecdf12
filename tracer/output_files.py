"""Write output files safely: never over an input, never into a FIFO or device, all or nothing.

Each output is written to a new private file beside it (``O_EXCL``: a name planted in advance, or a
symlink, is never opened) and renamed into place once complete, so a full disk or a crash leaves the
old file, not half a new one. The commands declare what they read (`protect_inputs`); an output that
is one of those files is refused instead of overwriting the input.

Names are untrusted and may hold any code point, or bytes that are not UTF-8 (a file name): `visible`,
`xml_data` and `json_ready` make them something every output format can carry.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from tracer.errors import InputError

# What XML 1.0 cannot hold at all (GraphML is XML): C0 controls but tab and newlines, surrogates, U+FFFE/F.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")

_inputs: set[tuple[int, int]] = set()  # (device, inode) of every input this process was given


def protect_inputs(paths: Iterable[str | Path | None]) -> None:
    """Remember `paths` (files, or directories: the files directly in them) as inputs, never outputs."""
    for path in paths:
        if path is None:
            continue
        try:
            info = os.stat(path)
        except (OSError, ValueError):
            continue  # missing: the read will say so
        if stat.S_ISDIR(info.st_mode):
            with contextlib.suppress(OSError):
                for entry in os.scandir(path):
                    with contextlib.suppress(OSError):
                        if entry.is_file():
                            found = entry.stat()
                            _inputs.add((found.st_dev, found.st_ino))
        else:
            _inputs.add((info.st_dev, info.st_ino))


def check_output(path: str | Path) -> Path:
    """`path` if an output may be written there; else `InputError` saying why (one line)."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except (OSError, ValueError) as err:
        raise InputError(path, f"cannot write there: {getattr(err, 'strerror', None) or err}") from None
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            raise InputError(path, "is a directory: give a file name for the output")
        if not stat.S_ISREG(info.st_mode):
            raise InputError(
                path, "not a regular file (a FIFO, device or socket): write the output to a file"
            )
        if (info.st_dev, info.st_ino) in _inputs:
            raise InputError(path, "is an input of this command: write the output to another file")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(path, f"no such directory: {parent}")
    return path


@contextlib.contextmanager
def output_file(path: str | Path, *, text: bool = False) -> Iterator[IO]:
    """A file object whose contents replace `path` when the block ends without an error."""
    path = check_output(path)
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:100]}.", suffix=".partial")
    except OSError as err:
        raise InputError(path, f"cannot write: {err.strerror or err}") from None
    try:
        with os.fdopen(
            fd,
            "w" if text else "wb",
            encoding="utf-8" if text else None,
            errors="backslashreplace" if text else None,
        ) as handle:
            yield handle
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise InputError(path, f"cannot write: {err.strerror or err}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_output(path: str | Path, data: bytes | str) -> Path:
    """Write `data` (text is UTF-8) to `path` as `output_file` does; returns the path."""
    with output_file(path, text=isinstance(data, str)) as handle:
        handle.write(data)
    return Path(path)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def visible(text: str) -> str:
    """`text` encodable as UTF-8: the lone surrogates that stand for bytes of a file name that are not
    UTF-8 (Python's ``surrogateescape``) become ``\\xNN``; any other lone surrogate ``\\udNNN``."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return "".join(f"\\u{ord(c):04x}" if "\ud800" <= c <= "\udfff" else c for c in text)
    return raw.decode("utf-8", "backslashreplace")


def xml_data(text: Any) -> str:
    """For data formats built on XML (GraphML): the text kept, each character XML cannot hold written
    as ``\\xNN`` / ``\\uNNNN`` (the data stays readable and distinct)."""
    return _NOT_XML.sub(lambda m: _escaped(m.group()), visible(str(text)))


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def json_ready(value: Any) -> Any:
    """`value` with every string `visible` (orjson refuses lone surrogates), dataclasses as dicts."""
    import dataclasses

    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {json_ready(k) if isinstance(k, str) else k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(item) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_ready(dataclasses.asdict(value))
    return value
