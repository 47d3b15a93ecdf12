"""`kerneltrace diff`: compare two traces (before/after a change) per origin and kernel."""

from __future__ import annotations

from pathlib import Path

import click

from tracer.cli.common import print_json, reports_input_errors, stdout_console
from tracer.cli.graph import write_graph_file
from tracer.cli.options import TraceOptions, analyse, trace_options
from tracer.cli.rank_dirs import analyse_ranks, rank_output, ranks_match_option
from tracer.render.diff_table import print_diff


@click.command(name="diff")
@click.argument("before", type=click.Path(exists=True))
@click.argument("after", type=click.Path(exists=True))
@trace_options
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    help=(
        "Also draw the graph coloured by change: .svg .png .pdf .dot .graphml .json. "
        "For directories: one per rank, OUTPUT-rank<N>.svg."
    ),
)
@click.option(
    "--top", type=click.IntRange(min=1), default=15, show_default=True, help="Origins listed and drawn."
)
@ranks_match_option
@click.option("--json", "as_json", is_flag=True, help="Print the whole diff as JSON.")
@reports_input_errors
def command(
    before: str,
    after: str,
    options: TraceOptions,
    output: str | None,
    top: int,
    ranks_match: str | None,
    as_json: bool,
) -> None:
    """Compare BEFORE and AFTER traces: GPU time and calls per step of every origin and kernel.

    Origins match by file:line, then by source text when lines moved; new and vanished ones are marked.
    BEFORE and AFTER may both be directories of per-rank traces: ranks pair by rank number
    (TP-<rank> in the names), and each pair is compared.
    """
    from tracer.explain.diff import diff_analyses

    if Path(before).is_dir() or Path(after).is_dir():
        _diff_ranks(before, after, options, output, top, ranks_match, as_json)
        return
    old = analyse(before, options)
    new = analyse(after, options)
    diff = diff_analyses(old, new)
    if output:
        from tracer.graph.diff import build_diff_graph

        write_graph_file(build_diff_graph(old, new, top=top), Path(output))
    if as_json:
        print_json(diff.to_dict())
        return
    print_diff(diff, top)
    if output:
        from tracer.render.escape import terminal

        stdout_console().print(f"wrote {terminal(output)}")


def _diff_ranks(
    before: str,
    after: str,
    options: TraceOptions,
    output: str | None,
    top: int,
    ranks_match: str | None,
    as_json: bool,
) -> None:
    """Two directories of per-rank traces: each rank's BEFORE against the same rank's AFTER."""
    from tracer.errors import InputError
    from tracer.explain.diff import diff_analyses
    from tracer.explain.ranks import pair_ranks
    from tracer.render.escape import terminal

    for path, other in ((before, after), (after, before)):
        if not Path(path).is_dir():
            raise InputError(
                path, f"not a directory, but {other} is: give two trace files or two directories"
            )
    old, new = analyse_ranks(before, options, ranks_match), analyse_ranks(after, options, ranks_match)
    pairs, notes = pair_ranks(old, new)
    if not pairs:
        raise InputError(after, f"no rank in common with {before} (ranks pair by their TP-<rank> number)")
    diffs = [(label, b, a, diff_analyses(b.analysis, a.analysis)) for label, b, a in pairs]
    outputs = {}
    if output:
        from tracer.graph.diff import build_diff_graph

        for label, b, a, _ in diffs:
            outputs[label] = write_graph_file(
                build_diff_graph(b.analysis, a.analysis, top=top), rank_output(Path(output), label)
            )
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
                        "output": str(outputs[label]) if label in outputs else None,
                        "diff": diff.to_dict(),
                    }
                    for label, b, a, diff in diffs
                ],
                "notes": notes,
            }
        )
        return
    console = stdout_console()
    for label, b, a, diff in diffs:
        console.print(
            f"[bold]rank {a.rank}[/]: {terminal(Path(b.path).name)} → {terminal(Path(a.path).name)}"
        )
        print_diff(diff, top)
        if label in outputs:
            console.print(f"wrote {terminal(outputs[label])}")
        console.print()
    for note in notes:
        console.print(f"note: {terminal(note)}")
