"""`kerneltrace graph`: draw the call graph of a trace's hot kernels (SVG, PNG, PDF, DOT, GraphML, JSON)."""

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


def _print_written(console: Any, path: Path, graph: Any, prefix: str = "", indent: str = "") -> None:
    """``wrote PATH: N nodes, M edges`` and the hot path below it (terminal-safe)."""
    from tracer.render.escape import terminal

    console.print(
        f"{prefix}wrote {terminal(path)}: {graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges"
    )
    hot = hot_path_labels(graph)
    if hot:
        console.print(f"{indent}hot path: " + " → ".join(terminal(label) for label in hot[1:]))


@click.command(name="graph")
@click.argument("trace", type=click.Path(exists=True))
@trace_options
@output_option(
    "Output file; the suffix picks the format: .svg .png .pdf .dot .graphml .json [default: TRACE-NAME.svg]. "
    "For a directory: one file per rank, OUTPUT-rank<N>.svg."
)
@top_option(12, "Findings drawn in full.")
@min_share_option("Findings under this percent of GPU time fold into 'other'.")
@rank_options
@click.option("--json", "as_json", is_flag=True, help="Print the graph as node-link JSON on stdout.")
@reports_input_errors
def command(
    trace: str,
    options: TraceOptions,
    output: str | None,
    top: int,
    min_share: float,
    ranks: RankOptions,
    as_json: bool,
) -> None:
    """Draw where TRACE's GPU time comes from: scope -> Python -> source line -> aten ops -> kernel.

    The heaviest chain is drawn bold red; colours are kernel categories; edge width is GPU time.
    TRACE may be a directory of per-rank traces (SGLang's *-TP-<rank>*.trace.json.gz): each rank is
    analysed in parallel and drawn to its own file, NAME-rank<N>.svg.
    """
    from tracer.graph import build_graph, node_link

    def draw(analysis: Any) -> Any:
        return build_graph(analysis, top=top, min_share=min_share / 100)

    if Path(trace).is_dir():
        _graph_ranks(trace, options, ranks, draw, output, as_json)
        return
    graph = draw(analyse(trace, options))
    if as_json:
        if output:
            write_graph_file(graph, Path(output))
        print_json(node_link(graph))
        return
    path = write_graph_file(graph, Path(output) if output else derived_output(trace, ".svg"))
    _print_written(stdout_console(), path, graph)


def _graph_ranks(
    directory: str,
    options: TraceOptions,
    ranks: RankOptions,
    draw: Callable[[Any], Any],
    output: str | None,
    as_json: bool,
) -> None:
    """One graph per rank of a directory of per-rank traces, written to ``NAME-rank<N>.<suffix>``."""
    from tracer.graph import node_link
    from tracer.render.escape import terminal

    report = analyse_ranks(directory, options, ranks)
    base = base_output(output, directory, ".svg") if output or not as_json else None
    written = []
    for _, result, path in each_rank(report, base):
        graph = draw(result.analysis)
        written.append((result, write_graph_file(graph, path) if path else None, graph))
    if as_json:
        print_json(
            {
                "directory": report.directory,
                "ranks": [
                    {
                        "rank": r.rank,
                        "trace": r.path,
                        "output": str(path) if path else None,
                        "graph": node_link(graph),
                    }
                    for r, path, graph in written
                ],
                "notes": list(report.notes),
            }
        )
        return
    console = stdout_console()
    for result, path, graph in written:
        assert path is not None  # None only with --json, handled above
        _print_written(console, path, graph, prefix=f"rank {result.rank}: ", indent="  ")
    for note in report.notes:
        console.print(f"note: {terminal(note)}")
