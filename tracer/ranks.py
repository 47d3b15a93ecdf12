"""The facade for a directory of per-rank traces: each rank explained (in local processes, or as Ray
tasks where the files live), combined and compared. `explain`, `graph`, `report` and `diff` call it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracer.engines import Outcome, RankJob
from tracer.errors import InputError
from tracer.explain.ranks import RankReport, RankTrace
from tracer.load.window import TraceWindow

WINDOW_MARGIN = 0.9  # of a task's memory a window may plan to use
GPU_TAIL_MS = 1000.0  # tracer.load.window.GPU_TAIL_NS: a window also keeps GPU events this long after it


def explain_ranks(directory: str | Path, **arguments: Any) -> RankReport:
    """Explain every rank's trace in `directory` and compare them (see `explain_rank_directory`)."""
    return explain_rank_directory(directory, **arguments)[0]


def explain_rank_directory(
    directory: str | Path, **arguments: Any
) -> tuple[RankReport, tuple[InputError, ...]]:
    """The `RankReport` of a directory of per-rank traces, and the `InputError` of each rank that
    could not be explained (left out of the report with a note; `RankFailures` when none could).
    The arguments are those of `explain_rank_directories`."""
    return explain_rank_directories([directory], **arguments)[0]


def explain_rank_directories(
    directories: Sequence[str | Path],
    *,
    select: str | None = None,
    workers: int | None = None,
    engine: str = "local",
    address: str | None = None,
    placement: str | Path | None = None,
    **explain_kwargs: Any,
) -> list[tuple[RankReport, tuple[InputError, ...]]]:
    """`explain_rank_directory` of each directory (``diff``'s BEFORE and AFTER), on one engine.

    `select`: only traces whose file name contains it. `explain_kwargs` go to
    `tracer.api.explain_trace` for every rank (source, sites, layers, config, step_range, peak_gbps,
    capture, window); a rank's capture traces are passed as ``capture`` unless given.
    `engine`: ``local`` (a process pool of `workers` on this machine) or ``ray`` (one task per rank
    on the cluster at `address`, else a new local one of `workers` CPUs, each task on the node that
    holds its file: the same directory path on every host, or the hosts a `placement` file names).
    Either way the report is the same, byte for byte.
    """
    if engine == "local":
        from tracer.engines.local import run_in_processes
        from tracer.explain.ranks import find_rank_traces

        out = []
        for directory in directories:
            found = find_rank_traces(Path(directory), select)
            jobs = _jobs(found, explain_kwargs)
            out.append(
                _explain(directory, found, jobs, lambda js: run_in_processes(explain_rank_job, js, workers))
            )
        return out
    if engine == "ray":
        from tracer.engines import ray as on_ray
        from tracer.explain.ranks.files import rank_traces_in

        manifest = on_ray.read_manifest(placement) if placement is not None else None
        out = []
        with on_ray.cluster(address, workers) as nodes:
            for directory in directories:
                listings = on_ray.list_on_hosts(directory, nodes)
                names = set(manifest or ()).union(*listings.values())
                if not names and not Path(directory).is_dir():
                    raise InputError(
                        directory, "not a directory of per-rank traces on any node of the Ray cluster"
                    )
                found = rank_traces_in(Path(directory), names, select)
                jobs = on_ray.place(_jobs(found, explain_kwargs), directory, listings, nodes, manifest)
                out.append(
                    _explain(
                        directory, found, jobs, lambda js: on_ray.run_on_ray(explain_rank_job, js, nodes)
                    )
                )
        return out
    raise InputError("--engine", f"unknown engine {engine!r}: use local or ray")


def _jobs(found: Sequence[RankTrace], explain_kwargs: dict[str, Any]) -> list[RankJob]:
    return [RankJob(str(t.path), tuple(str(p) for p in t.captures), explain_kwargs) for t in found]


def _explain(
    directory: str | Path,
    found: Sequence[RankTrace],
    jobs: list[RankJob],
    run: Callable[[list[RankJob]], list[Outcome]],
) -> tuple[RankReport, tuple[InputError, ...]]:
    """Run the jobs, explain again (same engine) the ranks that found their steps another way than
    most, and combine: one definition of a step on every rank."""
    from tracer.explain.ranks.consistency import step_methods_to_align
    from tracer.explain.ranks.report import rank_report

    outcomes = run(jobs)
    explained = [i for i, o in enumerate(outcomes) if not isinstance(o, InputError)]
    align = step_methods_to_align([outcomes[i] for i in explained]) if explained else {}
    if align:
        again_jobs = [
            replace(
                jobs[explained[p]],
                explain_kwargs={**jobs[explained[p]].explain_kwargs, "step_methods": (key,)},
            )
            for p, key in align.items()
        ]
        for position, again in zip(align, run(again_jobs)):
            if not isinstance(again, InputError) and again.analysis.steps:
                outcomes[explained[position]] = again
    return rank_report(directory, found, outcomes)


def explain_rank_job(job: RankJob, budget: int | None = None) -> Outcome:
    """One rank (the task every engine runs), or the `InputError` saying why not (returned, not
    raised: the others go on). Loads stay within `budget` bytes: a trace too big for it is explained
    in consecutive windows of its steps that each fit, combined (`windows_that_fit`), else in its
    first window that fits; a note says which."""
    from tracer.load.memory import memory_budget

    try:
        with memory_budget(budget):
            return _explain_rank(job)
    except InputError as err:
        return err
    except MemoryError:
        return InputError(
            job.path,
            "ran out of memory while explaining this trace: explain it alone, or a part of it (--steps)",
        )


