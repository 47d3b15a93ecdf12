"""Load only part of a trace: a time window or a range of ProfilerStep#N, dropped while parsing.

A window is resolved to nanosecond bounds by a cheap first pass over the raw chunks (a regex for the
timestamps, a parse only of the chunks that hold ``ProfilerStep#``), so that the loader can drop
every event outside it before it becomes a row. CPU events are kept when they overlap the window (so
the frames and ranges around the window's ops stay); GPU events when they start in the window or
within a tail after it (kernels run after their launch), and finally only when their launch was kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import orjson

from tracer.errors import InputError
from tracer.load.chunks import EventChunks, Unchunkable
from tracer.load.memory import whole_parse_limit
from tracer.load.source import read_all, read_blocks

_TS = re.compile(rb'"ts"\s*:\s*(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)')
_STEP_NAME = re.compile(r"ProfilerStep#(\d{1,9})$")
GPU_TAIL_NS = 1_000_000_000  # GPU events may start this long (or one window length) after the window


@dataclass(frozen=True)
class TraceWindow:
    """What part of a trace to load: ``start_ms..end_ms`` after its first timestamp, or the
    ProfilerStep#first_step..#last_step ranges (inclusive)."""

    start_ms: float | None = None
    end_ms: float | None = None
    first_step: int | None = None
    last_step: int | None = None

    @classmethod
    def parse(cls, window: str | None = None, steps: str | None = None) -> TraceWindow | None:
        """From the CLI's ``--window START_MS:END_MS`` or ``--steps N-M`` (``--steps N`` for one)."""
        if window is not None and steps is not None:
            raise InputError("--window/--steps", "give one of --window and --steps, not both")
        if window is not None:
            start, sep, end = window.partition(":")
            try:
                start_ms, end_ms = float(start), float(end)
            except ValueError:
                start_ms = end_ms = float("nan")
            if not sep or not 0 <= start_ms < end_ms < float("inf"):
                raise InputError("--window", f"{window!r} is not START_MS:END_MS with 0 <= START < END")
            return cls(start_ms=start_ms, end_ms=end_ms)
        if steps is not None:
            first, sep, last = steps.partition("-")
            if not sep:
                last = first
            if not (first.isascii() and first.isdigit() and last.isascii() and last.isdigit()):
                raise InputError("--steps", f"{steps!r} is not N-M (ProfilerStep numbers) or N")
            if int(first) > int(last):
                raise InputError("--steps", f"{steps!r}: the first step is after the last")
            return cls(first_step=int(first), last_step=int(last))
        return None

    @property
    def label(self) -> str:
        if self.first_step is not None:
            if self.first_step == self.last_step:
                return f"ProfilerStep#{self.first_step}"
            return f"ProfilerStep#{self.first_step}..#{self.last_step}"
        return f"{self.start_ms:g}..{self.end_ms:g} ms"


@dataclass(frozen=True)
class WindowBounds:
    """A window in the loader's own clock (ts * 1000, integer ns) and what the first pass saw."""

    start_ns: int
    end_ns: int
    gpu_end_ns: int  # GPU events starting up to here are held until their launch is known
    label: str
    share: float  # of the trace's time span: scales the memory estimate

    def keeps_cpu(self, ts_ns: int, dur_ns: int) -> bool:
        return (ts_ns < self.end_ns and ts_ns + dur_ns > self.start_ns) or ts_ns == self.start_ns

    def keeps_gpu(self, ts_ns: int) -> bool:
        return self.start_ns <= ts_ns < self.gpu_end_ns


