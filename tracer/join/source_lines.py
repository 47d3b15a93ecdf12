"""Find the files a trace names under the user's source roots, and read their lines."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


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
        if path.is_absolute():
            if path.is_file() and (not self.roots or any(path.is_relative_to(r) for r in self.roots)):
                return path
            parts = path.parts[1:]
        else:
            parts = path.parts
        # Try the name as given under each root, then ever shorter tails of it (the root may sit
        # inside the package, or the trace may name site-packages paths of another machine).
        for start in range(len(parts)):
            tail = Path(*parts[start:])
            for root in self.roots:
                candidate = root / tail
                if candidate.is_file():
                    return candidate
                if tail.parts[0] == root.name and (root.parent / tail).is_file():
                    return root.parent / tail  # the root is the package the trace names: --source sglang/
        return None

    def line(self, file: str, line: int) -> str | None:
        """The stripped text of `line` (1-based) of `file`, or None when the file is not found."""
        path = self.find(file)
        if path is None:
            return None
        lines = self._lines.get(path)
        if lines is None and path not in self._lines:
            try:
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                lines = None
            self._lines[path] = lines
        if not lines or not 1 <= line <= len(lines):
            return None
        return lines[line - 1].strip()
