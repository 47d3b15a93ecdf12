"""`kerneltrace report`: one self-contained HTML file with the findings, the call graph and each origin."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tracer.cli.common import print_json, reports_input_errors
from tracer.cli.options import (
    TraceOptions,
    analyse,
    derived_output,
    min_share_option,
    output_option,
    top_option,
    trace_options,
)
from tracer.cli.rank_dirs import RankOptions, analyse_ranks, base_output, each_rank, rank_options
from tracer.render.console import stdout_console


@click.command(name="report")
@click.argument("trace", type=click.Path(exists=True))
@trace_options
@output_option(
    "HTML file to write [default: TRACE-NAME.report.html]. For a directory: the combined page; "
    "each rank's report goes beside it as NAME-rank<N>.report.html."
)
@top_option(20, "Findings in the report.")
@top_option(12, "Findings drawn in full.", name="--graph-top")
@min_share_option("Findings under this percent of GPU time fold into 'other' in the graph.")
@rank_options
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@reports_input_errors
def command(
    trace: str,
    options: TraceOptions,
    output: str | None,
    top: int,
    graph_top: int,
    min_share: float,
    ranks: RankOptions,
    as_json: bool,
) -> None:
    """Write an HTML report of TRACE: hot kernels, call graph, source around each origin.

    The file needs no network: CSS and the SVG graph are inline. TRACE may be a directory of
    per-rank traces (SGLang's *-TP-<rank>*.trace.json.gz): one report per rank (NAME-rank<N>.report.html)
    and a combined page (NAME.report.html) with the cross-rank consistency and links to each rank's.
    """
    from tracer.graph import build_graph
    from tracer.render.escape import terminal
    from tracer.render.html import render_report, write_report

    def write(analysis: Any, path: Path) -> tuple[Path, int, int]:
        """One analysis's report at `path`: (the path written, findings shown, graph nodes)."""
        graph = build_graph(analysis, top=graph_top, min_share=min_share / 100)
        written = write_report(render_report(analysis, graph, source_roots=options.source, top=top), path)
        return written, min(top, len(analysis.findings)), graph.number_of_nodes()

    if Path(trace).is_dir():
        _report_ranks(trace, options, ranks, write, output, top, as_json)
        return
    path, shown, nodes = write(
        analyse(trace, options), Path(output) if output else derived_output(trace, ".report.html")
    )
    if as_json:
        print_json({"output": str(path), "findings": shown, "graph_nodes": nodes})
        return
    stdout_console().print(f"wrote {terminal(path)}: {shown} findings, graph of {nodes} nodes")


def _report_ranks(
    directory: str,
    options: TraceOptions,
    ranks: RankOptions,
    write: Callable[[Any, Path], tuple[Path, int, int]],
    output: str | None,
    top: int,
    as_json: bool,
) -> None:
    """One report per rank beside a combined page that links them."""
    from tracer.render.escape import terminal
    from tracer.render.html import write_report
    from tracer.render.ranks import rank_report_html

    report = analyse_ranks(directory, options, ranks)
    combined = base_output(output, directory, ".report.html")
    written = [
        (label, result, *write(result.analysis, path)) for label, result, path in each_rank(report, combined)
    ]
    pages = {label: path.name for label, _, path, _, _ in written}  # beside the combined page
    write_report(rank_report_html(report, pages, top=top), combined)
    if as_json:
        print_json(
            {
                "output": str(combined),
                "consistency": list(report.consistency),
                "ranks": [
                    {"rank": r.rank, "trace": r.path, "output": str(p), "findings": n, "graph_nodes": nodes}
                    for _, r, p, n, nodes in written
                ],
            }
        )
        return
    console = stdout_console()
    for _, result, path, shown, nodes in written:
        console.print(f"rank {result.rank}: wrote {terminal(path)}: {shown} findings, graph of {nodes} nodes")
    console.print(f"wrote {terminal(combined)}: {len(written)} ranks compared")
