"""Find the files a trace names under the user's source roots, and read their lines."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

MAX_SOURCE_BYTES = 8 << 20  # the scanner's limit too: a bigger "source file" is data, not code


def read_source_text(path: Path) -> str | None:
    """The text of a source file a trace names, or None: only a regular file, at most
    `MAX_SOURCE_BYTES` (a trace could name a FIFO, which would block, or a huge file)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SOURCE_BYTES:
            return None
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(MAX_SOURCE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_SOURCE_BYTES:
        return None
    return data.decode("utf-8", errors="replace")


def _is_file(path: Path) -> bool:
    """`Path.is_file` for a name a trace made up: too long for the OS, or holding a NUL, is no file."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


class SourceLines:
    """Resolves trace file names (``transformers/models/x.py``, ``/abs/x.py``) under source roots."""

    def __init__(self, roots: Sequence[str | Path] = ()) -> None:
        self.roots = tuple(Path(root).resolve() for root in roots)
        self._paths: dict[str, Path | None] = {}
        self._lines: dict[Path, list[str] | None] = {}

    def find(self, file: str) -> Path | None:
        """The file on disk that a trace's file name means, or None."""
        if file in self._paths:
            return self._paths[file]
        found = self._search(file)
        self._paths[file] = found
        return found

    def _search(self, file: str) -> Path | None:
        if file.startswith("<") or not file.endswith(".py"):
            return None
        path = Path(file)
        if ".." in path.parts:  # a trace is untrusted: its names never climb out of a source root
            return None
        if path.is_absolute():
            if _is_file(path) and (not self.roots or self._inside(path)):
                return path
            parts = path.parts[1:]
        else:
            parts = path.parts
        # Try the name as given under each root, then ever shorter tails of it (the root may sit
        # inside the package, or the trace may name site-packages paths of another machine).
        for start in range(len(parts)):
            tail = Path(*parts[start:])
            for root in self.roots:
                for candidate in (root / tail, root.parent / tail if tail.parts[0] == root.name else None):
                    # (the second: the root is the package the trace names, --source sglang/)
                    if candidate is not None and _is_file(candidate) and self._inside(candidate):
                        return candidate
        return None

    def _inside(self, path: Path) -> bool:
        """Whether `path`, symlinks resolved, lies under a source root: a link inside a root that
        points elsewhere is not followed (a trace is untrusted, and so is the tree it names)."""
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            return False
        return any(real.is_relative_to(root) for root in self.roots)

    def line(self, file: str, line: int) -> str | None:
        """The stripped text of `line` (1-based) of `file`, or None when the file is not found."""
        path = self.find(file)
        if path is None:
            return None
        lines = self._lines.get(path)
        if lines is None and path not in self._lines:
            text = read_source_text(path)
            lines = text.splitlines() if text is not None else None
            self._lines[path] = lines
        if not lines or not 1 <= line <= len(lines):
            return None
        return lines[line - 1].strip()
