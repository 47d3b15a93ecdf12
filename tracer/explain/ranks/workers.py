"""Explain every rank's trace in its own process, with the aligned-clock times the comparison needs."""

from __future__ import annotations

import os
import re
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracer.errors import InputError
from tracer.explain.ranks.consistency import combine, consistency, step_methods_to_align
from tracer.explain.ranks.files import find_rank_traces
from tracer.explain.ranks.records import Collective, RankReport, RankResult
from tracer.model.events import Cat, Trace

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


def explain_ranks(
    directory: Path, *, select: str | None = None, workers: int | None = None, **explain_kwargs: Any
) -> RankReport:
    """Explain every rank's trace in `directory` (in parallel processes) and compare them.

    `select`: only traces whose file name contains it. `explain_kwargs` go to
    `tracer.api.explain_trace` for every rank (source, sites, layers, config, step_range,
    peak_gbps, window); a rank's capture traces are passed as ``capture`` unless given. A rank that
    cannot be explained (a bad or too big file) is left out with a note; see `explain_rank_directory`.
    """
    return explain_rank_directory(directory, select=select, workers=workers, **explain_kwargs)[0]


def explain_rank_directory(
    directory: Path, *, select: str | None = None, workers: int | None = None, **explain_kwargs: Any
) -> tuple[RankReport, tuple[InputError, ...]]:
    """`explain_ranks`, and the `InputError` of each rank trace that could not be explained.

    The good ranks are explained and compared whatever happens to the others; raises `RankFailures`
    when no rank could be explained.
    """
    found = find_rank_traces(directory, select)
    notes: list[str] = []
    jobs = [(str(t.path), [str(p) for p in t.captures], explain_kwargs) for t in found]
    outcomes = _run_ranks(jobs, workers)
    failures = tuple(o for o in outcomes if isinstance(o, InputError))
    if len(failures) == len(outcomes):
        raise RankFailures(directory, failures)
    # One definition of a step on every rank: ranks that found theirs another way are explained again.
    explained = [i for i, o in enumerate(outcomes) if not isinstance(o, InputError)]
    results = [o for o in outcomes if not isinstance(o, InputError)]  # those of `explained`
    for position, key in step_methods_to_align(results).items():
        path, captures, kwargs = jobs[explained[position]]
        again = _explain_rank_or_error(path, captures, {**kwargs, "step_methods": (key,)})
        if not isinstance(again, InputError) and again.analysis.steps:
            outcomes[explained[position]] = again
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
        ranked.append(replace(result, rank=rank))
    if len({r.rank for r in ranked}) < len(ranked):
        notes.append("several traces share a TP rank (DP/PP/EP ranks?): compared as separate entries")
    combined = combine(ranked)
    report = RankReport(
        str(directory), tuple(ranked), combined, tuple(consistency(ranked, combined)), tuple(notes)
    )
    return report, failures


Job = tuple[str, list[str], dict[str, Any]]


def _run_ranks(jobs: list[Job], workers: int | None) -> list[RankResult | InputError]:
    """Each job's result or its `InputError`, in job order. Ranks run in parallel processes, as
    many as the memory allows (each gets an equal share of it as its budget); a process that dies
    (killed for memory) costs only its own rank: the unfinished ones are run again one by one."""
    from tracer.load.memory import available_memory, estimated_peak, json_size_of

    workers = max(1, min(workers or (os.cpu_count() or 1), len(jobs)))
    budget = available_memory()
    if budget is not None and workers > 1:
        # Parallel only as far as the biggest ranks fit side by side.
        needs = sorted((estimated_peak(json_size_of(Path(path))) for path, _, _ in jobs), reverse=True)
        while workers > 1 and sum(needs[:workers]) > budget:
            workers -= 1
    if workers == 1:
        return [_explain_rank_or_error(*job) for job in jobs]
    share = budget // workers if budget is not None else None
    outcomes: list[RankResult | InputError | None] = [None] * len(jobs)
    try:
        with _pool(workers) as pool:
            futures = [pool.submit(_explain_rank_or_error, *job, share) for job in jobs]
            for index, future in enumerate(futures):
                outcomes[index] = future.result()
    except BrokenProcessPool:
        pass  # a worker died: the ranks without an outcome are run again, each in its own process
    for index, job in enumerate(jobs):
        if outcomes[index] is None:
            outcomes[index] = _in_own_process(job, share)
    return outcomes  # type: ignore[return-value]


def _pool(workers: int) -> ProcessPoolExecutor:
    import multiprocessing

    # fork where there is one: no re-import of the caller's __main__ (spawn would need a main
    # guard in every user script); the workers only parse JSON and run kerneltrace's own code.
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method))


def _in_own_process(job: Job, budget: int | None) -> RankResult | InputError:
    try:
        with _pool(1) as pool:
            return pool.submit(_explain_rank_or_error, *job, budget).result()
    except BrokenProcessPool:
        return InputError(
            job[0], "the process explaining this trace died (killed by the system: out of memory?)"
        )


def _explain_rank_or_error(
    path: str, captures: list[str], explain_kwargs: dict[str, Any], budget: int | None = None
) -> RankResult | InputError:
    """One rank, or the `InputError` saying why not (returned, not raised: the others go on)."""
    from tracer.load.memory import memory_budget

    try:
        with memory_budget(budget):
            return _explain_rank(path, captures, explain_kwargs)
    except InputError as err:
        return err
    except MemoryError:
        return InputError(
            path, "ran out of memory while explaining this trace: explain it alone, or a part of it (--steps)"
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
