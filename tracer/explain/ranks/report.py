"""Each rank's outcome -> one `RankReport`: ranks named, failures noted, findings combined and compared."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tracer.errors import InputError
from tracer.explain.ranks.consistency import combine, consistency
from tracer.explain.ranks.files import RankTrace
from tracer.explain.ranks.records import Collective, RankReport, RankResult
from tracer.model.events import Cat, Trace
from tracer.model.finding import Analysis

WINDOWED = "too big for the memory of its task"  # the note of a rank explained in a window that fits
_COMM_KERNEL = re.compile(
    r"nccl|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all", re.IGNORECASE
)


class RankFailures(InputError):
    """No rank of a directory could be explained: `failures` names each file and its problem."""

    def __init__(self, directory: object, failures: tuple[InputError, ...]) -> None:
        self.failures = failures
        first = failures[0]
        super().__init__(
            directory,
            f"none of its {len(failures)} rank traces could be explained "
            f"(first: {os.path.basename(first.path)}: {first.problem})",
        )

    def __reduce__(self):
        return (type(self), (self.path, self.failures))


def rank_result(path: str | Path, trace: Trace, analysis: Analysis) -> RankResult:
    """One rank explained: its analysis (which carries its step spans) and its collectives, on the
    aligned clock (``baseTimeNanoseconds``)."""
    base = trace.meta.base_time_ns or 0
    collectives, source = _collectives(trace)
    return RankResult(
        rank=analysis.rank if analysis.rank is not None else -1,
        path=str(path),
        analysis=analysis,
        base_time_ns=trace.meta.base_time_ns,
        collectives=tuple(Collective(n, base + s, base + e) for n, s, e in collectives),
        collective_source=source,
    )


def rank_report(
    directory: str | Path, found: Sequence[RankTrace], outcomes: Sequence[RankResult | InputError]
) -> tuple[RankReport, tuple[InputError, ...]]:
    """The report of a directory from each found trace's outcome (same order), and the failures.

    The good ranks are compared whatever happened to the others; raises `RankFailures` when no rank
    could be explained."""
    failures = tuple(o for o in outcomes if isinstance(o, InputError))
    if len(failures) == len(outcomes):
        raise RankFailures(directory, failures)
    notes: list[str] = []
    ranked = []
    for index, (trace, result) in enumerate(zip(found, outcomes)):
        if isinstance(result, InputError):
            notes.append(f"{trace.path.name}: not explained: {result.problem}")
            continue
        rank = trace.rank if trace.rank is not None else result.analysis.rank
        if rank is None:
            rank = index
            notes.append(
                f"{trace.path.name}: no TP-<rank> in the name and no distributedInfo; called rank {index}"
            )
        elif trace.parts == f"TP-{trace.rank}" and result.analysis.rank not in (None, trace.rank):
            # With TP alone the global rank is the TP rank; DP/PP/EP ranks make them differ legitimately.
            notes.append(
                f"{trace.path.name}: the name says TP-{trace.rank}, distributedInfo says rank {result.analysis.rank}"
            )
        notes += [f"{trace.path.name}: {note}" for note in result.analysis.notes if note.startswith(WINDOWED)]
        ranked.append(replace(result, rank=rank))
    if len({r.rank for r in ranked}) < len(ranked):
        notes.append("several traces share a TP rank (DP/PP/EP ranks?): compared as separate entries")
    combined = combine(ranked)
    report = RankReport(
        str(directory), tuple(ranked), combined, tuple(consistency(ranked, combined)), tuple(notes)
    )
    return report, failures


def _collectives(trace: Trace) -> tuple[list[tuple[str, int, int]], str]:
    """Each collective call's (name, start, end), trace-relative: GPU communication kernels (their
    start is when this rank arrived; they end when all have), else gloo/nccl ranges, else c10d ops."""
    table = trace.events
    kernels, ranges, ops = [], [], []
    for row, cat in enumerate(table.cat):
        name = table.name[row]
        if cat == Cat.KERNEL and _COMM_KERNEL.search(name):
            kernels.append(row)
        elif cat == Cat.USER_ANNOTATION and name.startswith(("gloo:", "nccl:")):
            ranges.append(row)
        elif cat == Cat.CPU_OP and name.startswith("c10d::"):
            ops.append(row)
    for rows, source in ((kernels, "GPU kernels"), (ranges, "gloo:/nccl: ranges"), (ops, "c10d:: ops")):
        if rows:
            rows.sort(key=lambda r: table.ts_ns[r])
            return [(table.name[r], table.ts_ns[r], table.end_ns(r)) for r in rows], source
    return [], ""
