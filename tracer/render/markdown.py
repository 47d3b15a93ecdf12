"""A Markdown rendering of an `Analysis` for pasting into issues: summary, table, top origins."""

from __future__ import annotations

from tracer.model.finding import Analysis, Finding
from tracer.render.columns import Column, finding_columns, origin_lines
from tracer.render.escape import strip_control
from tracer.render.table import DETAILED, detail_lines, summary_lines


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


def _markdown_cell(column: Column, finding: Finding, analysis: Analysis) -> str:
    if column.name == "origin":
        where = origin_lines(finding)
        return code(where[0]) + "".join(f"<br>{code(extra)}" for extra in where[1:])
    if column.name == "kernel":
        return code(finding.kernel_short)
    return cell(column.text(finding, analysis))


def render_markdown(analysis: Analysis, top: int = 15, details: int = DETAILED) -> str:
    columns = finding_columns(analysis)
    lines = [f"**kerneltrace explain** `{cell(analysis.trace)}`", ""]
    lines += [f"- {cell(line)}" for line in summary_lines(analysis)[1:]]
    lines.append("")
    lines.append("| # | " + " | ".join(cell(c.title(analysis)) for c in columns) + " |")
    lines.append("|--:|" + "".join("--:|" if c.justify == "right" else "---|" for c in columns))
    for rank, finding in enumerate(analysis.findings[:top], start=1):
        cells = " | ".join(_markdown_cell(c, finding, analysis) for c in columns)
        lines.append(f"| {rank} | {cells} |")
    for rank, finding in enumerate(analysis.findings[:details], start=1):
        lines.append("")
        lines.append("```text")
        lines.extend(strip_control(line).replace("```", "'''") for line in detail_lines(finding, rank))
        lines.append("```")
    if analysis.notes:
        lines.append("")
        lines += [f"- {cell(note)}" for note in analysis.notes]
    return "\n".join(lines) + "\n"
