"""The terminal rendering of an `Analysis`: the summary, a table of hot kernels fitted to the
terminal's width (`tracer.render.fit`) and the origin of the top ones in detail.

Every string from the trace (kernel and function names, paths, source text) is untrusted: it is
shown as `rich.text.Text` (never parsed as markup) after control characters are stripped.
"""

from __future__ import annotations

from functools import partial

from rich.console import Console, Group
from rich.text import Text

from tracer.formatting import (
    ANSWER_WORDS,
    format_bandwidth,
    format_bytes,
    format_confidence,
    format_duration,
    format_share,
)
from tracer.model.finding import Analysis, Finding
from tracer.model.origin import AMBIGUOUS, EXACT, RANKED, RESOLVED
from tracer.render.columns import Column, finding_columns, origin_head, origin_lines
from tracer.render.escape import strip_control
from tracer.render.fit import Cell, Fitted, TableColumn, print_fitted, render_fitted

DETAILED = 3  # findings whose origin chain is spelled out below the table
CHAIN_FRAMES = 4  # innermost user frames shown in a chain
LAUNCH_BOUND_BELOW = 0.6  # as tracer.explain.analyse words it
GROW = {"origin": 0, "kernel": 1}  # spare width goes to the origin first, then the kernel name
# Widths worth dropping other columns for: a kernel name this wide reads, a path this wide keeps
# its directory; past them the spare width goes to the origin first, then the kernel.
COMFORTABLE = {"kernel": 20, "origin": 28}


def safe(text: object) -> Text:
    """Untrusted text as a rich `Text`: no markup parsing, no control characters, one line."""
    return Text(strip_control("" if text is None else text))


def safe_lines(lines: list[str]) -> Text:
    """Several untrusted lines: each made safe on its own (a newline inside one becomes a space)."""
    return Text("\n".join(strip_control(line) for line in lines))


def hot_title(analysis: Analysis) -> str:
    return "hot kernels" if analysis.time_basis == "gpu" else "hot CPU ops"


def device_line(analysis: Analysis) -> str:
    """``NVIDIA H200, peak 4,800 GB/s, 78 layers``."""
    device = analysis.device or ("CPU" if analysis.time_basis == "cpu" else "unknown device")
    peak = f", peak {format_bandwidth(analysis.peak_gbps, None)}" if analysis.peak_gbps else ""
    layers = f", {analysis.layers} layers" if analysis.layers else ""
    return device + peak + layers


def time_line(analysis: Analysis) -> str:
    """``GPU time 155.48 ms = 77.74 ms/step over 2 steps; a step takes 136.52 ms (wall, mean)``: the
    time counted, per step, and the steps' own length (a step's wall time holds the gaps between
    kernels too, so it is not the time divided by the steps)."""
    basis = "GPU time" if analysis.time_basis == "gpu" else "CPU op time (no GPU activity in the trace)"
    line = f"{basis} {format_duration(analysis.total_ns)}"
    if analysis.steps:
        line += (
            f" = {format_duration(analysis.total_ns / analysis.steps)}/step over {analysis.steps} steps; "
            f"a step takes {format_duration(analysis.step_ns)} (wall, mean)"
        )
    return line


def answer_shares(analysis: Analysis) -> dict[str, float]:
    """The share of the time behind each kind of answer: the findings' own times, summed (exact
    integers, so all of them is 100%, not 99.99...%)."""
    times: dict[str, int] = {}
    for finding in analysis.findings:
        times[finding.origin.answer] = times.get(finding.origin.answer, 0) + finding.total_ns
    return {answer: ns / analysis.total_ns for answer, ns in times.items()} if analysis.total_ns else {}


def attribution_line(analysis: Analysis) -> str:
    """How much of the time has a line, and how far those lines can be trusted."""
    line = f"attributed to a source line: {format_share(analysis.attributed_fraction)} of the time"
    shares = answer_shares(analysis)
    kinds = [
        f"{ANSWER_WORDS[kind]} {format_share(shares[kind])}"
        for kind in (EXACT, RESOLVED, AMBIGUOUS, RANKED)
        if shares.get(kind)
    ]
    if kinds and not (len(kinds) == 1 and EXACT in shares):
        line += f" ({', '.join(kinds)})"
    if shares.get(RANKED):
        line += "; ~file:line? is a ranking of candidates, not a match (no Python frames)"
    if analysis.replay_fraction:
        line += (
            f"; CUDA graph replays {format_share(analysis.replay_fraction)}"
            f" ({format_share(analysis.replay_attributed_fraction)} of them attributed)"
        )
    return line


def summary_lines(analysis: Analysis) -> list[str]:
    """The lines above the table: what was analysed and how busy the GPU was."""
    lines = [f"{analysis.trace}", device_line(analysis), time_line(analysis)]
    if analysis.steps:  # how the steps were found (tracer.explain.steps): method and first evidence
        evidence = f": {analysis.step_evidence[0]}" if analysis.step_evidence else ""
        lines.append(f"steps by {analysis.step_method}{evidence}")
        if not analysis.steps_exact:
            lines.append("calls/step are approximate (~): the step evidence disagrees; see the notes")
    if analysis.gpu_busy_fraction is not None:
        busy = analysis.gpu_busy_fraction
        bound = ": launch-bound" if busy < LAUNCH_BOUND_BELOW else ""
        lines.append(
            f"GPU busy {format_share(busy)} of the {format_duration(analysis.window_ns)} window "
            f"(idle {format_share(1 - busy)}){bound}"
        )
    lines.append(attribution_line(analysis))
    return lines


