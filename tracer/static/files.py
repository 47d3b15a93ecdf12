"""Which files a scan reads: paths and packages expanded to `.py` files, each with its `Site.path`."""

from __future__ import annotations

import fnmatch
import functools
import importlib.util
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tracer.errors import InputError
from tracer.output_files import visible

# Presets name directories inside a package: `--preset sglang-hot` = the layers that run every step.
PRESETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sglang-hot": (
        "sglang",
        ("srt/layers/quantization", "srt/layers/attention", "srt/mem_cache", "srt/layers/moe"),
    ),
}

# Directories a walk never enters: VCS and tool caches, virtual environments and build outputs
# (ruff's default excludes): copies of code, not the code.
_SKIP_DIRS = {
    "__pycache__",
    "build",
    "_build",
    "dist",
    "venv",
    "site-packages",
    "__pypackages__",
    ".eggs",
    ".direnv",
    ".pytest_cache",
    ".ipynb_checkpoints",
    ".git",
    ".hg",
    ".svn",
    ".tox",
    ".nox",
    ".venv",
    "node_modules",
    ".mypy_cache",
    ".ruff_cache",
}


@dataclass(frozen=True)
class SourceFile:
    """One file to scan: where it is on disk and the path its sites carry (`sglang/srt/...py`)."""

    absolute: Path
    relative: str


def resolve_package(name: str) -> Path:
    """The source directory of an installed package, found without importing it."""
    top = name.split(".", 1)[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as err:
        raise InputError(name, f"cannot look up the package: {err}") from None
    if spec is None:
        raise InputError(name, "no installed package of that name")
    if spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations)))
    elif spec.origin and spec.origin not in ("built-in", "frozen"):
        root = Path(spec.origin)
    else:
        raise InputError(name, "package has no Python source on disk")
    rest = name.split(".")[1:]
    path = root.joinpath(*rest) if rest else root
    if not path.exists() and rest:
        candidate = root.joinpath(*rest[:-1], rest[-1] + ".py")
        path = candidate if candidate.exists() else path
    if not path.exists():
        raise InputError(name, f"{path} does not exist")
    return path.resolve()


def preset_paths(preset: str) -> list[Path]:
    """The directories a preset names, inside its installed package."""
    if preset not in PRESETS:
        raise InputError(preset, f"unknown preset; known: {', '.join(sorted(PRESETS))}")
    package, subdirs = PRESETS[preset]
    root = resolve_package(package)
    return [root / sub for sub in subdirs]


def import_root(path: Path) -> Path | None:
    """Where `import` starts for `path`: a `sys.path` directory above it (site-packages), else the
    parent of the topmost package directory above it. None for a loose file outside any package.

    Namespace packages (PEP 420) have directories without `__init__.py` in the middle
    (`sglang/srt/` has none), so the walk goes on past them, up to the first directory no import
    can name (`transformers-5.17.0`, `site-packages`): a `sys.path` entry above that one (the
    repository a source tree was unpacked in, put on PYTHONPATH) does not import the package,
    and the names of its files do not depend on how kerneltrace was started.
    """
    directory = (path if path.is_dir() else path.parent).resolve()
    top_package: Path | None = None
    for current in (directory, *directory.parents):
        if current in _import_dirs():
            return current
        if (current / "__init__.py").exists():
            top_package = current
        elif not current.name.isidentifier():
            break
    return top_package.parent if top_package is not None else None


@functools.lru_cache(maxsize=1)
def _import_dirs() -> frozenset[Path]:
    """`sys.path` directories, without the current directory (it depends on how we were started)."""
    cwd = Path.cwd().resolve()
    dirs = set()
    for entry in sys.path:
        if entry and Path(entry).is_dir():
            resolved = Path(entry).resolve()
            if resolved != cwd:
                dirs.add(resolved)
    return frozenset(dirs)


def discover(paths: Sequence[str | Path], include: Sequence[str] = ()) -> list[SourceFile]:
    """Every `.py` file under `paths` (files count as given), filtered by `include` globs, sorted."""
    if not paths:
        raise InputError("scan", "no path given")
    # Keyed by where the file really is: many names (symlinks) for one file are read and scanned once.
    found: dict[Path, SourceFile] = {}
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise InputError(path, "no such file or directory")
        path = path.resolve()
        if path.is_file():
            found.setdefault(path, SourceFile(path, _relative(path, path.parent)))
            continue
        for directory, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            for filename in filenames:
                if filename.endswith(".py"):
                    file = Path(directory, filename)
                    try:
                        real = file.resolve()
                    except (OSError, RuntimeError):  # a loop of symlinks: read_source says so
                        real = file
                    if real not in found:
                        found[real] = SourceFile(file, _relative(file, path))
    files = sorted(found.values(), key=lambda f: f.relative)
    if include:
        files = [f for f in files if any(_glob(f.relative, pattern) for pattern in include)]
    return files


_ROOTS: dict[Path, Path | None] = {}


def _relative(file: Path, scanned: Path) -> str:
    """`Site.path`: relative to the import root in a package, else to the directory scanned. Bytes of
    the name that are not UTF-8 are written ``\\xNN`` (a site's path is text every output carries)."""
    directory = file.parent
    if directory not in _ROOTS:
        _ROOTS[directory] = import_root(file)
    root = _ROOTS[directory]
    base = root if root is not None else (scanned if scanned.is_dir() else file.parent)
    try:
        return visible(file.relative_to(base).as_posix())
    except ValueError:
        return visible(file.name)


def _glob(relative: str, pattern: str) -> bool:
    """`--include` globs match the `Site.path` (`sglang/srt/mem_cache/*`) or any tail of it."""
    if fnmatch.fnmatch(relative, pattern):
        return True
    parts = relative.split("/")
    return any(fnmatch.fnmatch("/".join(parts[i:]), pattern) for i in range(1, len(parts)))
