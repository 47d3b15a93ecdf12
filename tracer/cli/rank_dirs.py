"""What `explain`, `graph`, `report` and `diff` share for a directory of per-rank traces: the options
(which traces, which engine), the analysis of every rank (`tracer.ranks`) and one output name per rank."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from tracer.cli.options import TraceOptions, derived_output, protect_inputs

COMPOUND_SUFFIXES = (".report.html",)  # kept whole when a rank label goes before the suffix


@dataclass(frozen=True)
class RankOptions:
    """Which traces of a directory, and where they are explained: what `rank_options` collected."""

    ranks_match: str | None = None
    engine: str = "local"
    address: str | None = None
    placement: str | None = None

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of `tracer.ranks.explain_rank_directory` these stand for."""
        return {
            "select": self.ranks_match,
            "engine": self.engine,
            "address": self.address,
            "placement": self.placement,
        }


_RANK_OPTION_NAMES = tuple(RankOptions.__dataclass_fields__)


def rank_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the options of a directory of per-rank traces; the command gets them as `ranks`."""

    @functools.wraps(func)
    def collected(*args: Any, **kwargs: Any) -> Any:
        ranks = RankOptions(**{name: kwargs.pop(name) for name in _RANK_OPTION_NAMES})
        if ranks.engine != "ray" and (ranks.address or ranks.placement):
            raise click.UsageError("--address and --placement go with --engine ray")
        return func(*args, ranks=ranks, **kwargs)

    decorators = [
        click.option(
            "--ranks-match",
            metavar="TEXT",
            default=None,
            help="With a directory of per-rank traces: only the traces whose name contains TEXT (e.g. DECODE).",
        ),
        click.option(
            "--engine",
            type=click.Choice(["local", "ray"]),
            default="local",
            show_default=True,
            help="With a directory: explain the ranks in processes on this machine, or as Ray tasks on "
            "the nodes that hold the files (pip install 'kerneltrace[ray]').",
        ),
        click.option(
            "--address",
            metavar="ADDR",
            default=None,
            help="With --engine ray: the cluster to join (HOST:PORT, ray://HOST:PORT, auto) [default: a new local one].",
        ),
        click.option(
            "--placement",
            type=click.Path(exists=True, dir_okay=False),
            default=None,
            help='With --engine ray: JSON {"<trace file>": "<host>"} saying which node holds each rank '
            "[default: each node lists the same directory path].",
        ),
    ]
    for decorator in reversed(decorators):
        collected = decorator(collected)
    return collected


def analyse_ranks(directory: str | Path, options: TraceOptions, ranks: RankOptions):  # -> RankReport
    """The `RankReport` of a directory of per-rank traces, analysed with the shared trace options."""
    return analyse_rank_directories([directory], options, ranks)[0]


def analyse_rank_directories(
    directories: Sequence[str | Path], options: TraceOptions, ranks: RankOptions
) -> list[Any]:  # -> list[RankReport]
    """`analyse_ranks` of each directory (``diff``'s two), on one engine (one Ray cluster for both).

    A rank that could not be explained is left out of its report; its one-line error is printed
    after the command's output (exit code 2): the good ranks are never lost to a bad one.
    """
    from tracer.cli.common import defer_input_errors
    from tracer.ranks import explain_rank_directories

    for directory in directories:
        protect_inputs(directory, options)
    done = explain_rank_directories(
        [Path(d) for d in directories], **ranks.arguments(), **options.explain_arguments()
    )
    for _, failures in done:
        defer_input_errors(failures)
    return [report for report, _ in done]


def each_rank(report: Any, base: Path | None) -> list[tuple[str, Any, Any]]:  # (str, RankResult, Path | None)
    """(label, rank result, its output file beside `base`: ``out-rank0.svg``) for every rank."""
    from tracer.explain.ranks import rank_labels

    return [
        (label, result, rank_output(base, label) if base is not None else None)
        for label, result in zip(rank_labels(report.ranks), report.ranks)
    ]


def base_output(output: str | None, directory: str | Path, suffix: str) -> Path:
    """The -o path, else one named after the directory (``tp2.svg`` for ``runs/tp2/``) in the cwd."""
    return Path(output) if output else derived_output(Path(directory).name or "ranks", suffix)


def rank_output(base: Path, label: str) -> Path:
    """``out-rank0.svg`` from ``out.svg`` and ``rank0``; ``r-rank1.report.html`` from ``r.report.html``."""
    name = base.name
    suffix = next((s for s in COMPOUND_SUFFIXES if name.endswith(s)), base.suffix)
    stem = name[: len(name) - len(suffix)] if suffix else name
    return base.with_name(f"{stem}-{label}{suffix}")