def _explain_rank(job: RankJob):  # -> RankResult
    from tracer.api import explain_trace
    from tracer.explain.ranks.report import rank_result
    from tracer.load import load_trace

    kwargs = dict(job.explain_kwargs)
    if job.captures and kwargs.get("capture") is None:
        kwargs["capture"] = list(job.captures)
    window, note = kwargs.pop("window", None), None
    if window is None:
        windows = windows_that_fit(Path(job.path))
        if windows is not None:
            return _explain_in_windows(job, windows, kwargs)
        window, note = window_that_fits(Path(job.path))
    trace = load_trace(job.path, window)  # loaded here: the collectives are read from it too
    analysis = explain_trace(trace, **kwargs)
    if note:
        analysis = replace(analysis, notes=(*analysis.notes, note))
    return rank_result(job.path, trace, analysis)


def _explain_in_windows(job: RankJob, plan: tuple[list[TraceWindow], str], kwargs: dict[str, Any]):
    """A rank too big for its task, explained one window after another (one in memory at a time), its
    steps found the same way in each (ProfilerStep#N), the windows' results combined into one."""
    from tracer.api import explain_trace
    from tracer.explain.ranks.records import RankResult
    from tracer.explain.ranks.report import rank_result
    from tracer.explain.windows import combine_window_analyses
    from tracer.load import load_trace

    windows, note = plan
    kwargs = {**kwargs, "step_methods": kwargs.get("step_methods") or ("profiler",)}
    parts: list[RankResult] = []
    for window in windows:
        trace = load_trace(job.path, window)
        parts.append(rank_result(job.path, trace, explain_trace(trace, **kwargs)))
        del trace  # the next window loads only once this one is gone
    analysis, inexact = combine_window_analyses([p.analysis for p in parts])
    if inexact:
        note += "; not exact over the windows: " + ", ".join(inexact)
    collectives = tuple(
        sorted(set().union(*(p.collectives for p in parts)), key=lambda c: (c.start_ns, c.end_ns))
    )
    return replace(
        parts[0],
        analysis=replace(analysis, notes=(*analysis.notes, note)),
        collectives=collectives,
        collective_source=next((p.collective_source for p in parts if p.collective_source), ""),
    )


def windows_that_fit(path: Path) -> tuple[list[TraceWindow], str] | None:
    """None when the whole trace fits the memory available or it cannot be cut at its steps; else
    the consecutive windows, each ending where a ProfilerStep#N begins, whose loads each fit, and
    the note that says the rank was explained in them (and combined: the whole trace, every step)."""
    from tracer.explain.ranks.report import WINDOWED
    from tracer.load.memory import available_memory, estimated_peak, human, json_size_of
    from tracer.load.window_plan import step_windows

    available = available_memory()
    json_bytes = json_size_of(path)
    if available is None or json_bytes == 0 or estimated_peak(json_bytes) <= available:
        return None
    windows = step_windows(path, json_bytes, int(WINDOW_MARGIN * available))
    if windows is None or len(windows) < 2:
        return None
    cuts = ", ".join(f"{w.start_ms:.0f}:{w.end_ms:.0f}" for w in windows)
    note = (
        f"{WINDOWED} ({human(estimated_peak(json_bytes))} needed, {human(available)} there): "
        f"explained whole, in {len(windows)} consecutive windows of its ProfilerStep#N ranges "
        f"(--window {cuts} ms), combined"
    )
    return windows, note


def window_that_fits(path: Path) -> tuple[TraceWindow | None, str | None]:
    """(None, None) when the whole trace fits the memory available; else the leading time window
    whose load fits (``--window 0:END``) and the note that says so: only a part of the trace (for
    a trace `windows_that_fit` cannot cut at its steps). None too when no window would
    fit (the loader then refuses the trace in its one line)."""
    from tracer.explain.ranks.report import WINDOWED
    from tracer.load.memory import available_memory, estimated_peak, human, json_size_of
    from tracer.load.window import resolve_window

    available = available_memory()
    json_bytes = json_size_of(path)
    if available is None or json_bytes == 0 or estimated_peak(json_bytes) <= available:
        return None, None
    probe = resolve_window(path, TraceWindow(start_ms=0.0, end_ms=1.0))  # share = min(1001 ms, span) / span
    if probe.share >= 1.0 or probe.share <= 0.0:
        return None, None  # the whole trace lies within one window's GPU tail: no window is smaller
    span_ms = (1.0 + GPU_TAIL_MS) / probe.share
    target = WINDOW_MARGIN * available
    low, high = 0.0, 1.0  # the largest share of the trace whose load fits: estimated_peak grows with it
    for _ in range(30):
        middle = (low + high) / 2
        low, high = (middle, high) if estimated_peak(json_bytes, middle) <= target else (low, middle)
    keep_ms = low * span_ms  # the window and its GPU tail (the tail is max(window, 1 s))
    end_ms = keep_ms / 2 if keep_ms >= 2 * GPU_TAIL_MS else keep_ms - GPU_TAIL_MS
    if end_ms < 1:
        return None, None
    note = (
        f"{WINDOWED} ({human(estimated_peak(json_bytes))} needed, {human(available)} "
        f"there): explained its first {end_ms:.0f} ms of {span_ms:.0f} ms only (--window 0:{end_ms:.0f})"
    )
    return TraceWindow(start_ms=0.0, end_ms=round(end_ms)), note