def _cell(column: Column, finding: Finding, analysis: Analysis) -> Cell:
    if column.name == "origin":
        origin = finding.origin
        head = Fitted(origin_head(origin), partial(origin_head, origin))
        return Cell([head, *origin_lines(finding)[1:]])
    return Cell([*column.text(finding, analysis).split("\n")])


def table_columns(analysis: Analysis, top: int) -> list[TableColumn]:
    """The findings table's columns (`tracer.render.columns`) filled with the top findings."""
    findings = analysis.findings[:top]
    columns = [TableColumn("#", [Cell([str(rank)]) for rank in range(1, len(findings) + 1)], justify="right")]
    for column in finding_columns(analysis):
        columns.append(
            TableColumn(
                column.title(analysis),
                [_cell(column, finding, analysis) for finding in findings],
                justify=column.justify,
                drop=column.drop_order(analysis),
                narrow_header=column.narrow_header,
                flex="end" if column.flex == "origin" else column.flex,
                min_width=12,
                grow=GROW.get(column.name, 9),
                comfortable=COMFORTABLE.get(column.name),
            )
        )
    return columns


def findings_table(analysis: Analysis, top: int, width: int | None = None):  # -> rich Table
    return render_fitted(table_columns(analysis, top), width, title=hot_title(analysis))


def evidence_text(evidence: tuple[str, ...]) -> str:
    """The evidence as one sentence: items joined by "; ", a heading ending in ":" by a space."""
    text = ""
    for item in evidence:
        text += item if not text else (" " if text.endswith(":") else "; ") + item
    return text or "none"


FUSED_SHOWN = 8


def detail_lines(finding: Finding, rank: int) -> list[str]:
    """The origin chain and evidence of one finding, as plain lines (the caller makes them safe)."""
    origin = finding.origin
    # The innermost few frames outside torch's own module plumbing say where; the rest is the caller stack.
    frames = [f.label for f in origin.frames if not f.file.startswith(("torch/", "<built-in"))]
    shown = frames[-CHAIN_FRAMES:]
    chain = [*(f"range {r}" for r in origin.ranges), *(["..."] if len(frames) > len(shown) else []), *shown]
    chain += [*origin.ops] + ([finding.kernel_short] if finding.kernel_short not in origin.ops[-1:] else [])
    lines = [f"#{rank} {finding.kernel_short}  [{finding.category}]  {format_share(finding.share)}"]
    answer = f"  ({ANSWER_WORDS[origin.answer]})" if origin.line is not None else ""
    lines.append("  origin: " + origin_head(origin) + answer)
    if origin.source:
        lines.append(f"    {origin.source.strip()}")
    lines.append("  chain: " + " > ".join(chain))
    for fused in origin.fused[:FUSED_SHOWN]:  # the user lines an Inductor kernel fused, with their ops
        lines.append(f"  fused: {fused.label}" + (f"  {fused.source.strip()}" if fused.source else ""))
    if len(origin.fused) > FUSED_SHOWN:
        lines.append(f"  fused: +{len(origin.fused) - FUSED_SHOWN} more lines")
    if finding.invariant:
        lines.append(f"  invariant: {finding.invariant}")
    if finding.bytes_per_call is not None:
        basis = {"estimate": "estimated", "shapes": "from shapes", "device": "from the copy's byte count"}
        lines.append(
            f"  bytes: {format_bytes(finding.bytes_per_call)}/call "
            f"({basis.get(finding.bytes_basis or '', '')}), {format_bandwidth(finding.gbps, finding.peak_fraction)}"
        )
    if finding.shapes:
        lines.append("  shapes: " + "; ".join(finding.shapes))
    if finding.waste:
        lines.append(f"  WASTE: {finding.waste}")
    lines.append(
        f"  confidence {format_confidence(origin.confidence)}; evidence: {evidence_text(origin.evidence)}"
    )
    if origin.candidates:
        lines.append("  candidates: " + ", ".join(origin.candidates[:5]))
    return lines


def render_table(
    analysis: Analysis, top: int = 15, details: int = DETAILED, width: int | None = None
) -> Group:
    """Everything `kerneltrace explain` prints for people, as one rich renderable, its table fitted
    to `width` columns (None: every column whole)."""
    parts: list = [safe_lines(summary_lines(analysis))]
    parts.append(findings_table(analysis, top, width))
    for rank, finding in enumerate(analysis.findings[:details], start=1):
        parts.append(safe_lines(["", *detail_lines(finding, rank)]))
    if analysis.notes:
        parts.append(safe_lines(["", "notes:", *(f"- {note}" for note in analysis.notes)]))
    return Group(*parts)


def print_table(analysis: Analysis, console: Console, top: int = 15, *, wide: bool = False) -> None:
    """The explain output on `console`, fitted to its width (``wide``: every column whole, however
    wide the table gets)."""
    columns = table_columns(analysis, top) if wide else None
    print_fitted(console, render_table(analysis, top, width=None if wide else console.width), columns, wide)
