"""The join: every GPU kernel/memcpy/memset of a `Trace` -> its `Origin` (ops, ranges, frames, line).

kernel -> runtime launch (correlation) -> innermost cpu_op (External id, else time containment)
-> parent ops and record_function ranges (`nesting`) -> Python frames (a separate sweep) -> the
innermost user frame U and the call C in it that led to the kernel (`calls`). The line, first
answer wins (`origins`):
1. a ``kt:site:`` range around the op (kerneltrace's instrumentation): exact;
2. C's ``CallFrom`` (torch >= 2.14): exact;
3. the static sites of U's function: C is the k-th call of its method in this run of U, so the k-th
   site of that method in source order, when the counts agree (`sites`);
4. U's source, read under the source roots: the same rule over every call and operator, with the
   if-branches this run took inferred from everything else it called (`source_calls`);
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

__all__ = ["attribute", "sites_for_trace", "trace_source_files"]


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
