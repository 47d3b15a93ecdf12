"""Pair run A's top-level ops with run B's and give each the line of the truth range around its twin.

Works on the raw Chrome trace events (no `tracer` import): per thread, the cpu_ops that no other
cpu_op encloses (``kt:`` ops and record_function ranges do not count), in time order. Where both
runs made the same ops the sequences are equal; otherwise difflib's equal blocks are kept and the
rest is dropped (and reported). On torch >= 2.14 A's Python frames carry ``CallFrom``, the caller's
line: every op under a child frame of a user frame is checked against it (`TruthReport.callfrom_*`).
"""

from __future__ import annotations

import bisect
import difflib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.corpus.frames import frame_file, is_library_name, same_file

RANGE_CATS = ("cpu_op", "user_annotation")


@dataclass(frozen=True)
class Span:
    start: int  # ns
    end: int
    name: str
    index: int  # position in traceEvents
    args: dict[str, Any]


@dataclass
class TruthReport:
    """How well runs A and B lined up, and how the truth compares with CallFrom."""

    top_ops: int = 0  # A's top-level ops (all threads)
    top_time_ns: int = 0
    paired: int = 0
    dropped: int = 0  # A's top-level ops with no twin in B
    dropped_time_ns: int = 0
    with_truth: int = 0
    truth_time_ns: int = 0
    threads_unpaired: int = 0
    duplicate_ext_ids: int = 0
    nested_user_ops: int = 0  # top-level ops with user code inside (their inner ops have own lines)
    nested_user_dropped: int = 0  # such ops whose inner lines B could not see: no truth
    nested_user_dropped_ns: int = 0
    unknown_files: list[str] = field(default_factory=list)  # truth files A's frames never name
    has_call_from: bool = False
    callfrom_checked: int = 0
    callfrom_agree: int = 0
    callfrom_direct: int = 0  # ops run directly in the user frame: no child frame to check
    callfrom_disagreements: list[dict[str, Any]] = field(default_factory=list)

    @property
    def truth_time_share(self) -> float:
        return self.truth_time_ns / self.top_time_ns if self.top_time_ns else 0.0

    @property
    def callfrom_agreement(self) -> float | None:
        return self.callfrom_agree / self.callfrom_checked if self.callfrom_checked else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["truth_time_share"] = round(self.truth_time_share, 6)
        data["callfrom_agreement"] = self.callfrom_agreement
        return data


def _ns(value: Any) -> int:
    return round(float(value) * 1000)


def spans_by_thread(events: list[dict], keep: Callable[[dict], bool]) -> dict[tuple, list[Span]]:
    """Duration events that `keep` accepts, per (pid, tid), sorted outermost-first by start."""
    threads: dict[tuple, list[Span]] = {}
    for index, event in enumerate(events):
        if event.get("ph") != "X" or not keep(event):
            continue
        start = _ns(event.get("ts", 0))
        span = Span(
            start, start + _ns(event.get("dur", 0)), event.get("name", ""), index, event.get("args") or {}
        )
        threads.setdefault((event.get("pid"), event.get("tid")), []).append(span)
    for spans in threads.values():
        spans.sort(key=lambda s: (s.start, -s.end, s.index))
    return threads


def top_level(spans: list[Span]) -> list[Span]:
    """The spans no other span of the list encloses (they nest perfectly), in time order."""
    tops: list[Span] = []
    end = None
    for span in spans:
        if end is None or span.start >= end:
            tops.append(span)
            end = span.end
    return tops


def innermost_around(containers: list[Span], items: list[Span]) -> list[Span | None]:
    """For each item (top-level, in time order): the innermost container span enclosing it."""
    found: list[Span | None] = []
    stack: list[Span] = []
    at = 0
    for item in items:
        while at < len(containers) and (containers[at].start, -containers[at].end) <= (item.start, -item.end):
            container = containers[at]
            while stack and stack[-1].end < container.end:
                stack.pop()
            stack.append(container)
            at += 1
        while stack and stack[-1].end < item.end:
            stack.pop()
        found.append(stack[-1] if stack and stack[-1].start <= item.start else None)
    return found


