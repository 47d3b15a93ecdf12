"""`kerneltrace graph`: draw the call graph of a trace's hot kernels (SVG, PNG, PDF, DOT, GraphML, JSON)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from tracer.cli.common import print_json, reports_input_errors, stdout_console

DRAWINGS = (".svg", ".png", ".pdf", ".dot")
GRAPH_FILES = (".graphml", ".json")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._+-]+")


@dataclass(frozen=True)
class TraceOptions:
    """How to analyse a trace: what `trace_options` collected, passed to `tracer.api.explain_trace`."""

    source: tuple[str, ...] = ()
    sites: str | None = None
    layers: int | None = None
    config: str | None = None
    step_range: str | None = None
    peak_gbps: float | None = None
    capture: tuple[str, ...] = ()


_OPTION_NAMES = tuple(TraceOptions.__dataclass_fields__)


def trace_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the options every trace-reading command shares; the command gets them as `options`."""

    @functools.wraps(func)
    def collected(*args: Any, **kwargs: Any) -> Any:
        options = TraceOptions(**{name: kwargs.pop(name) for name in _OPTION_NAMES})
        return func(*args, options=options, **kwargs)

    decorators = [
        click.option(
            "--source",
            "source",
            multiple=True,
            type=click.Path(exists=True, file_okay=True, dir_okay=True),
            help="Root of the code that ran (repeatable): finds source lines and scans for sites.",
        ),
        click.option(
            "--sites",
            type=click.Path(exists=True, dir_okay=False),
            help="Sites file from `kerneltrace scan`.",
        ),
        click.option(
            "--layers", type=click.IntRange(min=1), help="Number of model layers (explains calls/step)."
        ),
        click.option(
            "--config", type=click.Path(exists=True, dir_okay=False), help="Model config.json (layer count)."
        ),
        click.option("--step-range", help="Name (or prefix) of the record_function range that is one step."),
        click.option(
            "--peak-gbps", type=click.FloatRange(min=0, min_open=True), help="Device peak bandwidth, GB/s."
        ),
        click.option(
            "--capture",
            multiple=True,
            type=click.Path(exists=True, dir_okay=False),
            help="Trace of the profiled CUDA-graph capture, when TRACE holds only the replays (repeatable).",
        ),
    ]
    for decorator in reversed(decorators):
        collected = decorator(collected)
    return collected


def analyse(trace: str, options: TraceOptions):  # -> tracer.model.Analysis
    """The `Analysis` of `trace` through the one facade every command uses."""
    from tracer.api import explain_trace

    return explain_trace(
        trace,
        source=options.source,
        sites=options.sites,
        layers=options.layers,
        config=options.config,
        step_range=options.step_range,
        peak_gbps=options.peak_gbps,
        capture=options.capture or None,
    )


def derived_output(trace: str, suffix: str, directory: str | Path = ".") -> Path:
    """A default output name made from the trace's name: only safe characters, inside `directory`."""
    name = Path(trace).name
    for ending in (".gz", ".json", ".pt.trace"):
        if name.lower().endswith(ending):
            name = name[: -len(ending)]
    stem = _UNSAFE_NAME.sub("_", name).strip("._") or "trace"
    return Path(directory) / f"{stem}{suffix}"


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
