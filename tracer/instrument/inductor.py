"""Make Inductor record where its kernels come from, and keep that record beside a trace.

`record_provenance()` turns on, where this torch has them, Inductor's provenance tracking
(``torch._inductor.config.trace.provenance_tracking_level = 1``; ``trace.provenance_tracking`` on
older versions) and, for the CPU backend, ``cpp.enable_kernel_profile`` (each C++ kernel becomes an op
named ``graph_0_cpp_fused_...``: without it the profiler records no op for them), and points PyTorch's
structured trace (what ``TORCH_TRACE`` turns on) at a directory, unless the user's ``TORCH_TRACE``
already did. Compiles from then on log their generated code, Dynamo's graph and the provenance
artifacts there.

`keep_beside(trace)` copies what `tracer.join.compiled` reads, small, next to the trace: the records it
needs of the structured trace (``<trace>.torch_trace.log.gz``, `tracer.load.torch_trace.keep_records`)
and the generated modules the trace's frames name (``<trace>.generated/``), so the trace can be
explained on another machine. Both are best effort: a failure is logged once, never raised.
"""

from __future__ import annotations

import logging
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger("kerneltrace")

SWITCHES = (
    ("trace.provenance_tracking_level", 1),  # torch >= 2.11
    ("trace.provenance_tracking", True),  # torch 2.8 - 2.10
    ("cpp.enable_kernel_profile", True),  # C++ kernels (CPU backend) recorded as ops
)
# A ``call`` frame of a generated module: absolute, or relative to a sys.path entry (as the profiler
# names files under one).
_MODULE_FRAME = re.compile(r'"name": "([^"]*torchinductor_[^"/]*/\w\w/c\w+\.py)\(\d+\): call"')


@dataclass
class ProvenanceRecording:
    """What `record_provenance` turned on: the switches set and where the structured trace goes."""

    switches: dict[str, object] = field(default_factory=dict)
    trace_dir: Path | None = None
    own_dir: bool = False  # a temporary directory of ours (removed by `close`)

    def close(self) -> None:
        """Stop our structured trace (the user's own TORCH_TRACE is left alone) and remove its files."""
        if not self.own_dir or self.trace_dir is None:
            return
        internal = sys.modules.get("torch._logging._internal")
        handler = getattr(internal, "LOG_TRACE_HANDLER", None) if internal is not None else None
        if handler is not None and getattr(handler, "root_dir", None) == str(self.trace_dir):
            handler.root_dir = None  # torch's lazy handler then removes itself at its next record
            stream, handler.stream = getattr(handler, "stream", None), None
            if stream is not None:
                stream.close()
        shutil.rmtree(self.trace_dir, ignore_errors=True)


def record_provenance(trace_dir: str | Path | None = None) -> ProvenanceRecording:
    """Turn on Inductor's provenance and the structured trace (into ``TORCH_TRACE`` if the user set it,
    else `trace_dir`, else a temporary directory). Call before the code compiles."""
    recording = ProvenanceRecording()
    try:
        recording.trace_dir, recording.own_dir = _structured_trace(trace_dir)
        from torch._inductor import config

        for name, value in SWITCHES:
            holder, _, attribute = name.rpartition(".")
            target = getattr(config, holder, None)
            if target is not None and hasattr(target, attribute):
                setattr(target, attribute, value)
                recording.switches[name] = value
    except Exception:  # never stop the user's run
        logger.warning("kerneltrace: could not turn on Inductor's provenance", exc_info=True)
    return recording


def _structured_trace(trace_dir: str | Path | None) -> tuple[Path | None, bool]:
    """Point torch's structured-trace handler at a directory (the environment is left unchanged):
    a ``TORCH_TRACE`` of the user's wins; ours takes effect unless the handler already writes."""
    import torch._logging._internal as internal

    handler = getattr(internal, "LOG_TRACE_HANDLER", None)
    if handler is None:
        return None, False
    if getattr(handler, "root_dir", None):  # TORCH_TRACE set by the user, or by us before
        return Path(handler.root_dir), False
    if getattr(handler, "stream", None) is not None:
        return None, False
    own = trace_dir is None
    directory = (
        Path(trace_dir)
        if trace_dir is not None
        else Path(tempfile.mkdtemp(prefix="kerneltrace-torch-trace-"))
    )
    directory.mkdir(parents=True, exist_ok=True)
    handler.root_dir = str(directory)
    if handler not in internal.trace_log.handlers:  # it removes itself when it finds no directory
        internal.trace_log.addHandler(handler)
    return directory, own


def keep_beside(trace: str | Path, recording: ProvenanceRecording) -> list[Path]:
    """Copy the structured trace's needed records and the generated modules the trace names next to
    `trace`; returns what was written."""
    trace = Path(trace)
    written: list[Path] = []
    try:
        stem = trace.name.removesuffix(".gz").removesuffix(".json")
        logs = sorted(p for p in recording.trace_dir.glob("*") if p.is_file()) if recording.trace_dir else []
        if logs:
            from tracer.load.torch_trace import keep_records

            out = trace.with_name(f"{stem}.torch_trace.log.gz")
            kept = _keep_all(logs, out, keep_records)
            if kept:
                written.append(out)
            else:
                out.unlink(missing_ok=True)
        modules = _generated_modules(trace)
        if modules:
            directory = trace.with_name(f"{stem}.generated")
            directory.mkdir(exist_ok=True)
            for module in modules:
                shutil.copyfile(module, directory / module.name)
                written.append(directory / module.name)
    except Exception:
        logger.warning("kerneltrace: could not keep Inductor's records beside %s", trace, exc_info=True)
    return written


def _keep_all(logs: list[Path], out: Path, keep_records) -> int:
    """All logs' kept records in one gzip file (each file's records kept whole, one after another)."""
    import gzip

    parts = []
    kept = 0
    with tempfile.TemporaryDirectory() as scratch:
        for i, log in enumerate(logs):
            part = Path(scratch) / f"{i}.log.gz"
            kept += keep_records(log, part)
            parts.append(part)
        with gzip.open(out, "wb") as sink:
            for part in parts:
                with gzip.open(part, "rb") as source:
                    shutil.copyfileobj(source, sink)
    return kept


def _generated_modules(trace: Path) -> list[Path]:
    """Generated modules (still in Inductor's cache) that the trace's ``call`` frames run in."""
    import gzip

    opener = gzip.open if trace.name.endswith(".gz") else open
    found: dict[str, Path] = {}
    with opener(trace, "rt", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            for match in _MODULE_FRAME.finditer(line):
                if match[1] in found:
                    continue
                roots = [""] if match[1].startswith("/") else [p for p in sys.path if p]
                path = next((Path(r) / match[1] for r in roots if (Path(r) / match[1]).is_file()), None)
                if path is not None:
                    found[match[1]] = path
    return list(found.values())


__all__ = ["ProvenanceRecording", "keep_beside", "record_provenance"]
