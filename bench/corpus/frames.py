"""Which frames are the user's, decided on the profiler's own file names (no import of `tracer`).

The recorder must agree with the join on what a "user frame" is, yet stay independent of it: this
mirrors `tracer.join.frames.is_library_file` (tests/corpus check that the two agree), and names
files the way torch's Python tracer does (the path relative to the deepest prefix of
`torch.profiler.python_tracer._prefix_regex()`).
"""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache

_STDLIB = frozenset(sys.stdlib_module_names)
_FRAME = re.compile(r"^(?P<file>.*)\((?P<line>[0-9]{1,9})\): (?P<function>.*)$")


@lru_cache(maxsize=65536)
def is_library_name(file: str) -> bool:
    """torch itself and the stdlib, as the join decides it on a profiler file name."""
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


def frame_file(name: str) -> str | None:
    """``pkg/mod.py(12): f`` -> ``pkg/mod.py``; None for built-ins and ``nn.Module:`` markers."""
    if name.startswith(("<built-in", "nn.Module: ")):
        return None
    match = _FRAME.match(name)
    return match["file"] if match is not None else None


def same_file(a: str, b: str) -> bool:
    """One path is a suffix of the other at a path boundary (as `tracer.join.frames.same_file`)."""
    if a == b:
        return True
    a, b = a.replace("\\", "/"), b.replace("\\", "/")
    return a.endswith("/" + b) or b.endswith("/" + a)


class ProfilerNames:
    """Absolute ``co_filename`` -> the name torch's Python tracer gives that file in a trace."""

    def __init__(self) -> None:
        try:
            from torch.profiler.python_tracer import _prefix_regex

            self.prefixes = tuple(_prefix_regex())
        except ImportError:  # older torch: the same list, built here
            import site

            import torch

            raw = [*site.getsitepackages(), *sys.path, site.getuserbase(), site.getusersitepackages()]
            raw.append(os.path.dirname(os.path.dirname(torch.__file__)))
            self.prefixes = tuple(p + os.sep for p in sorted({os.path.abspath(p) for p in raw}, reverse=True))
        self._names: dict[str, str] = {}

    def name(self, filename: str) -> str:
        found = self._names.get(filename)
        if found is None:
            found = filename
            for prefix in self.prefixes:  # sorted in reverse: the deepest matching prefix comes first
                if filename.startswith(prefix):
                    found = filename[len(prefix) :]
                    break
            self._names[filename] = found
        return found
