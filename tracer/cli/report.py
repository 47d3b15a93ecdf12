"""`kerneltrace report`: one self-contained HTML file with the findings, the call graph and each origin."""

from __future__ import annotations

from pathlib import Path

import click

from tracer.cli.common import print_json, reports_input_errors, stdout_console
from tracer.cli.options import TraceOptions, analyse, derived_output, trace_options


@click.command(name="report")
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@trace_options
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    help="HTML file to write [default: TRACE-NAME.report.html].",
)
@click.option(
    "--top", type=click.IntRange(min=1), default=20, show_default=True, help="Findings in the report."
)
@click.option(
    "--graph-top", type=click.IntRange(min=1), default=12, show_default=True, help="Findings drawn in full."
)
@click.option(
    "--min-share",
    type=click.FloatRange(min=0, max=100),
    default=0.5,
    show_default=True,
    help="Findings under this percent of GPU time fold into 'other' in the graph.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@reports_input_errors
def command(
    trace: str,
    options: TraceOptions,
    output: str | None,
    top: int,
    graph_top: int,
    min_share: float,
    as_json: bool,
) -> None:
    """Write an HTML report of TRACE: hot kernels, call graph, source around each origin.

    The file needs no network: CSS and the SVG graph are inline.
    """
    from tracer.graph import build_graph
    from tracer.render.escape import terminal
    from tracer.render.html import render_report, write_report

    analysis = analyse(trace, options)
    graph = build_graph(analysis, top=graph_top, min_share=min_share / 100)
    path = write_report(
        render_report(analysis, graph, source_roots=options.source, top=top),
        Path(output) if output else derived_output(trace, ".report.html"),
    )
    shown = min(top, len(analysis.findings))
    if as_json:
        print_json({"output": str(path), "findings": shown, "graph_nodes": graph.number_of_nodes()})
        return
    stdout_console().print(
        f"wrote {terminal(path)}: {shown} findings, graph of {graph.number_of_nodes()} nodes"
    )
