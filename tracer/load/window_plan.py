"""Cut a trace too big for the memory into consecutive time windows, each ending where a ProfilerStep#N
begins, so that every window's load fits and every step lies whole in exactly one window.

The windows tile the trace: the first starts at its first timestamp, the last ends after its last,
each next one starts where the one before ends. A launch is kept by the window it starts in (CPU
events are kept by overlap, but a window's steps only count the activities launched inside them), and
a kernel goes with its launch (`tracer.load.window`), so each kernel is counted once.
"""

from __future__ import annotations

from pathlib import Path

from tracer.load.memory import estimated_peak
from tracer.load.window import GPU_TAIL_NS, TraceWindow, _first_pass


def step_windows(path: Path, json_bytes: int, target: int) -> list[TraceWindow] | None:
    """Consecutive windows of whole ProfilerStep#N ranges whose loads each need at most `target`
    bytes (`estimated_peak` of their share, as the loader measures it); None when the trace has
    fewer than two steps or one step alone would not fit."""
    first_ns, last_ns, steps = _first_pass(path, want_steps=True)
    if first_ns is None or last_ns is None or len(steps) < 2:
        return None
    starts = sorted(start for start, _ in steps.values())
    span = max(1, last_ns - first_ns)
    end_of_trace = last_ns + 1000  # past the last event (a window keeps what starts before its end)

    def fits(start: int, end: int) -> bool:
        tail = max(end - start, GPU_TAIL_NS)  # as `resolve_window` reckons a window's share
        share = min(1.0, (min(end + tail, last_ns) - max(start, first_ns)) / span)
        return estimated_peak(json_bytes, max(share, 0.0)) <= target

    # Cut points: the trace's start, then every step's start but the first.
    cuts = [first_ns, *starts[1:]]
    windows: list[tuple[int, int]] = []
    begin = 0
    while begin < len(cuts):
        end = begin + 1
        bound = cuts[end] if end < len(cuts) else end_of_trace
        if not fits(cuts[begin], bound):
            return None  # one step alone is too big
        while end < len(cuts):
            wider = cuts[end + 1] if end + 1 < len(cuts) else end_of_trace
            if not fits(cuts[begin], wider):
                break
            end += 1
        windows.append((cuts[begin], cuts[end] if end < len(cuts) else end_of_trace))
        begin = end
    return [TraceWindow(start_ms=(s - first_ns) / 1e6, end_ms=(e - first_ns) / 1e6) for s, e in windows]
