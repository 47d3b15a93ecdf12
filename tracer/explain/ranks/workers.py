"""Explain every rank's trace in its own process, with the aligned-clock times the comparison needs."""

from __future__ import annotations

import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracer.explain.ranks.consistency import combine, consistency, step_methods_to_align
from tracer.explain.ranks.files import find_rank_traces
from tracer.explain.ranks.records import Collective, RankReport, RankResult
from tracer.model.events import Cat, Trace

_COMM_KERNEL = re.compile(
    r"nccl|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all", re.IGNORECASE
)


def explain_ranks(
    directory: Path, *, select: str | None = None, workers: int | None = None, **explain_kwargs: Any
) -> RankReport:
    """Explain every rank's trace in `directory` (in parallel processes) and compare them.

    `select`: only traces whose file name contains it. `explain_kwargs` go to
    `tracer.api.explain_trace` for every rank (source, sites, layers, config, step_range,
    peak_gbps, window); a rank's capture traces are passed as ``capture`` unless given.
    """
    found = find_rank_traces(directory, select)
    notes: list[str] = []
    jobs = [(str(t.path), [str(p) for p in t.captures], explain_kwargs) for t in found]
    workers = max(1, min(workers or (os.cpu_count() or 1), len(jobs)))
    if workers == 1:
        results = [_explain_rank(*job) for job in jobs]
    else:
        import multiprocessing

        # fork where there is one: no re-import of the caller's __main__ (spawn would need a main
        # guard in every user script); the workers only parse JSON and run kerneltrace's own code.
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method)) as pool:
            results = list(pool.map(_explain_rank, *zip(*jobs)))
    for index, key in step_methods_to_align(results).items():  # one definition of a step on every rank
        path, captures, kwargs = jobs[index]
        again = _explain_rank(path, captures, {**kwargs, "step_methods": (key,)})
        if again.analysis.steps:
            results[index] = again
    ranked = []
    for index, (trace, result) in enumerate(zip(found, results)):
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
        ranked.append(replace(result, rank=rank))
    if len({r.rank for r in ranked}) < len(ranked):
        notes.append("several traces share a TP rank (DP/PP/EP ranks?): compared as separate entries")
    combined = combine(ranked)
    return RankReport(
        str(directory), tuple(ranked), combined, tuple(consistency(ranked, combined)), tuple(notes)
    )


def _explain_rank(path: str, captures: list[str], explain_kwargs: dict[str, Any]) -> RankResult:
    """One worker: load, explain (with its capture traces), and read the aligned-clock times."""
    from tracer.api import explain_trace
    from tracer.load import load_trace

    kwargs = dict(explain_kwargs)
    trace = load_trace(path, kwargs.pop("window", None))  # loaded here: the times below read it too
    if captures and kwargs.get("capture") is None:
        kwargs["capture"] = captures
    analysis = explain_trace(trace, **kwargs)
    base = trace.meta.base_time_ns or 0
    starts, ends = analysis.step_starts_ns, analysis.step_ends_ns  # the steps the analysis used
    collectives, source = _collectives(trace)
    return RankResult(
        rank=analysis.rank if analysis.rank is not None else -1,
        path=path,
        analysis=analysis,
        base_time_ns=trace.meta.base_time_ns,
        step_starts_ns=tuple(base + s for s in starts),
        step_ends_ns=tuple(base + e for e in ends),
        collectives=tuple(Collective(n, base + s, base + e) for n, s, e in collectives),
        collective_source=source,
    )


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
