"""People's renderings of a `RankReport` (a directory of per-rank traces): terminal, Markdown, HTML."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from tracer.explain.ranks import CombinedFinding, RankFigure, RankReport, finding_label, rank_labels
from tracer.explain.ranks.consistency import steps_agree
from tracer.formatting import format_count, format_duration, format_share
from tracer.render.fit import Cell, Fitted, TableColumn, print_fitted, render_fitted
from tracer.render.markdown import cell, code
from tracer.render.table import safe


def _where(c: CombinedFinding) -> str:
    return c.location if ":" in c.location else c.origin_key


def _per_unit(report: RankReport) -> tuple[str, str]:
    """(column unit, figure name): per step when the ranks agree on the steps, else per call."""
    return ("per step", "per_step_ns") if steps_agree(report.ranks) else ("per call", "per_call_ns")


def _figure(f: RankFigure, field: str) -> str:
    return format_duration(getattr(f, field))


def _calls(c: CombinedFinding) -> str:
    return "/".join(sorted({format_count(f.calls_per_step) for f in c.ranks if f.calls_per_step is not None}))


def print_rank_report(report: RankReport, console, top: int = 15, *, wide: bool = False) -> None:
    """The terminal rendering: one line per rank, the cross-rank statements, the combined table."""
    console.print(safe(f"{report.directory}: {len(report.ranks)} ranks"))
    for r in report.ranks:
        a = r.analysis
        steps = (
            f", {a.steps} steps by {a.step_method} (a step takes {format_duration(a.step_ns)})"
            if a.steps
            else ""
        )
        top_finding = a.findings[0] if a.findings else None
        hot = f"; top: {finding_label(top_finding)} {format_share(top_finding.share)}" if top_finding else ""
        console.print(
            safe(
                f"rank {r.rank}: {Path(r.path).name}: {a.time_basis.upper()} {format_duration(a.total_ns)}{steps}, "
                f"own work {format_duration(r.own_work_per_step_ns)}/{'step' if a.steps else 'trace'}{hot}"
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
    combined = report.combined[:top]
    columns = [
        TableColumn("#", [Cell([str(i)]) for i in range(1, len(combined) + 1)], justify="right"),
        TableColumn("share", [Cell([format_share(c.share)]) for c in combined], justify="right"),
    ]
    for rank in ranks:
        cells = []
        for c in combined:
            per = {f.rank: f for f in c.ranks}
            cells.append(Cell([_figure(per[rank], field) if rank in per else "-"]))
        columns.append(TableColumn(f"rank {rank} {unit}", cells, justify="right", narrow_header=f"r{rank}"))
    columns.append(
        TableColumn(
            "calls/step", [Cell([_calls(c) or "-"]) for c in combined], justify="right", narrow_header="/step"
        )
    )
    columns.append(
        TableColumn(
            "kernel", [Cell([c.kernel_short]) for c in combined], flex="middle", grow=1, comfortable=20
        )
    )
    columns.append(
        TableColumn(
            "origin",
            [
                Cell(
                    [
                        Fitted(_where(c), partial(_shortened, _where(c))),
                        *([c.source.strip()] if c.source else []),
                    ]
                )
                for c in combined
            ],
            flex="end",
            comfortable=28,
        )
    )
    title = "combined (same kernel and origin across ranks)"
    width = None if wide else console.width
    table = render_fitted(columns, width, title=title)
    print_fitted(console, table, columns, wide)


def _shortened(where: str, width: int) -> str:
    """A ``file:line`` shortened from the left (never broken); a context without a line cut to fit."""
    from tracer.formatting import cut_end, shorten_path

    return shorten_path(where, width) if ":" in where and "/" in where else cut_end(where, width)


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
        lines.append(
            f"| {index} | {format_share(c.share)} | {values} | {code(c.kernel_short)} | {code(_where(c))} |"
        )
    return "\n".join(lines) + "\n"


def rank_report_html(report: RankReport, rank_pages: dict[str, str] | None = None, top: int = 20) -> str:
    """The combined page of a directory's HTML reports: per rank a line (linked to its own report,
    ``rank_pages``: rank label -> relative file name), the cross-rank statements, the combined table."""
    from tracer.render.escape import html_text as h
    from tracer.render.html import CSS

    pages = rank_pages or {}
    items = []
    for label, r in zip(rank_labels(report.ranks), report.ranks):
        a = r.analysis
        name = h(Path(r.path).name)
        link = f'<a href="{h(pages[label])}">{name}</a>' if label in pages else name
        steps = f", {a.steps} steps of {h(format_duration(a.step_ns or 0))}" if a.steps else ""
        top_finding = a.findings[0] if a.findings else None
        hot = (
            f"; top: <code>{h(finding_label(top_finding))}</code> {h(format_share(top_finding.share))}"
            if top_finding
            else ""
        )
        items.append(
            f"<li><b>rank {r.rank}</b>: {link}: {a.time_basis.upper()} {h(format_duration(a.total_ns))}{h(steps)}, "
            f"own work {h(format_duration(r.own_work_per_step_ns))}/{'step' if a.steps else 'trace'}{hot}</li>"
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
        calls = _calls(c)
        cells = "".join(
            f"<td class=num>{h(format_duration(per[r].per_step_ns if per_step else per[r].per_call_ns)) if r in per else '-'}</td>"
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
