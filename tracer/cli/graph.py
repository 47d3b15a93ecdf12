"""`kerneltrace graph`: draw the call graph of a trace's hot kernels (SVG, PNG, PDF, DOT, GraphML, JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracer.cli.common import print_json, reports_input_errors, stdout_console
from tracer.cli.options import TraceOptions, analyse, derived_output, trace_options

DRAWINGS = (".svg", ".png", ".pdf", ".dot")
GRAPH_FILES = (".graphml", ".json")


def write_graph_file(graph: Any, output: Path) -> Path:
    """Draw (.svg .png .pdf .dot) or export (.graphml .json) `graph` by the output's suffix."""
    from tracer.errors import InputError

    suffix = output.suffix.lower()
    if suffix in DRAWINGS:
        from tracer.render.dot import render_graph

        return render_graph(graph, output)
    if suffix in GRAPH_FILES:
        from tracer.graph import write_graph

        return write_graph(graph, output)
    raise InputError(
        output, f"unknown output format {suffix or '(no suffix)'}: use {', '.join(DRAWINGS + GRAPH_FILES)}"
    )


def hot_path_labels(graph: Any) -> list[str]:
    return [str(graph.nodes[node].get("label", node)) for node in graph.graph.get("hot_path", [])]


@click.command(name="graph")
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@trace_options
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    help="Output file; the suffix picks the format: .svg .png .pdf .dot .graphml .json [default: TRACE-NAME.svg].",
)
@click.option(
    "--top", type=click.IntRange(min=1), default=12, show_default=True, help="Findings drawn in full."
)
@click.option(
    "--min-share",
    type=click.FloatRange(min=0, max=100),
    default=0.5,
    show_default=True,
    help="Findings under this percent of GPU time fold into 'other'.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the graph as node-link JSON on stdout.")
@reports_input_errors
def command(
    trace: str,
    options: TraceOptions,
    output: str | None,
    top: int,
    min_share: float,
    as_json: bool,
) -> None:
    """Draw where TRACE's GPU time comes from: scope -> Python -> source line -> aten ops -> kernel.

    The heaviest chain is drawn bold red; colours are kernel categories; edge width is GPU time.
    """
    from tracer.graph import build_graph, node_link

    analysis = analyse(trace, options)
    graph = build_graph(analysis, top=top, min_share=min_share / 100)
    if as_json:
        if output:
            write_graph_file(graph, Path(output))
        print_json(node_link(graph))
        return
    path = write_graph_file(graph, Path(output) if output else derived_output(trace, ".svg"))
    console = stdout_console()
    from tracer.render.escape import terminal

    console.print(f"wrote {terminal(path)}: {graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges")
    hot = hot_path_labels(graph)
    if hot:
        console.print("hot path: " + " → ".join(terminal(label) for label in hot[1:]))
