"""Python frames as the profiler names them: ``file(def_line): func``, builtins, ``nn.Module: X``."""

from __future__ import annotations

import re
import sys
from functools import lru_cache

from tracer.model.origin import Frame

# Line numbers: ASCII digits, at most 9 (int() refuses over 4,300 digits; no file has 10**9 lines).
_FRAME = re.compile(r"^(?P<file>.*)\((?P<line>[0-9]{1,9})\): (?P<function>.*)$")
_BUILTIN = re.compile(r"^<built-in (?:method|function) (?P<name>[\w.]+)(?: of (?P<owner>.*?))?>$")
_STDLIB = frozenset(sys.stdlib_module_names)
BUILTIN_FILE = "<built-in>"
MODULE_FILE = "nn.Module"


@lru_cache(maxsize=65536)
def parse_frame(name: str) -> Frame:
    """The `Frame` a python_function event names (without the call line, which CallFrom adds)."""
    match = _FRAME.match(name)
    if match is not None:
        return Frame(match["file"], match["function"], int(match["line"]))
    if name.startswith("<built-in"):
        return Frame(BUILTIN_FILE, name[1:-1].removeprefix("built-in "))
    if name.startswith("nn.Module: "):
        return Frame(MODULE_FILE, name.removeprefix("nn.Module: "))
    return Frame(name, name)


@lru_cache(maxsize=65536)
def builtin_name(name: str) -> str | None:
    """``<built-in method to of Tensor object>`` -> ``to``; None for frames that are not builtins."""
    match = _BUILTIN.match(name)
    return match["name"].rsplit(".", 1)[-1] if match is not None else None


def is_builtin(name: str) -> bool:
    return name.startswith("<built-in")


@lru_cache(maxsize=65536)
def is_library_file(file: str) -> bool:
    """Frames kerneltrace looks through for the user's line: torch itself and the stdlib."""
    path = file.replace("\\", "/")
    if (
        path.startswith(("torch/", "triton/", "<", "nn.Module", "importlib/", "concurrent/"))
        or "/torch/" in path
    ):
        return True
    if "/site-packages/torch/" in path or ("/lib/python3" in path and "site-packages" not in path):
        return True
    head = path.split("/", 1)[0]
    stem = head.removesuffix(".py")
    return stem in _STDLIB or stem.startswith("_collections_abc")


@lru_cache(maxsize=65536)  # asked for every frame on every chain; names repeat
def is_user_frame(name: str) -> bool:
    """A frame of the user's code: not a builtin, not an ``nn.Module:`` marker, not torch or stdlib."""
    if name.startswith(("<built-in", "nn.Module: ")):
        return False
    frame = parse_frame(name)
    return frame.def_line is not None and not is_library_file(frame.file)


def parse_call_from(text: object) -> tuple[str, int] | None:
    """``"model.py:45"`` -> ``("model.py", 45)``."""
    if not isinstance(text, str):
        return None
    file, _, line = text.rpartition(":")
    # isdigit() alone accepts "²" (int() does not) and any length (int() refuses over 4,300 digits).
    return (file, int(line)) if file and line.isascii() and line.isdigit() and len(line) <= 9 else None


def same_file(a: str, b: str) -> bool:
    """Paths name the same file when one is a suffix of the other at a path boundary."""
    if a == b:
        return True
    a, b = a.replace("\\", "/"), b.replace("\\", "/")
    return a.endswith("/" + b) or b.endswith("/" + a)
