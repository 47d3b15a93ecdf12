"""Pair run A's top-level ops with run B's and give each the line of the truth range around its twin.

Works on the raw Chrome trace events (no `tracer` import): per thread, the cpu_ops that no other
cpu_op encloses (``kt:`` ops and record_function ranges do not count), in time order. Where both
runs made the same ops the sequences are equal; otherwise difflib's equal blocks are kept and the
rest is dropped (and reported). On torch >= 2.14 A's Python frames carry ``CallFrom``, the caller's
line: every op under a child frame of a user frame is checked against it (`TruthReport.callfrom_*`).
"""

from __future__ import annotations

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


def derive_truth(
    events_a: list[dict], events_b: list[dict], *, prefix: str, harness: Callable[[str], bool]
) -> tuple[dict[str, str], TruthReport]:
    """{External id of A's top-level op: "file:line"} and the report on how it was derived."""
    report = TruthReport()
    ops_a = {key: top_level(spans) for key, spans in spans_by_thread(events_a, is_op(prefix)).items()}
    ops_b = {key: top_level(spans) for key, spans in spans_by_thread(events_b, is_op(prefix)).items()}
    ranges_b = spans_by_thread(events_b, is_truth_range(prefix))
    truth: dict[str, str] = {}
    truth_spans: dict[int, tuple[Span, str]] = {}  # A's op index -> (op, "file:line")
    ext_seen: dict[str, int] = {}
    for key, tops in ops_a.items():
        report.top_ops += len(tops)
        report.top_time_ns += sum(s.end - s.start for s in tops)
        twins = ops_b.get(key)
        if twins is None:
            report.threads_unpaired += 1
            report.dropped += len(tops)
            report.dropped_time_ns += sum(s.end - s.start for s in tops)
            continue
        pairs = pair([s.name for s in tops], [s.name for s in twins])
        report.paired += len(pairs)
        paired_a = {a for a, _ in pairs}
        for i, span in enumerate(tops):
            if i not in paired_a:
                report.dropped += 1
                report.dropped_time_ns += span.end - span.start
        around = innermost_around(ranges_b.get(key, []), [twins[b] for _, b in pairs])
        for (a, _), truth_range in zip(pairs, around, strict=True):
            if truth_range is None:
                continue
            span = tops[a]
            ext = span.args.get("External id")
            if ext is None:
                continue
            line = truth_range.name[len(prefix) :]
            ext_key = str(ext)
            ext_seen[ext_key] = ext_seen.get(ext_key, 0) + 1
            truth[ext_key] = line
            truth_spans[span.index] = (span, line)
    for ext_key, count in ext_seen.items():
        if count > 1:  # an External id shared by two top-level ops cannot key the truth
            report.duplicate_ext_ids += 1
            truth.pop(ext_key, None)
    for span, line in truth_spans.values():
        if str(span.args.get("External id")) in truth:
            report.with_truth += 1
            report.truth_time_ns += span.end - span.start
    frame_files = _frame_files(events_a)
    truth_files = {line.rpartition(":")[0] for line in truth.values()}
    report.unknown_files = sorted(f for f in truth_files if not any(same_file(f, g) for g in frame_files))
    _check_call_from(events_a, ops_a, truth, report, harness)
    return truth, report


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
