"""What `graph`, `report` and `diff` share for a directory of per-rank traces: the option, the
analysis of every rank (`tracer.explain.ranks`, in parallel processes) and one output name per rank."""

from __future__ import annotations

from pathlib import Path

import click

from tracer.cli.options import TraceOptions, derived_output

COMPOUND_SUFFIXES = (".report.html",)  # kept whole when a rank label goes before the suffix

ranks_match_option = click.option(
    "--ranks-match",
    metavar="TEXT",
    default=None,
    help="With a directory of per-rank traces: only the traces whose name contains TEXT (e.g. DECODE).",
)


def analyse_ranks(directory: str | Path, options: TraceOptions, select: str | None = None):
    """The `RankReport` of a directory of per-rank traces, analysed with the shared trace options."""
    from tracer.explain.ranks import explain_ranks

    return explain_ranks(Path(directory), select=select, **options.explain_arguments())


def base_output(output: str | None, directory: str | Path, suffix: str) -> Path:
    """The -o path, else one named after the directory (``tp2.svg`` for ``runs/tp2/``) in the cwd."""
    return Path(output) if output else derived_output(Path(directory).name or "ranks", suffix)


def rank_output(base: Path, label: str) -> Path:
    """``out-rank0.svg`` from ``out.svg`` and ``rank0``; ``r-rank1.report.html`` from ``r.report.html``."""
    name = base.name
    suffix = next((s for s in COMPOUND_SUFFIXES if name.endswith(s)), base.suffix)
    stem = name[: len(name) - len(suffix)] if suffix else name
    return base.with_name(f"{stem}-{label}{suffix}")