def resolve_window(path: Path, window: TraceWindow) -> WindowBounds:
    """The window's bounds, from a first pass over the file (raises `InputError` when it is empty)."""
    first_ns, last_ns, steps = _first_pass(path, want_steps=window.first_step is not None)
    if first_ns is None or last_ns is None:
        raise InputError(path, "no timestamps in the trace: nothing to window")
    if window.first_step is not None:
        if window.last_step is None:  # TraceWindow(first_step=N) made by hand
            raise InputError(path, f"a step window needs last_step as well as first_step={window.first_step}")
        chosen = [span for number, span in steps.items() if window.first_step <= number <= window.last_step]
        if not chosen:
            have = (
                f"it has ProfilerStep#{min(steps)}..#{max(steps)}"
                if steps
                else "it has no ProfilerStep#N ranges"
            )
            raise InputError(
                path, f"no {window.label} in the trace ({have}): use --window START_MS:END_MS instead"
            )
        start_ns = min(s for s, _ in chosen)
        end_ns = max(e for _, e in chosen)
    else:
        if window.start_ms is None or window.end_ms is None:  # TraceWindow(start_ms=...) made by hand
            raise InputError(
                path, "a time window needs both start_ms and end_ms (or first_step and last_step)"
            )
        start_ns = first_ns + round(window.start_ms * 1e6)
        end_ns = first_ns + round(window.end_ms * 1e6)
        if start_ns > last_ns:
            span_ms = (last_ns - first_ns) / 1e6
            raise InputError(path, f"--window starts after the trace ends ({span_ms:.3f} ms long)")
    span = max(1, last_ns - first_ns)
    tail = max(end_ns - start_ns, GPU_TAIL_NS)
    share = min(1.0, (min(end_ns + tail, last_ns) - max(start_ns, first_ns)) / span)
    return WindowBounds(start_ns, end_ns, end_ns + tail, window.label, max(share, 0.0))


def _first_pass(path: Path, *, want_steps: bool) -> tuple[int | None, int | None, dict[int, tuple[int, int]]]:
    """(first ts, last ts, {step number: (start, end)}) in ns, reading the file once."""
    first: float | None = None
    last: float | None = None
    steps: dict[int, tuple[int, int]] = {}
    try:
        for raw in EventChunks(read_blocks(path)):
            found = [t for t in map(float, _TS.findall(raw)) if abs(t) < 1e15]
            if found:
                low, high = min(found), max(found)
                first = low if first is None else min(first, low)
                last = high if last is None else max(last, high)
            if want_steps and b'"ProfilerStep#' in raw:
                try:
                    _add_steps(orjson.loads(raw), steps)
                except orjson.JSONDecodeError as err:
                    raise Unchunkable(str(err)) from None
    except Unchunkable:
        # Not laid out as Kineto writes it: parse it whole (the window then saves the table, not the parse).
        first, last, steps = _first_pass_whole(path, steps={})
    if first is None or last is None:
        return None, None, steps
    return round(first * 1000), round(last * 1000), steps


def _first_pass_whole(path: Path, steps: dict[int, tuple[int, int]]):
    try:
        document = orjson.loads(
            read_all(
                path, max_bytes=whole_parse_limit(), why="the memory available for a document parsed whole"
            )
        )
    except orjson.JSONDecodeError as err:
        raise InputError(path, f"not JSON: {err}") from None
    events = document.get("traceEvents") if isinstance(document, dict) else None
    if not isinstance(events, list):
        raise InputError(path, 'not a torch.profiler trace (no "traceEvents" list)')
    times = [e["ts"] for e in events if isinstance(e, dict) and _finite(e.get("ts"))]
    _add_steps(events, steps)
    return (min(times) if times else None), (max(times) if times else None), steps


def _add_steps(events: Iterable[Any], steps: dict[int, tuple[int, int]]) -> None:
    """ProfilerStep#N ranges on the CPU side (their gpu_user_annotation copies are not the step)."""
    for event in events:
        if not isinstance(event, dict) or event.get("cat") != "user_annotation" or event.get("ph") != "X":
            continue
        name, ts, dur = event.get("name"), event.get("ts"), event.get("dur")
        match = _STEP_NAME.match(name) if isinstance(name, str) else None
        if match is None or not _finite(ts) or not _finite(dur) or dur < 0:
            continue
        start, end = round(ts * 1000), round((ts + dur) * 1000)
        number = int(match[1])
        known = steps.get(number)
        steps[number] = (min(start, known[0]), max(end, known[1])) if known else (start, end)


def _finite(value: Any) -> TypeGuard[int | float]:
    return value.__class__ in (int, float) and abs(value) < 1e15
