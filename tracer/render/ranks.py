"""People's renderings of a `RankReport` (a directory of per-rank traces): terminal, Markdown, HTML."""

from __future__ import annotations

from pathlib import Path

from tracer.explain.ranks import CombinedFinding, RankFigure, RankReport, finding_label, rank_labels
from tracer.explain.ranks.consistency import steps_agree
from tracer.render.markdown import cell, code
from tracer.render.table import format_ms, safe, safe_lines


def _where(c: CombinedFinding) -> str:
    return c.location if ":" in c.location else c.origin_key


def _per_unit(report: RankReport) -> tuple[str, str]:
    """(column unit, figure name): per step when the ranks agree on the steps, else per call."""
    return ("ms/step", "per_step_ns") if steps_agree(report.ranks) else ("us/call", "per_call_ns")


def _figure(f: RankFigure, field: str) -> str:
    value = getattr(f, field)
    return format_ms(value) if field == "per_step_ns" else f"{value / 1e3:.1f}"


def print_rank_report(report: RankReport, console, top: int = 15) -> None:
    """The terminal rendering: one line per rank, the cross-rank statements, the combined table."""
    from rich.table import Table

    console.print(safe(f"{report.directory}: {len(report.ranks)} ranks"))
    for r in report.ranks:
        a = r.analysis
        steps = (
            f", {a.steps} steps by {a.step_method} ({format_ms(a.step_ns or 0)} ms/step)" if a.steps else ""
        )
        top_finding = a.findings[0] if a.findings else None
        hot = f"; top: {finding_label(top_finding)} {top_finding.share:.0%}" if top_finding else ""
        console.print(
            safe(
                f"rank {r.rank}: {Path(r.path).name}: {a.time_basis.upper()} {format_ms(a.total_ns)} ms{steps}, "
                f"own work {format_ms(r.own_work_per_step_ns)} ms/{'step' if a.steps else 'trace'}{hot}"
            )
        )
        for note in a.notes:
            if note.startswith("CUDA graph replays"):
                console.print(safe(f"  {note}"))
    console.print(safe("cross-rank consistency:"))
    for line in (*report.consistency, *report.notes):
        console.print(safe(f"  - {line}"))
    ranks = [r.rank for r in report.ranks]
    unit, field = _per_unit(report)
    table = Table(title="combined (same kernel and origin across ranks)", title_justify="left")
    for header in ("#", "share", *(f"rank {r} {unit}" for r in ranks), "calls/step", "kernel", "origin"):
        table.add_column(
            header, justify="left" if header in ("kernel", "origin") else "right", overflow="fold"
        )
    for index, c in enumerate(report.combined[:top], start=1):
        per = {f.rank: f for f in c.ranks}
        calls = sorted({f"{f.calls_per_step:g}" for f in c.ranks if f.calls_per_step is not None})
        origin = [_where(c)]
        if c.source:
            origin.append(c.source.strip())
        table.add_row(
            str(index),
            f"{c.share:.1%}",
            *(_figure(per[r], field) if r in per else "-" for r in ranks),
            "/".join(calls) or "-",
            safe(c.kernel_short),
            safe_lines(origin),
        )
    console.print(table)


def rank_report_markdown(report: RankReport, top: int = 15) -> str:
    """Markdown for an issue: the statements, then the combined table."""
    ranks = [r.rank for r in report.ranks]
    unit, field = _per_unit(report)
    lines = [f"**{cell(report.directory)}**: {len(ranks)} ranks", ""]
    lines += [f"- {cell(line)}" for line in (*report.consistency, *report.notes)]
    lines += ["", "| # | share | " + " | ".join(f"rank {r} {unit}" for r in ranks) + " | kernel | origin |"]
    lines.append("|" + " --- |" * (len(ranks) + 4))
    for index, c in enumerate(report.combined[:top], start=1):
        per = {f.rank: f for f in c.ranks}
        values = " | ".join(_figure(per[r], field) if r in per else "-" for r in ranks)
        lines.append(f"| {index} | {c.share:.1%} | {values} | {code(c.kernel_short)} | {code(_where(c))} |")
    return "\n".join(lines) + "\n"


def rank_report_html(report: RankReport, rank_pages: dict[str, str] | None = None, top: int = 20) -> str:
    """The combined page of a directory's HTML reports: per rank a line (linked to its own report,
    ``rank_pages``: rank label -> relative file name), the cross-rank statements, the combined table."""
    from tracer.graph.labels import format_ns, format_share
    from tracer.render.escape import html_text as h
    from tracer.render.html import CSS

    pages = rank_pages or {}
    items = []
    for label, r in zip(rank_labels(report.ranks), report.ranks):
        a = r.analysis
        name = h(Path(r.path).name)
        link = f'<a href="{h(pages[label])}">{name}</a>' if label in pages else name
        steps = f", {a.steps} steps of {h(format_ns(a.step_ns or 0))}" if a.steps else ""
        top_finding = a.findings[0] if a.findings else None
        hot = (
            f"; top: <code>{h(finding_label(top_finding))}</code> {h(format_share(top_finding.share))}"
            if top_finding
            else ""
        )
        items.append(
            f"<li><b>rank {r.rank}</b>: {link}: {a.time_basis.upper()} {h(format_ns(a.total_ns))}{h(steps)}, "
            f"own work {h(format_ns(r.own_work_per_step_ns))}/{'step' if a.steps else 'trace'}{hot}</li>"
        )
    statements = "".join(f"<li>{h(line)}</li>" for line in (*report.consistency, *report.notes))
    ranks = [r.rank for r in report.ranks]
    per_step = steps_agree(report.ranks)
    head = (
        "<tr><th>#</th><th>share</th>"
        + "".join(f"<th>rank {r} per {'step' if per_step else 'call'}</th>" for r in ranks)
        + "<th>calls/step</th><th>kernel</th><th>origin</th></tr>"
    )
    rows = []
    for index, c in enumerate(report.combined[:top], start=1):
        per = {f.rank: f for f in c.ranks}
        calls = "/".join(sorted({f"{f.calls_per_step:g}" for f in c.ranks if f.calls_per_step is not None}))
        cells = "".join(
            f"<td class=num>{h(format_ns(per[r].per_step_ns if per_step else per[r].per_call_ns)) if r in per else '-'}</td>"
            for r in ranks
        )
        rows.append(
            f"<tr><td class=num>{index}</td><td class=num>{h(format_share(c.share))}</td>{cells}"
            f"<td class=num>{h(calls or '-')}</td>"
            f'<td><code title="{h(c.kernel)}">{h(c.kernel_short)}</code></td><td><code>{h(_where(c))}</code></td></tr>'
        )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"<title>kerneltrace: {h(Path(report.directory).name)} ({len(ranks)} ranks)</title><style>{CSS}</style></head><body>"
        f"<h1>kerneltrace: <code>{h(Path(report.directory).name)}</code>, {len(ranks)} ranks</h1>"
        f'<p class="muted">{h(report.directory)}</p>'
        f"<h2>Ranks</h2><ul>{''.join(items)}</ul>"
        f"<h2>Cross-rank consistency</h2><ul>{statements}</ul>"
        f'<h2>Combined (same kernel and origin across ranks)</h2><table class="findings">{head}{"".join(rows)}</table>'
        "</body></html>\n"
    )
