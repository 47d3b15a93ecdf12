"""`kerneltrace diff`: compare two traces (before/after a change) per origin and kernel."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from tracer.cli.common import print_json, reports_input_errors
from tracer.cli.graph import write_graph_file
from tracer.cli.options import TraceOptions, analyse, output_option, top_option, trace_options
from tracer.cli.rank_dirs import RankOptions, analyse_rank_directories, rank_options, rank_output
from tracer.render.console import stdout_console
from tracer.render.diff_table import print_diff

if TYPE_CHECKING:
    from tracer.explain.diff import AnalysisDiff
    from tracer.model.finding import Analysis


@click.command(name="diff")
@click.argument("before", type=click.Path(exists=True))
@click.argument("after", type=click.Path(exists=True))
@trace_options
@output_option(
    "Also draw the graph coloured by change: .svg .png .pdf .dot .graphml .json. "
    "For directories: one per rank, OUTPUT-rank<N>.svg."
)
@top_option(15, "Origins listed and drawn.")
@rank_options
@click.option("--json", "as_json", is_flag=True, help="Print the whole diff as JSON.")
@reports_input_errors
def command(
    before: str,
    after: str,
    options: TraceOptions,
    output: str | None,
    top: int,
    ranks: RankOptions,
    as_json: bool,
) -> None:
    """Compare BEFORE and AFTER traces: GPU time and calls per step of every origin and kernel.

    Origins match by file:line, then by source text when lines moved; new and vanished ones are marked.
    BEFORE and AFTER may both be directories of per-rank traces: ranks pair by rank number
    (TP-<rank> in the names), and each pair is compared.
    """
    if Path(before).is_dir() or Path(after).is_dir():
        _diff_ranks(before, after, options, ranks, top, output, as_json)
        return
    old, new = analyse(before, options), analyse(after, options)
    diff, drawn = _compare(old, new, top, Path(output) if output else None)
    if as_json:
        print_json(diff.to_dict())
        return
    _print_compared(diff, top, drawn)


def _compare(
    old: Analysis, new: Analysis, top: int, drawing: Path | None
) -> tuple[AnalysisDiff, Path | None]:
    """The diff of two analyses, and the graph coloured by change drawn to `drawing` when given."""
    from tracer.explain.diff import diff_analyses

    diff = diff_analyses(old, new)
    if drawing is None:
        return diff, None
    from tracer.graph.diff import build_diff_graph

    return diff, write_graph_file(build_diff_graph(old, new, top=top), drawing)


def _print_compared(diff: AnalysisDiff, top: int, drawn: Path | None) -> None:
    """The diff table, and the drawing's path when one was written."""
    print_diff(diff, top)
    if drawn is not None:
        from tracer.render.escape import terminal

        stdout_console().print(f"wrote {terminal(drawn)}")


def _diff_ranks(
    before: str,
    after: str,
    options: TraceOptions,
    ranks: RankOptions,
    top: int,
    output: str | None,
    as_json: bool,
) -> None:
    """Two directories of per-rank traces: each rank's BEFORE against the same rank's AFTER."""
    from tracer.errors import InputError
    from tracer.explain.ranks import pair_ranks
    from tracer.render.escape import terminal

    for path, other in ((before, after), (after, before)):
        if not Path(path).is_dir():
            raise InputError(
                path, f"not a directory, but {other} is: give two trace files or two directories"
            )
    old, new = analyse_rank_directories([before, after], options, ranks)
    pairs, notes = pair_ranks(old, new)
    if not pairs:
        raise InputError(after, f"no rank in common with {before} (ranks pair by their TP-<rank> number)")
    diffs = [
        (b, a, *_compare(b.analysis, a.analysis, top, rank_output(Path(output), label) if output else None))
        for label, b, a in pairs
    ]
    if as_json:
        print_json(
            {
                "before": old.directory,
                "after": new.directory,
                "ranks": [
                    {
                        "rank": a.rank,
                        "before": b.path,
                        "after": a.path,
                        "output": str(drawn) if drawn else None,
                        "diff": diff.to_dict(),
                    }
                    for b, a, diff, drawn in diffs
                ],
                "notes": notes,
            }
        )
        return
    console = stdout_console()
    for b, a, diff, drawn in diffs:
        console.print(
            f"[bold]rank {a.rank}[/]: {terminal(Path(b.path).name)} → {terminal(Path(a.path).name)}"
        )
        _print_compared(diff, top, drawn)
        console.print()
    for note in notes:
        console.print(f"note: {terminal(note)}")
