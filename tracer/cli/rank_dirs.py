"""What `graph`, `report` and `diff` share for a directory of per-rank traces: the option, the
analysis of every rank (`tracer.explain.ranks`, in parallel processes) and one output name per rank."""

from __future__ import annotations

from pathlib import Path

import click

from tracer.cli.options import TraceOptions, derived_output, protect_inputs

COMPOUND_SUFFIXES = (".report.html",)  # kept whole when a rank label goes before the suffix

ranks_match_option = click.option(
    "--ranks-match",
    metavar="TEXT",
    default=None,
    help="With a directory of per-rank traces: only the traces whose name contains TEXT (e.g. DECODE).",
)


def analyse_ranks(directory: str | Path, options: TraceOptions, select: str | None = None):
    """The `RankReport` of a directory of per-rank traces, analysed with the shared trace options.

    A rank that could not be explained is left out of the report; its one-line error is printed
    after the command's output (exit code 2): the good ranks are never lost to a bad one.
    """
    from tracer.cli.common import defer_input_errors
    from tracer.explain.ranks.workers import explain_rank_directory

    protect_inputs(directory, options)
    report, failures = explain_rank_directory(Path(directory), select=select, **options.explain_arguments())
    defer_input_errors(failures)
    return report


def base_output(output: str | None, directory: str | Path, suffix: str) -> Path:
    """The -o path, else one named after the directory (``tp2.svg`` for ``runs/tp2/``) in the cwd."""
    return Path(output) if output else derived_output(Path(directory).name or "ranks", suffix)


def rank_output(base: Path, label: str) -> Path:
    """``out-rank0.svg`` from ``out.svg`` and ``rank0``; ``r-rank1.report.html`` from ``r.report.html``."""
    name = base.name
    suffix = next((s for s in COMPOUND_SUFFIXES if name.endswith(s)), base.suffix)
    stem = name[: len(name) - len(suffix)] if suffix else name
    return base.with_name(f"{stem}-{label}{suffix}")
