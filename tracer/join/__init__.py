"""The join: every GPU kernel/memcpy/memset of a `Trace` -> its `Origin` (ops, ranges, frames, line).

kernel -> runtime launch (correlation) -> innermost cpu_op (External id, else time containment)
-> parent ops and record_function ranges (`nesting`) -> Python frames (a separate sweep) -> the
innermost user frame U and the call C in it that led to the kernel. What the sweeps found is one
public record, `JoinState` (`state`). The line, first answer wins (`origins`):
1. a ``kt:site:`` range around the op (kerneltrace's instrumentation): exact;
2. C's ``CallFrom`` (torch >= 2.14): exact;
3. U's source, read under the source roots: the run's calls (child frames and the ops run directly
   in U, as tokens: `tokens`) are aligned with the function's call points in evaluation order, wired
   by its control flow (`program`, `align`, `locate`): the line is the point C was in the cheapest
   alignment of the whole run, exact when no other line comes close, else a ranked answer;
4. no source for U: the static sites of its function, by call order (`sites`), confidence <= 0.8;
5. no Python frames at all: a ranking of the sites whose ops match (`ranking`), confidence < 0.5.
Kernels replayed from a CUDA graph are labelled (`Origin.replay`), never given a line here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tracer.join.attribute import attribute
from tracer.join.frame_names import frame_names
from tracer.join.frames import is_user_frame, parse_frame
from tracer.join.source_lines import SourceLines
from tracer.model.events import Trace
from tracer.model.site import Site

__all__ = ["attribute", "has_python_frames", "sites_for_trace", "trace_source_files"]


def has_python_frames(trace: Trace) -> bool:
    """Whether the trace was recorded with stacks (it holds python_function events)."""
    return len(frame_names(trace.events).rows) > 0


def trace_source_files(trace: Trace, source_roots: Sequence[str | Path]) -> list[Path]:
    """The files under `source_roots` that the trace's Python frames name (user code only)."""
    names = frame_names(trace.events).distinct
    files = {parse_frame(name).file for name in names if is_user_frame(name)}
    source = SourceLines(source_roots)
    found = {source.find(file) for file in files}
    return sorted(path for path in found if path is not None)


def sites_for_trace(trace: Trace, source_roots: Sequence[str | Path], **scan_options) -> list[Site]:
    """Scan (with `tracer.static.scan`) only the files under `source_roots` the trace's frames name."""
    from tracer.static import scan

    files = trace_source_files(trace, source_roots)
    if not files:
        return []
    return list(scan(files, **scan_options).sites)