def is_op(prefix: str) -> Callable[[dict], bool]:
    return lambda e: e.get("cat") in ("cpu_op", "operator") and not str(e.get("name", "")).startswith(prefix)


def is_truth_range(prefix: str) -> Callable[[dict], bool]:
    return lambda e: e.get("cat") in RANGE_CATS and str(e.get("name", "")).startswith(prefix)


def pair(names_a: list[str], names_b: list[str]) -> list[tuple[int, int]]:
    """Index pairs (a, b) of equal names, in order: all of them when the sequences are equal."""
    if names_a == names_b:
        return [(i, i) for i in range(len(names_a))]
    matcher = difflib.SequenceMatcher(None, names_a, names_b, autojunk=False)
    return [(a + k, b + k) for a, b, size in matcher.get_matching_blocks() for k in range(size)]


def split_under(spans: list[Span], tops: list[Span]) -> list[list[Span]]:
    """The spans inside each top-level span (`tops` = `top_level(spans)`), in start order."""
    inner: list[list[Span]] = [[] for _ in tops]
    top_ids = {id(s) for s in tops}
    at = -1
    for span in spans:
        if id(span) in top_ids:
            at += 1
        elif at >= 0:
            inner[at].append(span)
    return inner


def ranges_inside(ranges: list[Span], starts: list[int], outer: Span) -> list[Span]:
    """The ranges lying within `outer` (`starts`: the ranges' start times, sorted)."""
    at = bisect.bisect_left(starts, outer.start)
    found = []
    while at < len(ranges) and ranges[at].start <= outer.end:
        if ranges[at].end <= outer.end and ranges[at].start >= outer.start:
            found.append(ranges[at])
        at += 1
    return found


def derive_truth(
    events_a: list[dict], events_b: list[dict], *, prefix: str, harness: Callable[[str], bool]
) -> tuple[dict[str, str], TruthReport]:
    """{External id of A's op: "file:line"} and the report on how it was derived.

    Every top-level op gets the line of the truth range around its twin. Where user Python ran
    inside a top-level op (an autograd Function's forward), B has truth ranges inside the twin too:
    the ops inside then get their own lines, and the bench takes a row's truth from its nearest op
    that has one. A top-level op with user frames inside it in A but no range inside its twin in B
    loses its truth (its inner ops' lines are unknown): `nested_user_dropped`.
    """
    report = TruthReport()
    spans_a = spans_by_thread(events_a, is_op(prefix))
    spans_b = spans_by_thread(events_b, is_op(prefix))
    ranges_b = spans_by_thread(events_b, is_truth_range(prefix))
    user_frames = _user_frames(events_a, harness)
    truth: dict[str, str] = {}
    tops_with_truth: list[tuple[Span, str]] = []
    ext_seen: dict[str, int] = {}

    def keep(span: Span, line: str) -> bool:
        ext = span.args.get("External id")
        if ext is None:
            return False
        ext_seen[str(ext)] = ext_seen.get(str(ext), 0) + 1
        truth[str(ext)] = line
        return True

    for key, all_a in spans_a.items():
        tops = top_level(all_a)
        report.top_ops += len(tops)
        report.top_time_ns += sum(s.end - s.start for s in tops)
        if key not in spans_b:
            report.threads_unpaired += 1
            report.dropped += len(tops)
            report.dropped_time_ns += sum(s.end - s.start for s in tops)
            continue
        twins = top_level(spans_b[key])
        inner_a, inner_b = split_under(all_a, tops), split_under(spans_b[key], twins)
        ranges = ranges_b.get(key, [])
        range_starts = [r.start for r in ranges]
        frames = user_frames.get(key, ([], []))
        pairs = pair([s.name for s in tops], [s.name for s in twins])
        report.paired += len(pairs)
        paired_a = {a for a, _ in pairs}
        for i, span in enumerate(tops):
            if i not in paired_a:
                report.dropped += 1
                report.dropped_time_ns += span.end - span.start
        around = innermost_around(ranges, [twins[b] for _, b in pairs])
        for (a, b), truth_range in zip(pairs, around, strict=True):
            span, twin = tops[a], twins[b]
            nested = ranges_inside(ranges, range_starts, twin)
            if nested:  # user code ran inside the op: its inner ops get their own lines
                report.nested_user_ops += 1
                inner_pairs = pair([s.name for s in inner_a[a]], [s.name for s in inner_b[b]])
                inner_around = innermost_around(nested, [inner_b[b][j] for _, j in inner_pairs])
                for (i, _), inner_range in zip(inner_pairs, inner_around, strict=True):
                    if inner_range is not None:
                        keep(inner_a[a][i], inner_range.name[len(prefix) :])
            elif _has_frame_inside(frames, span):
                report.nested_user_dropped += 1
                report.nested_user_dropped_ns += span.end - span.start
                continue
            if truth_range is not None and keep(span, truth_range.name[len(prefix) :]):
                tops_with_truth.append((span, truth_range.name[len(prefix) :]))
    for ext_key, count in ext_seen.items():
        if count > 1:  # an External id shared by two ops cannot key the truth
            report.duplicate_ext_ids += 1
            truth.pop(ext_key, None)
    for span, _ in tops_with_truth:
        if str(span.args.get("External id")) in truth:
            report.with_truth += 1
            report.truth_time_ns += span.end - span.start
    frame_files = _frame_files(events_a)
    truth_files = {line.rpartition(":")[0] for line in truth.values()}
    report.unknown_files = sorted(f for f in truth_files if not any(same_file(f, g) for g in frame_files))
    _check_call_from(events_a, {k: top_level(v) for k, v in spans_a.items()}, truth, report, harness)
    return truth, report


