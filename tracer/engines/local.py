"""The local engine: ranks in parallel processes on this machine, as many as its memory allows."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from tracer.engines.job import Outcome, RankJob, RankTask, failed


def run_in_processes(task: RankTask, jobs: Sequence[RankJob], workers: int | None = None) -> list[Outcome]:
    """Each job's outcome, in job order. Ranks run in parallel processes, as many as the memory
    allows (each gets an equal share of it as its budget); a process that dies (killed for memory)
    costs only its own rank: the unfinished ones are run again one by one."""
    from tracer.load.memory import available_memory, estimated_peak, json_size_of

    if not jobs:
        return []
    workers = max(1, min(workers or (os.cpu_count() or 1), len(jobs)))
    budget = available_memory()
    if budget is not None and workers > 1:
        # Parallel only as far as the biggest ranks fit side by side.
        needs = sorted((estimated_peak(json_size_of(Path(job.path))) for job in jobs), reverse=True)
        while workers > 1 and sum(needs[:workers]) > budget:
            workers -= 1
    if workers == 1:
        return [task(job, None) for job in jobs]
    share = budget // workers if budget is not None else None
    outcomes: list[Outcome | None] = [None] * len(jobs)
    try:
        with _pool(workers) as pool:
            futures = [pool.submit(task, job, share) for job in jobs]
            for index, future in enumerate(futures):
                outcomes[index] = future.result()
    except BrokenProcessPool:
        pass  # a worker died: the ranks without an outcome are run again, each in its own process
    for index, job in enumerate(jobs):
        if outcomes[index] is None:
            outcomes[index] = _in_own_process(task, job, share)
    return outcomes


def _pool(workers: int) -> ProcessPoolExecutor:
    import multiprocessing

    # fork where there is one: no re-import of the caller's __main__ (spawn would need a main
    # guard in every user script); the workers only parse JSON and run kerneltrace's own code.
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method))


def _in_own_process(task: RankTask, job: RankJob, budget: int | None) -> Outcome:
    try:
        with _pool(1) as pool:
            return pool.submit(task, job, budget).result()
    except BrokenProcessPool:
        return failed(job, "the process explaining this trace died (killed by the system: out of memory?)")
