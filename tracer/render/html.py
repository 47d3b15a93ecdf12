"""The HTML report: one self-contained file (inline CSS and SVG, nothing fetched) for one analysis.

It holds the findings table, the call graph, and per finding its origin in detail: source lines
around the call when the file is found under a --source root, op chain, shapes, bytes, bandwidth,
invariant, and how the line was found.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from pathlib import Path

import networkx as nx

from tracer.formatting import ANSWER_WORDS, format_confidence
from tracer.join.source_lines import SourceLines
from tracer.model import Analysis, Finding
from tracer.render.columns import Column, finding_columns, origin_head
from tracer.render.escape import html_text as h
from tracer.render.escape import strip_control
from tracer.render.table import evidence_text, hot_title, summary_lines

SNIPPET_CONTEXT = 4  # source lines shown above and below the origin's line
MAX_SOURCE_BYTES = 5_000_000  # a "source file" bigger than this is not read

CSS = """
body{font:14px/1.45 -apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#1d1d1f;margin:2em auto;
max-width:1400px;padding:0 1.5em}
h1{font-size:1.5em;margin-bottom:.2em}h2{margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.summary{color:#444}.summary b{color:#1d1d1f}
table.findings{border-collapse:collapse;width:100%;font-size:13px}
table.findings th,table.findings td{padding:4px 8px;border-bottom:1px solid #e5e5e5;text-align:left;
vertical-align:top}
table.findings th{background:#f5f5f7;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code,pre{font-family:DejaVu Sans Mono,Menlo,Consolas,monospace;font-size:12px}
.cat{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;white-space:nowrap}
.cat-cast-copy{background:#fdc48a}.cat-gemm{background:#b7d3ef}.cat-attention{background:#d4cfee}
.cat-communication{background:#bfe5b8}.cat-other,.cat-memset{background:#e3e3e3}.cat-memcpy{background:#fdd9b5}
.graph{overflow:auto;border:1px solid #e5e5e5;padding:8px;background:#fff}
.graph svg{max-width:100%;height:auto}
#graph-full:checked~.graph svg{max-width:none}#graph-full:checked~.graph{max-height:92vh}
#graph-full:checked~label .fit,#graph-full:not(:checked)~label .full{display:inline}
label .fit,label .full{display:none}
.zoom{display:inline-block;margin:0 0 6px;padding:2px 10px;border:1px solid #bbb;border-radius:12px}
.zoom{font-size:13px;color:#444;cursor:pointer;user-select:none}.zoom-note{color:#777;font-size:13px}
.answer-ranked,.answer-ambiguous{color:#8a5a00}.answer-resolved{color:#555}
details.kernel summary{font-family:DejaVu Sans Mono,Menlo,Consolas,monospace;font-size:12px}
details.kernel code{display:block;white-space:pre-wrap;word-break:break-all;margin-top:4px}
section.finding{border:1px solid #e5e5e5;border-radius:6px;padding:.6em 1em;margin:1em 0}
section.finding h3{margin:.2em 0 .5em;font-size:1.05em}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}dt{color:#666}dd{margin:0}
pre.snippet{background:#f7f7f9;border:1px solid #e5e5e5;padding:6px 0;overflow:auto;margin:.6em 0}
pre.snippet span{display:block;padding:0 10px}pre.snippet span.hit{background:#fff0c2;font-weight:bold}
pre.snippet i{color:#999;font-style:normal;display:inline-block;width:4.5em}
.muted{color:#777}.waste{color:#b3261e;font-weight:600}details summary{cursor:pointer;color:#444}
"""


def resolve_source(file: str, sources: SourceLines) -> Path | None:
    """The file named `file` under a source root, found as the join finds it, or None.

    A trace is untrusted input and the report inlines what it reads: a name with ``..`` or a file
    that resolves outside every root is never read.
    """
    if ".." in Path(file).parts:
        return None
    path = sources.find(file)
    if path is None:
        return None
    path = path.resolve()
    return path if any(path.is_relative_to(root) for root in sources.roots) else None


def source_snippet(path: Path, line: int, context: int = SNIPPET_CONTEXT) -> list[tuple[int, str]] | None:
    """(line number, text) of the lines around `line`, or None when the file cannot be read."""
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not 1 <= line <= len(lines):
        return None
    first, last = max(1, line - context), min(len(lines), line + context)
    return [(number, lines[number - 1]) for number in range(first, last + 1)]


def _category_class(category: str) -> str:
    return "cat-" + "".join(ch if ch.isalnum() else "-" for ch in category)


def _summary(analysis: Analysis) -> str:
    """The terminal's summary lines (`tracer.render.table.summary_lines`), word for word."""
    lines = "<br>".join(h(line) for line in summary_lines(analysis)[1:])
    notes = "".join(f"<li>{h(note)}</li>" for note in analysis.notes)
    return f'<p class="summary">{lines}</p>' + (f'<ul class="muted">{notes}</ul>' if notes else "")


def _origin_html(finding: Finding, index: int) -> str:
    origin = finding.origin
    answer = origin.answer
    title = ANSWER_WORDS[answer] + (
        f", confidence {format_confidence(origin.confidence)}" if origin.line else ""
    )
    link = f'<a href="#finding-{index}"><code class="answer-{h(answer)}" title="{h(title)}">{h(origin_head(origin))}</code></a>'
    if origin.source:
        link += f'<br><code class="muted">{h(origin.source.strip())}</code>'
    return link


def _html_cell(column: Column, finding: Finding, analysis: Analysis, index: int) -> str:
    if column.name == "origin":
        return f"<td>{_origin_html(finding, index)}</td>"
    if column.name == "kernel":
        return f'<td><code title="{h(finding.kernel)}">{h(finding.kernel_short)}</code></td>'
    if column.name == "category":
        return f'<td><span class="cat {_category_class(finding.category)}">{h(finding.category)}</span></td>'
    css = " class=num" if column.justify == "right" else ""
    return f"<td{css}>{h(column.text(finding, analysis))}</td>"


def _findings_table(analysis: Analysis, findings: Sequence[Finding]) -> str:
    columns = finding_columns(analysis)
    head = "<tr><th>#</th>" + "".join(f"<th>{h(c.title(analysis))}</th>" for c in columns) + "</tr>"
    rows = [
        f"<tr><td class=num>{index}</td>"
        + "".join(_html_cell(c, finding, analysis, index) for c in columns)
        + "</tr>"
        for index, finding in enumerate(findings, 1)
    ]
    return f'<table class="findings">{head}{"".join(rows)}</table>'


def _snippet_html(finding: Finding, sources: SourceLines) -> str:
    origin = finding.origin
    if origin.file is None or origin.line is None:
        return ""
    path = resolve_source(origin.file, sources) if sources.roots else None
    lines = source_snippet(path, origin.line) if path is not None else None
    if not lines:
        if sources.roots and path is None and sources.find(origin.file) is not None:
            return ""  # the name leads out of every --source root (a symlink): nothing of it is shown
        if origin.source:
            return (
                f'<pre class="snippet"><span class="hit"><i>{origin.line}</i>{h(origin.source)}</span></pre>'
            )
        return ""
    spans = []
    for number, text in lines:
        hit = ' class="hit"' if number == origin.line else ""
        spans.append(f"<span{hit}><i>{number}</i>{h(text)}</span>")
    return f'<pre class="snippet">{"".join(spans)}</pre>'


def _finding_section(index: int, finding: Finding, analysis: Analysis, sources: SourceLines) -> str:
    origin = finding.origin
    by_name = {c.name: c for c in finding_columns(analysis)}

    def shown(name: str) -> str:
        return h(by_name[name].text(finding, analysis)) if name in by_name else ""

    kernel = f"<code>{h(finding.kernel_short)}</code>"
    if finding.kernel != finding.kernel_short:  # a demangled template: the full name on request
        kernel = (
            f'<details class="kernel"><summary>{h(finding.kernel_short)}</summary>'
            f"<code>{h(finding.kernel)}</code></details>"
        )
    items: list[tuple[str, str]] = [
        ("kernel" if analysis.time_basis == "gpu" else "op", kernel),
        ("category", f'<span class="cat {_category_class(finding.category)}">{h(finding.category)}</span>'),
        ("time", f"{shown('time')} ({shown('share')}), {shown('calls')} calls"),
    ]
    if finding.calls_per_step is not None and "calls_per_step" in by_name:
        items.append(("calls/step", shown("calls_per_step")))
    if finding.invariant:
        items.append(("invariant", h(finding.invariant)))
    if finding.bytes_per_call is not None:
        items.append(("bytes/call", shown("bytes")))
    if finding.gbps is not None:
        items.append(("GB/s (% peak)", shown("bandwidth")))
    if finding.shapes:
        items.append(("shapes", "<br>".join(f"<code>{h(shape)}</code>" for shape in finding.shapes)))
    if finding.waste:
        items.append(("waste", f'<span class="waste">{h(finding.waste)}</span>'))
    if origin.ops:
        items.append(("op chain", f"<code>{h(' → '.join(origin.ops))}</code>"))
    if origin.ranges:
        items.append(("ranges", f"<code>{h(' / '.join(origin.ranges))}</code>"))
    if origin.rule:
        items.append(("rule", f"<code>{h(origin.rule)}</code>"))
    answer = f"{ANSWER_WORDS[origin.answer]}, " if origin.line is not None else ""
    items.append(("answer", h(f"{answer}confidence {format_confidence(origin.confidence)}")))
    if origin.evidence:
        items.append(("evidence", h(evidence_text(origin.evidence))))
    if origin.candidates:
        items.append(("candidates", "<br>".join(f"<code>{h(c)}</code>" for c in origin.candidates)))
    if origin.replay:
        items.append(("CUDA graph", "replayed from a captured graph"))
    if origin.frames:
        frames = "".join(f"<li><code>{h(frame.label)}</code></li>" for frame in origin.frames)
        items.append(
            (
                "Python stack",
                f"<details><summary>{len(origin.frames)} frames</summary><ol>{frames}</ol></details>",
            )
        )
    body = "".join(f"<dt>{label}</dt><dd>{value}</dd>" for label, value in items)
    title = (
        f"{index}. {h(finding.kernel_short)} <span class=muted>from</span> "
        f'<code class="answer-{h(origin.answer)}">{h(origin_head(origin))}</code>'
    )
    return (
        f'<section class="finding" id="finding-{index}"><h3>{title}</h3>'
        f"{_snippet_html(finding, sources)}<dl>{body}</dl></section>"
    )


def inline_svg(svg: str) -> str:
    """Graphviz SVG without its XML prologue, ready to sit inside HTML."""
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else ""


def render_report(
    analysis: Analysis,
    graph: nx.DiGraph | None = None,
    *,
    source_roots: Sequence[str | Path] = (),
    top: int | None = None,
) -> str:
    """The report as one HTML document (a string). `graph` is drawn with graphviz when given."""
    findings = analysis.findings[:top] if top else analysis.findings
    name = posixpath.basename(strip_control(analysis.trace)) or "trace"
    graph_html = ""
    if graph is not None:
        from tracer.render.dot import render_svg

        graph_html = (
            # No script may run (the CSP): a checkbox and CSS switch between the two sizes.
            '<h2>Call graph</h2><input type="checkbox" id="graph-full" hidden>'
            '<label for="graph-full" class="zoom"><span class="full">&#10530; open full size</span>'
            '<span class="fit">&#10529; fit to the page</span></label> '
            '<span class="zoom-note">full size scrolls; hover a node for its full kernel name and line</span>'
            f'<div class="graph">{inline_svg(render_svg(graph))}</div>'
        )
    sources = SourceLines(source_roots)
    sections = "".join(_finding_section(index, f, analysis, sources) for index, f in enumerate(findings, 1))
    shown = (
        f"top {len(findings)} of {len(analysis.findings)}"
        if len(findings) < len(analysis.findings)
        else "all"
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # Self-contained by design: nothing may be fetched when the file is opened.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        'img-src data:">'
        f"<title>kerneltrace: {h(name)}</title><style>{CSS}</style></head><body>"
        f"<h1>kerneltrace: <code>{h(name)}</code></h1>"
        f'<p class="muted">{h(analysis.trace)}</p>'
        f"{_summary(analysis)}"
        f"<h2>{h(hot_title(analysis)[:1].upper() + hot_title(analysis)[1:])} and where they come from "
        f"({h(shown)})</h2>"
        f"{_findings_table(analysis, findings)}"
        f"{graph_html}"
        f"<h2>Origins in detail</h2>{sections}"
        "</body></html>\n"
    )


def write_report(html_text: str, path: str | Path) -> Path:
    from tracer.output_files import write_output

    return write_output(path, html_text)
