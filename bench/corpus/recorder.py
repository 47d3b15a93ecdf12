"""Record one workload twice and derive each op's true line, with no help from the join.

Run A: the workload under ``torch.profiler.profile(record_shapes=True, with_stack=True)``: the trace
the join sees. Run B: the same workload (fresh state, same seed, same warm-up) with
``with_stack=False`` inside `TruthMode`, which wraps the outermost torch call of each user line in a
``kt:truth:<file>:<line>`` range (the line is the innermost user frame's ``f_lineno``). The top-level
ops of A and B are then paired in order (`bench.corpus.pairing`), and each of A's top-level ops
takes the line of the range around its twin. Written: ``<name>.json.gz`` (A) and
``<name>.truth.json``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.profiler import ProfilerActivity, profile

from bench.corpus.frames import ProfilerNames, is_library_name
from bench.corpus.pairing import TruthReport, derive_truth

TRUTH_PREFIX = "kt:truth:"
HARNESS_DIR = os.path.dirname(os.path.abspath(__file__))  # the recorder and capture scripts: never "user"
_range = getattr(torch._C._profiler, "_RecordFunctionFast", None)


@dataclass(frozen=True)
class Workload:
    """Something to profile: `build(device)` makes fresh state and returns ``step(i)``.

    Steps ``0 .. warmup-1`` run unprofiled, then ``warmup .. warmup+steps-1`` under the profiler;
    the same in both runs, after ``torch.manual_seed(seed)``, so both runs do the same work.
    """

    name: str
    build: Callable[[torch.device], Callable[[int], Any]]
    steps: int = 3
    warmup: int = 1
    seed: int = 0
    about: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # written into the truth file as is


class TruthMode(TorchFunctionMode):
    """Wraps each outermost torch call in a ``kt:truth:<file>:<line>`` range of its user line.

    The mode is off while its handler runs, so calls torch makes inside the call are not seen: the
    range names the line in the user's code that led to all of them.
    """

    def __init__(self, names: ProfilerNames) -> None:
        super().__init__()
        self.names = names
        self._user: dict[str, str | None] = {}  # co_filename -> profiler name, None if not user code
        self.seen_files: set[str] = set()

    def user_name(self, filename: str) -> str | None:
        if filename in self._user:
            return self._user[filename]
        absolute = os.path.abspath(filename) if not filename.startswith("<") else filename
        name: str | None = self.names.name(absolute)
        if os.path.dirname(absolute) == HARNESS_DIR or is_library_name(name):
            name = None
        self._user[filename] = name
        return name

    def label_for(self, frame) -> str | None:
        """``kt:truth:<file>:<line>`` of the first user frame from `frame` outward, or None."""
        while frame is not None:
            name = self.user_name(frame.f_code.co_filename)
            if name is not None:
                self.seen_files.add(name)
                return f"{TRUTH_PREFIX}{name}:{frame.f_lineno}"
            frame = frame.f_back
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        label = self.label_for(sys._getframe(1))
        if label is None:
            return func(*args, **kwargs)
        with open_range(label):
            return func(*args, **kwargs)

    def __enter__(self):
        _patch_function_apply(self)
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            _restore_function_apply()


def open_range(label: str):
    return _range(label) if _range is not None else torch.profiler.record_function(label)


_ORIGINAL_APPLY = torch.autograd.Function.__dict__["apply"]


def _patch_function_apply(mode: TruthMode) -> None:
    """`Function.apply` is no torch function (the mode never sees it), yet its op (named after the
    Function) encloses the user's `forward`: give that op the line of the `apply` call too."""

    def apply(cls, *args, **kwargs):
        original = _ORIGINAL_APPLY.__get__(None, cls)  # a classmethod (or, on torch 2.14, its C form)
        label = mode.label_for(sys._getframe(1))
        if label is None:
            return original(*args, **kwargs)
        with open_range(label):
            return original(*args, **kwargs)

    torch.autograd.Function.apply = classmethod(apply)


def _restore_function_apply() -> None:
    torch.autograd.Function.apply = _ORIGINAL_APPLY


def activities_for(device: torch.device) -> list[ProfilerActivity]:
    if device.type == "cuda":
        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    return [ProfilerActivity.CPU]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_run(
    workload: Workload,
    device: torch.device,
    raw_path: Path,
    *,
    with_stack: bool,
    mode: TorchFunctionMode | None,
) -> None:
    """One recorded run of `workload` (fresh state, warm-up unprofiled) exported to `raw_path`."""
    torch.manual_seed(workload.seed)
    step = workload.build(device)
    for i in range(workload.warmup):
        step(i)
    synchronize(device)
    with profile(activities=activities_for(device), record_shapes=True, with_stack=with_stack) as prof:
        for i in range(workload.warmup, workload.warmup + workload.steps):
            with mode if mode is not None else nullcontext():
                step(i)
            synchronize(device)
            prof.step()
    prof.export_chrome_trace(str(raw_path))


def environment(device: torch.device) -> dict[str, Any]:
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device.type,
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    return env


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@dataclass
class Recording:
    """What `record` wrote and measured for one workload."""

    name: str
    trace: Path
    truth_path: Path
    report: TruthReport
    trace_bytes: int


def record(
    workload: Workload,
    out_dir: Path,
    *,
    device: torch.device,
    source_roots: list[str],
    find_source: Callable[[str], Path | None],
    name: str | None = None,
    meta: dict[str, Any] | None = None,
) -> Recording:
    """Record `workload` twice (A with stacks, B with truth ranges) and write trace + truth.

    `source_roots`: how the bench finds the source (``repo:`` = the repository root,
    ``module:transformers`` = the folder holding that package). `find_source(profiler_name)`: the
    file on disk, to store its digest (the traces name def lines: an edit makes them stale).
    """
    name = name or workload.name
    out_dir.mkdir(parents=True, exist_ok=True)
    names = ProfilerNames()
    mode = TruthMode(names)
    with tempfile.TemporaryDirectory() as tmp:
        raw_a, raw_b = Path(tmp) / "a.json", Path(tmp) / "b.json"
        profile_run(workload, device, raw_a, with_stack=True, mode=None)
        profile_run(workload, device, raw_b, with_stack=False, mode=mode)
        events_a = json.loads(raw_a.read_bytes())["traceEvents"]
        events_b = json.loads(raw_b.read_bytes())["traceEvents"]
        truth, report = derive_truth(events_a, events_b, prefix=TRUTH_PREFIX, harness=_is_harness_name)
        trace_path = out_dir / f"{name}.json.gz"
        with raw_a.open("rb") as src, gzip.GzipFile(trace_path, "wb", compresslevel=9, mtime=0) as dst:
            shutil.copyfileobj(src, dst)
    sources = {}
    for file in sorted(mode.seen_files):
        path = find_source(file)
        sources[file] = file_digest(path) if path is not None else None
    document = {
        "name": name,
        "workload": workload.name,
        "about": workload.about,
        **environment(device),
        **(meta or {}),
        **workload.extra,
        "steps": workload.steps,
        "warmup": workload.warmup,
        "source_roots": source_roots,
        "sources": sources,
        "report": report.to_dict(),
        "truth": truth,
    }
    truth_path = out_dir / f"{name}.truth.json"
    truth_path.write_text(json.dumps(document, indent=1) + "\n")
    return Recording(name, trace_path, truth_path, report, trace_path.stat().st_size)


def _is_harness_name(file: str) -> bool:
    """A profiler file name of the recorder's own code (bench/corpus/*.py, not the zoo)."""
    path = file.replace("\\", "/")
    return "/" not in path.removeprefix("bench/corpus/") and path.startswith("bench/corpus/")
