"""The columns of the findings table: one list that the terminal table, Markdown, HTML and the
``--json`` help read. Moving a column or adding one is an edit here.

Each column names the field of ``--json``'s finding whose value it shows (``json``), so a cell is
always the formatted JSON value (`tracer.formatting`), never a number of the renderer's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from tracer.formatting import (
    cut_end,
    format_bandwidth,
    format_bytes,
    format_count,
    format_duration,
    format_origin,
    format_share,
    shorten_path,
)
from tracer.model.finding import Analysis, Finding
from tracer.model.origin import Origin


def _always(analysis: Analysis) -> bool:
    return True


def _never(analysis: Analysis) -> bool:
    return False


@dataclass(frozen=True)
class Column:
    """One column: its header, the JSON field it shows, and how that value is written.

    ``drop``: in a terminal too narrow for every column, columns go in this order (1 first); None is
    never dropped. ``flex``: the column takes the width that is left and cuts its text to fit
    (``middle``: a kernel name, both ends kept; ``origin``: the path shortened from the left).
    """

    name: str
    header: str
    json: str  # dotted path of the value in --json's finding ("origin.location")
    text: Callable[[Finding, Analysis], str]
    justify: Literal["left", "right"] = "right"
    drop: int | None = None
    narrow_header: str | None = None
    flex: str | None = None
    shown: Callable[[Analysis], bool] = _always
    cpu_header: str | None = None  # the header when the time basis is CPU ops
    kept: Callable[[Analysis], bool] = _never  # never dropped for this analysis, whatever `drop` says

    def value(self, finding: Finding) -> Any:
        """The raw value, as ``--json`` holds it."""
        value: Any = finding
        for part in self.json.split("."):
            value = getattr(value, part)
        return value

    def drop_order(self, analysis: Analysis) -> int | None:
        return None if self.kept(analysis) else self.drop

    def title(self, analysis: Analysis) -> str:
        return self.cpu_header if self.cpu_header and analysis.time_basis == "cpu" else self.header


def _calls_per_step(finding: Finding, analysis: Analysis) -> str:
    return format_count(finding.calls_per_step, approximate=not analysis.steps_exact)


def _bytes(finding: Finding, analysis: Analysis) -> str:
    if finding.bytes_per_call is None:
        return "-"
    return ("~" if finding.bytes_basis == "estimate" else "") + format_bytes(finding.bytes_per_call)


def origin_head(origin: Origin, width: int | None = None) -> str:
    """The origin's first line: ``file:line`` marked by its kind of answer, or the best context
    when there is no line (the caller's frame, the op chain, a CUDA graph replay)."""
    if origin.file is not None and origin.line is not None:
        return format_origin(
            origin.answer,
            origin.location,
            file=origin.file,
            confidence=origin.confidence,
            candidates=origin.candidates,
            width=width,
        )
    if origin.frames:
        caller, innermost = origin.caller_frame, origin.frames[-1]
        head = (caller or innermost).label
        if caller is not None and innermost is not caller and innermost.file.startswith("<"):
            head += f" > {innermost.function}"
    elif origin.replay:
        head = "<CUDA graph replay>"
    elif origin.before_trace:
        head = origin.key
    else:
        head = " > ".join(origin.ops) or "<unknown>"
    if width is None or len(head) <= width:
        return head
    return cut_end(shorten_path(head, width), width)  # no line to keep whole: a context, cut to fit


def origin_lines(finding: Finding) -> list[str]:
    """The origin cell: its head (`origin_head`), the line's source text, the rule."""
    origin = finding.origin
    lines = [origin_head(origin)]
    if origin.source:
        lines.append(origin.source.strip())
    if origin.rule:
        lines.append(f"rule {origin.rule}")
    return lines


FINDING_COLUMNS: tuple[Column, ...] = (
    Column("share", "share", "share", lambda f, a: format_share(f.share)),
    Column("time", "time", "total_ns", lambda f, a: format_duration(f.total_ns), drop=5),
    # Without steps, the total is the only count: then it stays.
    Column("calls", "calls", "calls", lambda f, a: f"{f.calls:,}", drop=1, kept=lambda a: not a.steps),
    Column(
        "calls_per_step",
        "calls/step",
        "calls_per_step",
        _calls_per_step,
        narrow_header="/step",
        shown=lambda a: bool(a.steps),
    ),
    Column("per_call", "per call", "per_call_ns", lambda f, a: format_duration(f.per_call_ns), drop=2),
    Column("bytes", "bytes/call", "bytes_per_call", _bytes, drop=4),
    Column(
        "bandwidth",
        "GB/s (% peak)",
        "gbps",
        lambda f, a: format_bandwidth(f.gbps, f.peak_fraction, unit=False),
        drop=3,
    ),
    Column(
        "kernel",
        "kernel",
        "kernel_short",
        lambda f, a: f.kernel_short,
        justify="left",
        flex="middle",
        cpu_header="op",
    ),
    Column(
        "origin",
        "origin",
        "origin.location",
        lambda f, a: "\n".join(origin_lines(f)),
        justify="left",
        flex="origin",
    ),
    Column("category", "category", "category", lambda f, a: f.category, justify="left", drop=0),
)


def finding_columns(analysis: Analysis) -> list[Column]:
    """The columns that apply to `analysis` (calls/step only where there are steps)."""
    return [column for column in FINDING_COLUMNS if column.shown(analysis)]


def json_fields() -> str:
    """For ``--json``'s help: which field each table column shows."""
    return ", ".join(f"{c.header} = {c.json}" for c in FINDING_COLUMNS)