def _user_frames(
    events: list[dict], harness: Callable[[str], bool]
) -> dict[tuple, tuple[list[int], list[Span]]]:
    """User-code Python frames per thread, with their start times (for `_has_frame_inside`)."""

    def is_user(event: dict) -> bool:
        if event.get("cat") != "python_function":
            return False
        file = frame_file(event.get("name", ""))
        return file is not None and not is_library_name(file) and not harness(file)

    return {key: ([s.start for s in spans], spans) for key, spans in spans_by_thread(events, is_user).items()}


def _has_frame_inside(frames: tuple[list[int], list[Span]], op: Span) -> bool:
    starts, spans = frames
    at = bisect.bisect_left(starts, op.start)
    return at < len(spans) and spans[at].start <= op.end and spans[at].end <= op.end


def _frame_files(events: Iterable[dict]) -> set[str]:
    files = set()
    for event in events:
        if event.get("cat") == "python_function":
            file = frame_file(event.get("name", ""))
            if file is not None:
                files.add(file)
    return files


def _check_call_from(
    events_a: list[dict],
    ops_a: dict[tuple, list[Span]],
    truth: dict[str, str],
    report: TruthReport,
    harness: Callable[[str], bool],
) -> None:
    """Each op under a child frame C of its innermost user frame U: C's CallFrom must be the truth."""
    frames = spans_by_thread(events_a, lambda e: e.get("cat") == "python_function")
    report.has_call_from = any("CallFrom" in s.args for spans in frames.values() for s in spans)
    if not report.has_call_from:
        return
    by_id = {s.args.get("Python id"): s for spans in frames.values() for s in spans}

    def is_user(span: Span) -> bool:
        file = frame_file(span.name)
        return file is not None and not is_library_name(file) and not harness(file)

    for key, tops in ops_a.items():
        for op, frame in zip(tops, innermost_around(frames.get(key, []), tops), strict=True):
            line = truth.get(str(op.args.get("External id")))
            if line is None or frame is None:
                continue
            child, cur = None, frame
            while cur is not None and not is_user(cur):
                child, cur = cur, by_id.get(cur.args.get("Python parent id"))
            if cur is None:
                continue
            if child is None:
                report.callfrom_direct += 1
                continue
            report.callfrom_checked += 1
            said = str(child.args.get("CallFrom", ""))
            file, _, number = said.rpartition(":")
            true_file, _, true_line = line.rpartition(":")
            if number == true_line and same_file(file, true_file):
                report.callfrom_agree += 1
            elif len(report.callfrom_disagreements) < 20:
                report.callfrom_disagreements.append(
                    {
                        "op": op.name,
                        "ext": op.args.get("External id"),
                        "callfrom": said,
                        "truth": line,
                        "frame": child.name,
                        "user_frame": cur.name,
                    }
                )
