"""Find what Inductor left about a trace's compiled graphs: a structured trace beside it, generated modules.

Looked for beside the trace (its directory): ``torch_trace*`` files or directories (``TORCH_TRACE``
output, or kerneltrace's filtered copy ``torch_trace.log.gz``), and generated modules under
``generated/`` (kerneltrace and the fixtures copy them there). A generated module the trace names
is also read where it was written (same machine), if it is still in Inductor's cache directory.
Nothing is read until a compiled kernel asks; each file is read once.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from tracer.errors import InputError
from tracer.input_files import read_side_input
from tracer.load.generated_code import parse_generated_code
from tracer.load.torch_trace import is_structured_log, read_compiled_graphs
from tracer.model.compiled import CompiledGraph

GENERATED_DIR = "generated"
TORCH_TRACE_PREFIX = "torch_trace"
MAX_MODULE_BYTES = 64 << 20  # a generated module of a big model is a few MB
MAX_SIDECAR_FILES = 256  # files looked at per sidecar directory
_SHARED: dict[tuple, CompiledSources] = {}
_MODULE_NAME = re.compile(r"^c[a-z0-9]{40,64}\.py$")  # Inductor's code cache: <dir>/<2 chars>/c<hash>.py


def is_generated_module(file: str) -> bool:
    """Whether a frame's file is an Inductor-generated module (``/tmp/torchinductor_u/ti/ctif....py``)."""
    name = file.replace("\\", "/").rsplit("/", 1)[-1]
    return _MODULE_NAME.match(name) is not None


def compiled_sources(trace_path: str | Path | None) -> CompiledSources:
    """The `CompiledSources` of a trace, shared by the join and the replay pass (read once per trace
    directory and version of its sidecars)."""
    directory = Path(trace_path).parent if trace_path else None
    key = (str(directory), _stamp(directory)) if directory is not None else None
    if key is None:
        return CompiledSources(None)
    found = _SHARED.get(key)
    if found is None:
        if len(_SHARED) >= 8:
            _SHARED.pop(next(iter(_SHARED)))
        found = _SHARED[key] = CompiledSources(trace_path)
    return found


def _stamp(directory: Path) -> tuple:
    """What changes when a sidecar beside the trace does (names, sizes and times of the entries)."""
    stamp = []
    for entry in _entries(directory):
        if (
            entry.name.startswith(TORCH_TRACE_PREFIX)
            or entry.name == GENERATED_DIR
            or ".torch_trace." in entry.name
        ):
            try:
                info = entry.stat()
            except (OSError, ValueError):
                continue
            stamp.append((entry.name, info.st_size, info.st_mtime_ns))
    return tuple(stamp)


class CompiledSources:
    """The compiled graphs a trace's kernels may come from, found beside the trace or on this machine."""

    def __init__(self, trace_path: str | Path | None) -> None:
        self.trace_dir = Path(trace_path).parent if trace_path else None
        self._graphs: list[CompiledGraph] | None = None
        self._modules: dict[str, CompiledGraph | None] = {}
        self.logs: list[Path] = []
        self.module_dirs: list[Path] = []
        self.problems: list[str] = []  # sidecars found but not (wholly) read, one line each

    # -- lookups --------------------------------------------------------------------------------------
    def by_module(self, module: str) -> CompiledGraph | None:
        """The graph whose generated module is `module` (a ``call`` frame's file): from a structured
        trace when one names it, else the module itself (copied beside the trace, or still cached)."""
        name = module.replace("\\", "/").rsplit("/", 1)[-1]
        for graph in self.graphs():
            if graph.module == module or graph.module.replace("\\", "/").rsplit("/", 1)[-1] == name:
                return graph
        if name not in self._modules:
            self._modules[name] = self._read_module(module, name)
        return self._modules[name]

    def by_key(self, fx_key: str) -> CompiledGraph | None:
        """The graph of a ``## Call CompiledFxGraph <key> ##`` range (structured trace only)."""
        return next((g for g in self.graphs() if g.fx_key == fx_key), None)

    def graphs(self) -> list[CompiledGraph]:
        if self._graphs is None:
            self._find()
            self._graphs = read_compiled_graphs(self.logs, self.problems)
        return self._graphs

    # -- finding ------------------------------------------------------------------------------------
    def _find(self) -> None:
        if self.trace_dir is None:
            return
        for entry in _entries(self.trace_dir):
            name = entry.name
            if name.startswith(TORCH_TRACE_PREFIX) or name.endswith(
                (".torch_trace.log", ".torch_trace.log.gz")
            ):
                files = [p for p in _entries(entry) if _is_file(p)] if _is_dir(entry) else [entry]
                for file in files:
                    if is_structured_log(file):
                        self.logs.append(file)
                    elif _is_file(file):
                        self.problems.append(
                            f"{file.name} beside the trace is not a structured trace (corrupt?): not used"
                        )
            elif (name == GENERATED_DIR or name.endswith(".generated")) and _is_dir(entry):
                self.module_dirs.append(entry)
                self.module_dirs.extend(p for p in _entries(entry) if _is_dir(p))

    def _read_module(self, module: str, name: str) -> CompiledGraph | None:
        self.graphs()  # finds the sidecar directories too
        candidates = [d / name for d in self.module_dirs]
        path = Path(module)
        if path.is_absolute() and any(part.startswith("torchinductor_") for part in path.parts):
            candidates.append(path)  # same machine: Inductor's cache, if the module is still there
        for candidate in candidates:
            try:
                text = read_side_input(candidate, "generated module", MAX_MODULE_BYTES).decode(
                    "utf-8", "replace"
                )
            except InputError as err:
                if _is_file(candidate):  # there, yet unreadable
                    self.problems.append(f"{name} could not be read ({err.problem}): not used")
                continue
            code = parse_generated_code(text)
            if code.launches:
                return CompiledGraph(module=module, launches=code.launches, read_from=str(candidate))
            self.problems.append(
                f"{candidate.name} launches nothing (not an Inductor-generated module?): not used"
            )
        return None


def _entries(directory: Path) -> list[Path]:
    try:
        with os.scandir(directory) as it:
            names = sorted(entry.name for entry in it)
    except OSError:
        return []
    return [directory / name for name in names[:MAX_SIDECAR_FILES]]


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except (OSError, ValueError):
        return False


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.stat().st_mode)
    except (OSError, ValueError):
        return False


__all__ = ["CompiledSources", "compiled_sources", "is_generated_module"]
