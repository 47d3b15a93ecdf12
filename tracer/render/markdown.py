"""A Markdown rendering of an `Analysis` for pasting into issues: summary, table, top origins."""

from __future__ import annotations

from tracer.model.finding import Analysis
from tracer.render.escape import strip_control
from tracer.render.table import (
    DETAILED,
    detail_lines,
    format_bandwidth,
    format_bytes,
    format_calls_per_step,
    format_ms,
    format_us,
    origin_lines,
    summary_lines,
)


def cell(text: object) -> str:
    """Untrusted text for a Markdown table cell: no control characters, pipes and backticks escaped."""
    out = strip_control("" if text is None else text)
    return (
        out.replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("`", "\\`")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
    )


def code(text: object) -> str:
    """Untrusted text as inline code (a fence longer than any backtick run inside it)."""
    out = strip_control("" if text is None else text).replace("|", "\\|")
    fence = "`"
    while fence in out:
        fence += "`"
    pad = " " if out.startswith("`") or out.endswith("`") else ""
    return f"{fence}{pad}{out}{pad}{fence}"


def render_markdown(analysis: Analysis, top: int = 15, details: int = DETAILED) -> str:
    lines = [f"**kerneltrace explain** `{cell(analysis.trace)}`", ""]
    lines += [f"- {cell(line)}" for line in summary_lines(analysis)[1:]]
    lines.append("")
    lines.append(
        "| # | share | total ms | calls | calls/step | per call us | bytes/call | GB/s (% peak) | kernel | origin |"
    )
    lines.append("|--:|--:|--:|--:|--:|--:|--:|--:|---|---|")
    for rank, finding in enumerate(analysis.findings[:top], start=1):
        where = origin_lines(finding)
        origin = code(where[0]) + "".join(f"<br>{code(extra)}" for extra in where[1:])
        lines.append(
            f"| {rank} | {finding.share:.1%} | {format_ms(finding.total_ns)} | {finding.calls} | "
            f"{format_calls_per_step(finding)} | {format_us(finding.per_call_ns)} | {cell(format_bytes(finding))} | "
            f"{cell(format_bandwidth(finding))} | {code(finding.kernel_short)} | {origin} |"
        )
    for rank, finding in enumerate(analysis.findings[:details], start=1):
        lines.append("")
        lines.append("```text")
        lines.extend(strip_control(line).replace("```", "'''") for line in detail_lines(finding, rank))
        lines.append("```")
    if analysis.notes:
        lines.append("")
        lines += [f"- {cell(note)}" for note in analysis.notes]
    return "\n".join(lines) + "\n"
