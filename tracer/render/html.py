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

from tracer.explain.diff import origin_where
from tracer.graph.labels import format_bytes, format_count, format_gbps, format_ns, format_share
from tracer.join.source_lines import SourceLines
from tracer.model import Analysis, Finding
from tracer.render.escape import html_text as h
from tracer.render.escape import strip_control

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
    facts = []
    if analysis.device:
        facts.append(f"device <b>{h(analysis.device)}</b>")
    if analysis.steps:
        step = f"<b>{analysis.steps}</b> steps"
        if analysis.step_ns:
            step += f" of <b>{h(format_ns(analysis.step_ns))}</b>"
        facts.append(step)
    basis = "GPU" if analysis.time_basis == "gpu" else "CPU"
    facts.append(f"{basis} time <b>{h(format_ns(analysis.total_ns))}</b>")
    if analysis.gpu_busy_fraction is not None:
        facts.append(f"GPU busy <b>{h(format_share(analysis.gpu_busy_fraction))}</b> of the window")
    facts.append(f"<b>{h(format_share(analysis.attributed_fraction))}</b> of it attributed to a source line")
    if analysis.replay_fraction:
        facts.append(f"{h(format_share(analysis.replay_fraction))} replayed from CUDA graphs")
    if analysis.layers:
        facts.append(f"{analysis.layers} layers")
    notes = "".join(f"<li>{h(note)}</li>" for note in analysis.notes)
    return f'<p class="summary">{" · ".join(facts)}</p>' + (
        f'<ul class="muted">{notes}</ul>' if notes else ""
    )


def _findings_table(findings: Sequence[Finding]) -> str:
    head = (
        "<tr><th>#</th><th>share</th><th>time</th><th>calls/step</th><th>per call</th><th>bytes/call</th>"
        "<th>bandwidth</th><th>kernel</th><th>origin</th><th>category</th></tr>"
    )
    rows = []
    for index, finding in enumerate(findings, 1):
        origin = finding.origin
        calls = (
            format_count(finding.calls_per_step)
            if finding.calls_per_step is not None
            else f"{finding.calls} total"
        )
        rate = format_gbps(finding.gbps) if finding.gbps else ""
        if finding.gbps and finding.peak_fraction is not None:
            rate += f" ({format_share(finding.peak_fraction)} of peak)"
        where = origin_where(origin)
        rows.append(
            f"<tr><td class=num>{index}</td><td class=num>{h(format_share(finding.share))}</td>"
            f"<td class=num>{h(format_ns(finding.total_ns))}</td><td class=num>{h(calls)}</td>"
            f"<td class=num>{h(format_ns(finding.per_call_ns))}</td>"
            f"<td class=num>{h(format_bytes(finding.bytes_per_call)) if finding.bytes_per_call else ''}</td>"
            f"<td class=num>{h(rate)}</td>"
            f'<td><code title="{h(finding.kernel)}">{h(finding.kernel_short)}</code></td>'
            f'<td><a href="#finding-{index}"><code>{h(where)}</code></a></td>'
            f'<td><span class="cat {_category_class(finding.category)}">{h(finding.category)}</span></td></tr>'
        )
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


def _finding_section(index: int, finding: Finding, sources: SourceLines) -> str:
    origin = finding.origin
    where = origin_where(origin)
    items: list[tuple[str, str]] = [
        ("kernel", f"<code>{h(finding.kernel)}</code>"),
        ("category", f'<span class="cat {_category_class(finding.category)}">{h(finding.category)}</span>'),
        ("time", h(f"{format_ns(finding.total_ns)} ({format_share(finding.share)}), {finding.calls} calls")),
    ]
    if finding.calls_per_step is not None:
        items.append(("calls/step", h(format_count(finding.calls_per_step))))
    if finding.invariant:
        items.append(("invariant", h(finding.invariant)))
    if finding.bytes_per_call:
        items.append(("bytes/call", h(format_bytes(finding.bytes_per_call))))
    if finding.gbps:
        rate = format_gbps(finding.gbps)
        if finding.peak_fraction is not None:
            rate += f" ({format_share(finding.peak_fraction)} of peak)"
        items.append(("bandwidth", h(rate)))
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
    items.append(("confidence", h(f"{origin.confidence:.0%}")))
    if origin.evidence:
        items.append(("evidence", "<br>".join(h(line) for line in origin.evidence)))
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
    title = f"{index}. {h(finding.kernel_short)} <span class=muted>from</span> <code>{h(where)}</code>"
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

        graph_html = f'<h2>Call graph</h2><div class="graph">{inline_svg(render_svg(graph))}</div>'
    sources = SourceLines(source_roots)
    sections = "".join(_finding_section(index, f, sources) for index, f in enumerate(findings, 1))
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
        f"<h2>Hot kernels and where they come from ({h(shown)})</h2>{_findings_table(findings)}"
        f"{graph_html}"
        f"<h2>Origins in detail</h2>{sections}"
        "</body></html>\n"
    )


def write_report(html_text: str, path: str | Path) -> Path:
    from tracer.output_files import write_output

    return write_output(path, html_text)
