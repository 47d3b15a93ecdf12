"""Profile SGLang's CUDA-graph capture, so that graph replays in a normal graph-on run can be attributed.

SGLang captures decode (and, when enabled, prefill) in CUDA graphs; replayed kernels carry no
External id, so the join needs the capture-time launches with their ops, ranges and lines. With
``KERNELTRACE=1 KERNELTRACE_PROFILE_CAPTURE=1`` the plugin wraps the graph runners' capture pass,
``DecodeCudaGraphRunner._capture_one_stream`` (every decode/draft graph runner inherits it) and
``PrefillCudaGraphRunner._capture_one_stream``: the span SGLang's own ``--enable-profile-cuda-graph``
profiles, all shapes' warm-up runs and captures, without the run-once autotune before it. A
torch.profiler (CPU, plus CUDA when available; ``record_shapes=True``, ``with_stack=False``) records
it while our ``kt:site:``/``kt:fn:`` ranges are active, and the trace is written under SGLang's
name, ``$SGLANG_TORCH_PROFILER_DIR/graph_capture_profile/cuda_graph_capture-<runner>-TP-<rank>.json.gz``
(``-stream_<i>-`` before ``TP`` for PD-multiplexed streams), where ``kerneltrace explain DIR`` finds
each rank's capture. A recapture overwrites it: the latest graphs are the ones replayed.

When SGLang profiles the capture itself (``--enable-profile-cuda-graph``), or any torch profiler is
already recording, no second profiler is started (torch keeps one; stopping a second one would end
the first): our ranges go into that profiler's trace (SGLang writes it with
``SGLANG_ENABLE_CUDA_GRAPH_CAPTURE_TRACE=1``, under the same name).

Fail-safe: a profiler that cannot start, stop or export is logged once and the capture runs (or has
run) exactly as without us; a trace is written to a hidden partial name and renamed into place, so a
full disk never leaves a truncated trace where explain looks.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracer.instrument.runtime import warn_once

logger = logging.getLogger("kerneltrace")

PROFILE_CAPTURE_ENV = "KERNELTRACE_PROFILE_CAPTURE"  # "1": profile the CUDA-graph capture
PROFILER_DIR_ENV = "SGLANG_TORCH_PROFILER_DIR"  # SGLang's trace directory (default /tmp)
DEFAULT_PROFILER_DIR = "/tmp"
# SGLang's names, which `tracer.explain.ranks` reads (not imported: the server need not load explain).
CAPTURE_DIR = "graph_capture_profile"
CAPTURE_PREFIX = "cuda_graph_capture-"

# The capture pass of sglang 0.5.23's graph runners (absent targets are skipped at registration).
CAPTURE_TARGETS = (
    "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner._capture_one_stream",
    "sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner._capture_one_stream",
)

_noted: set[str] = set()


def capture_profiling_enabled() -> bool:
    return os.environ.get(PROFILE_CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _note_once(key: str, message: str, *args: Any) -> None:
    if key not in _noted:
        _noted.add(key)
        logger.info("kerneltrace: " + message, *args)


# -- the hook ---------------------------------------------------------------------------------------
def capture_profile_hook(original: Callable[..., Any], runner: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND a graph runner's capture pass: profile it into the capture trace; never alter the capture."""
    profile = CaptureProfile.begin(runner, _stream_index(args, kwargs))
    if profile is None:
        return original(runner, *args, **kwargs)
    try:
        result = original(runner, *args, **kwargs)
    except BaseException:
        profile.abandon()  # the capture failed: SGLang reports that; we write nothing
        raise
    profile.finish()
    return result


def _stream_index(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """`_capture_one_stream(stream_idx)` of the decode runner; the prefill runner takes none."""
    value = kwargs.get("stream_idx", args[0] if args else None)
    return value if isinstance(value, int) else None


class CaptureProfile:
    """One profiled capture pass: a started torch.profiler and where its trace goes."""

    def __init__(self, profiler: Any, path: Path) -> None:
        self.profiler = profiler
        self.path = path

    @classmethod
    def begin(cls, runner: Any, stream_index: int | None = None) -> CaptureProfile | None:
        """Start profiling `runner`'s capture, or None (profiled elsewhere, or the profiler failed)."""
        try:
            import torch

            if getattr(runner, "enable_profile_cuda_graph", False):
                _note_once(
                    "sglang-profiles",
                    "SGLang profiles the CUDA-graph capture itself (--enable-profile-cuda-graph); our "
                    "ranges are in its trace (written with SGLANG_ENABLE_CUDA_GRAPH_CAPTURE_TRACE=1)",
                )
                return None
            if torch.autograd._profiler_enabled():
                _note_once(
                    "profiler-running",
                    "a torch profiler is already recording during the CUDA-graph capture; our ranges "
                    "go into its trace and no capture trace of ours is written",
                )
                return None
            path = capture_trace_path(runner, stream_index)
        except Exception:
            warn_once(
                "capture-prepare", "could not prepare to profile the CUDA-graph capture; capturing unprofiled"
            )
            return None
        profiler = None
        try:
            profiler = new_capture_profiler()
            profiler.start()
        except Exception:
            warn_once(
                "capture-start", "the profiler did not start for the CUDA-graph capture; capturing unprofiled"
            )
            _stop_quietly(profiler)
            return None
        return cls(profiler, path)

    def finish(self) -> Path | None:
        """Stop and write the trace; a failure is logged once (the capture has already succeeded)."""
        try:
            self.profiler.stop()
        except Exception:
            warn_once(
                "capture-stop", "the CUDA-graph capture profiler did not stop cleanly; no capture trace"
            )
            return None
        try:
            write_trace(self.profiler, self.path)
        except Exception:
            warn_once("capture-export", "could not write the CUDA-graph capture trace %s", self.path)
            return None
        finally:
            self.profiler = None  # its events can be large: let them go now
        logger.info("kerneltrace: CUDA-graph capture trace saved to %s", self.path)
        return self.path

    def abandon(self) -> None:
        _stop_quietly(self.profiler)
        self.profiler = None


def new_capture_profiler() -> Any:
    """The capture's profiler: CPU (+ CUDA when present), shapes, no stacks (the ranges give lines)."""
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=activities, record_shapes=True, with_stack=False)


def _stop_quietly(profiler: Any) -> None:
    """Stop a profiler we started, if it is recording; only ours (a stop would end any other)."""
    if profiler is None:
        return
    try:
        import torch

        if torch.autograd._profiler_enabled():
            profiler.stop()
    except Exception:
        warn_once("capture-stop", "the CUDA-graph capture profiler did not stop cleanly")


# -- where the trace goes ---------------------------------------------------------------------------
def capture_trace_dir() -> Path:
    """SGLang's ``graph_capture_profile_dir()``: ``$SGLANG_TORCH_PROFILER_DIR/graph_capture_profile``."""
    try:
        from sglang.srt.utils.profile_utils import graph_capture_profile_dir

        return Path(graph_capture_profile_dir())
    except ImportError:
        return Path(os.environ.get(PROFILER_DIR_ENV) or DEFAULT_PROFILER_DIR) / CAPTURE_DIR


def capture_trace_path(runner: Any, stream_index: int | None = None) -> Path:
    """``cuda_graph_capture-<runner>[-stream_<i>]-TP-<rank>.json.gz``: SGLang's capture-trace name."""
    name_of = getattr(runner, "_profile_runner_name", None)  # e.g. DraftDecodeCudaGraphRunner
    runner_name = name_of() if callable(name_of) else type(runner).__name__
    stream = "" if stream_index is None else f"-stream_{stream_index}"
    return capture_trace_dir() / f"{CAPTURE_PREFIX}{runner_name}{stream}-TP-{tensor_parallel_rank()}.json.gz"


def tensor_parallel_rank() -> int:
    """This process's TP rank as SGLang names its traces (the global rank, or 0, outside SGLang)."""
    with contextlib.suppress(Exception):
        from sglang.srt.runtime_context import get_parallel

        return int(get_parallel().tp_rank)
    with contextlib.suppress(Exception):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    return 0


def partial_path(path: Path) -> Path:
    """Where the gzip trace is written before it is renamed into place (hidden; not a trace name)."""
    return path.with_name(f".{path.name}.{os.getpid()}.partial.gz")


def write_trace(profiler: Any, path: Path) -> Path:
    """Export `profiler`'s trace to `path` (gzip) atomically: all of it, or nothing there.

    The profiler directory may be shared (``/tmp``), so nothing there is opened by a name someone else
    could have planted: torch writes its JSON into a private new directory (``mkdtemp``, mode 0700),
    the gzip goes to the partial name opened with ``O_EXCL | O_NOFOLLOW`` (a file or symlink already
    there makes the write fail, never redirects it), and only a complete file is renamed into place.

    torch writes the JSON and we compress it in 1 MiB blocks at level 6: torch's own ``.gz`` export
    feeds gzip line by line, 3x slower (0.66 s vs 0.22 s for an 11 MB trace here). A profiler's
    trace can be exported only once.
    """
    import gzip
    import shutil
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(path)
    private = Path(tempfile.mkdtemp(prefix=".kerneltrace-", dir=path.parent))
    plain = private / "trace.json"  # torch's JSON, before compression
    created = False
    try:
        profiler.export_chrome_trace(str(plain))
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        created = True
        with (
            open(plain, "rb") as source,
            os.fdopen(fd, "wb") as raw,
            gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=6) as target,
        ):
            shutil.copyfileobj(source, target, 1 << 20)
        os.replace(partial, path)
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                partial.unlink()
        raise
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return path
