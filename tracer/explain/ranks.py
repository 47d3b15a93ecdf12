"""A directory of per-rank traces -> each rank explained (in parallel processes), combined, compared.

SGLang writes one trace per tensor-parallel rank into ``SGLANG_TORCH_PROFILER_DIR``, named
``[prefix-]<profile id>-TP-<rank>[-DP-<r>][-PP-<r>][-EP-<r>][-<STAGE>].trace.json.gz``
(``sglang/srt/utils/profile_utils.py``), and CUDA-graph capture traces under
``graph_capture_profile/`` (``cuda_graph_capture-<runner>-TP-<rank>.json.gz``). Each rank is explained
on its own (`tracer.api.explain_loaded`), its capture trace (if any) attached; clocks are aligned by
``baseTimeNanoseconds``; findings are keyed by (kernel, origin) across ranks; and the report says in
words whether the ranks agree: same hot origin, same calls per step, and which rank is slower, where.
"""

from __future__ import annotations

import os
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tracer.errors import InputError
from tracer.model.events import Cat, Trace
from tracer.model.finding import Analysis, Finding

TRACE_SUFFIXES = (".json", ".json.gz")
CAPTURE_DIR = "graph_capture_profile"  # SGLang's graph_capture_profile_dir()
CAPTURE_PREFIX = "cuda_graph_capture-"
_RANK_PARTS = re.compile(r"(?:^|[-_.])(?P<kind>TP|DP|PP|EP)-(?P<rank>\d+)")
_CAPTURE_RANK = re.compile(r"(?:TP-|_rank)(?P<rank>\d+)\.json(?:\.gz)?$")
_COMM_KERNEL = re.compile(
    r"nccl|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all", re.IGNORECASE
)

SLOWER_BY = 0.10  # a rank whose own work per step exceeds the fastest's by this much is "slower"
TOP_COMPARED = 5  # findings whose calls/step are compared across ranks


@dataclass(frozen=True)
class RankTrace:
    """One rank's trace file, its rank (from the name: ``TP-<n>``) and capture traces found for it."""

    path: Path
    rank: int | None
    parts: str  # "TP-1", "TP-0-DP-1": the rank labels in the name
    set_key: str  # the name with the rank numbers blanked: files of one profiling run share it
    captures: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Collective:
    """One collective call on one rank, on the aligned clock (ns since the Unix epoch)."""

    name: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class RankResult:
    """One rank explained, with the times the cross-rank comparison needs (aligned clocks)."""

    rank: int
    path: str
    analysis: Analysis
    base_time_ns: int | None
    step_starts_ns: tuple[int, ...] = ()  # absolute
    step_ends_ns: tuple[int, ...] = ()
    collectives: tuple[Collective, ...] = ()
    collective_source: str = ""  # "GPU kernels", "gloo:/nccl: ranges", "c10d:: ops", ""

    @property
    def steps(self) -> int:
        return self.analysis.steps or 1

    @property
    def comm_ns(self) -> int:
        return sum(f.total_ns for f in self.analysis.findings if f.category == "communication")

    @property
    def own_work_per_step_ns(self) -> float:
        """Time of everything but communication (which includes waiting for the other ranks), per step."""
        return (self.analysis.total_ns - self.comm_ns) / self.steps

    @property
    def collective_ns(self) -> int:
        return sum(c.end_ns - c.start_ns for c in self.collectives)


@dataclass(frozen=True)
class RankFigure:
    """One finding's numbers on one rank."""

    rank: int
    calls: int
    total_ns: int
    per_step_ns: float
    calls_per_step: float | None
    share: float


@dataclass(frozen=True)
class CombinedFinding:
    """The same (kernel, origin) across ranks."""

    kernel: str
    kernel_short: str
    category: str
    origin_key: str
    location: str
    source: str | None
    total_ns: int  # over all ranks
    share: float  # of all ranks' time
    ranks: tuple[RankFigure, ...]


@dataclass(frozen=True)
class RankReport:
    """Per rank, combined, and the cross-rank consistency in words."""

    directory: str
    ranks: tuple[RankResult, ...]
    combined: tuple[CombinedFinding, ...]
    consistency: tuple[str, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "ranks": [
                {
                    "rank": r.rank,
                    "path": r.path,
                    "base_time_ns": r.base_time_ns,
                    "own_work_per_step_ns": r.own_work_per_step_ns,
                    "collective_ns": r.collective_ns,
                    "collective_calls": len(r.collectives),
                    "collective_source": r.collective_source,
                    "step_starts_ns": list(r.step_starts_ns),
                    "analysis": r.analysis.to_dict(),
                }
                for r in self.ranks
            ],
            "combined": [asdict(c) for c in self.combined],
            "consistency": list(self.consistency),
            "notes": list(self.notes),
        }


# -- finding the traces -----------------------------------------------------------------------------
def find_rank_traces(directory: Path, select: str | None = None) -> list[RankTrace]:
    """The per-rank traces of `directory` (one profiling run), with their capture traces attached.

    `select` keeps only the files whose name contains it (a stage such as ``DECODE``, a profile id).
    Raises `InputError` when there is none, or when several runs' (or stages') traces are mixed.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(directory, "not a directory of per-rank traces")
    traces = [
        p
        for p in sorted(directory.iterdir())
        if p.is_file()
        and p.name.endswith(TRACE_SUFFIXES)
        and not p.name.startswith(("merged-", CAPTURE_PREFIX))
        and (select is None or select in p.name)
    ]
    found = []
    for path in traces:
        parts = [(m["kind"], int(m["rank"])) for m in _RANK_PARTS.finditer(path.name)]
        rank = next((r for kind, r in parts if kind == "TP"), None)
        labels = "-".join(f"{kind}-{r}" for kind, r in parts)
        found.append(RankTrace(path, rank, labels, _RANK_PARTS.sub(lambda m: f"-{m['kind']}-*", path.name)))
    if not found:
        wanted = f" with {select!r} in the name" if select else ""
        raise InputError(directory, f"no profiler traces (*.json, *.json.gz){wanted} in this directory")
    sets = sorted({t.set_key for t in found})
    if len(sets) > 1 and any(t.rank is not None for t in found):
        ranked = {t.set_key for t in found if t.rank is not None}
        if len(ranked) > 1:
            raise InputError(
                directory,
                f"{len(ranked)} profiling runs or stages mixed here ({', '.join(sorted(ranked))}): "
                "pick one with --ranks-match TEXT (part of its file names, e.g. DECODE)",
            )
        found = [t for t in found if t.rank is not None]
    captures = _capture_traces(directory)
    return [
        RankTrace(t.path, t.rank, t.parts, t.set_key, tuple(captures.get(t.rank, ())))
        for t in sorted(found, key=lambda t: (t.rank is None, t.rank, t.parts, t.path.name))
    ]


def _capture_traces(directory: Path) -> dict[int | None, list[Path]]:
    """SGLang's CUDA-graph capture traces per TP rank (``graph_capture_profile/`` or beside the traces)."""
    out: dict[int | None, list[Path]] = defaultdict(list)
    for folder in (directory / CAPTURE_DIR, directory):
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if not path.name.endswith(TRACE_SUFFIXES) or (
                folder == directory and not path.name.startswith(CAPTURE_PREFIX)
            ):
                continue
            match = _CAPTURE_RANK.search(path.name)
            if match:
                out[int(match["rank"])].append(path)
    return out


# -- explaining ranks in parallel -------------------------------------------------------------------
def explain_ranks(
    directory: Path, *, select: str | None = None, workers: int | None = None, **explain_kwargs: Any
) -> RankReport:
    """Explain every rank's trace in `directory` (in parallel processes) and compare them.

    `select`: only traces whose file name contains it. `explain_kwargs` go to
    `tracer.api.explain_loaded` for every rank (source, sites, layers, config, step_range,
    peak_gbps), but ``window`` goes to `load_trace`; a rank's capture traces are passed as ``capture``
    unless given.
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
        ranked.append(_with_rank(result, rank))
    if len({r.rank for r in ranked}) < len(ranked):
        notes.append("several traces share a TP rank (DP/PP/EP ranks?): compared as separate entries")
    combined = combine(ranked)
    return RankReport(
        str(directory), tuple(ranked), combined, tuple(consistency(ranked, combined)), tuple(notes)
    )


def _with_rank(result: RankResult, rank: int) -> RankResult:
    from dataclasses import replace

    return replace(result, rank=rank)


def _explain_rank(path: str, captures: list[str], explain_kwargs: dict[str, Any]) -> RankResult:
    """One worker: load, explain (with its capture traces), and read the aligned-clock times."""
    from tracer.api import explain_loaded
    from tracer.load import load_trace

    kwargs = dict(explain_kwargs)
    trace = load_trace(path, kwargs.pop("window", None))
    if captures and kwargs.get("capture") is None:
        kwargs["capture"] = captures
    analysis = explain_loaded(trace, **kwargs)
    base = trace.meta.base_time_ns or 0
    starts, ends = _step_spans(trace, kwargs.get("step_range"))
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


def _step_spans(trace: Trace, step_range: str | None) -> tuple[list[int], list[int]]:
    from tracer.explain.steps import find_steps

    try:
        steps = find_steps(trace, step_range=step_range)  # markers only: no GPU sequence given
    except InputError:
        return [], []
    if steps is None:
        return [], []
    return list(steps.starts_ns), list(steps.ends_ns)


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


def rank_labels(results: Sequence[RankResult]) -> list[str]:
    """``rank0``, ``rank1``, ... per result; ranks that several traces share (DP/PP/EP) get ``-1``, ``-2``."""
    counts: dict[int, int] = defaultdict(int)
    for r in results:
        counts[r.rank] += 1
    seen: dict[int, int] = defaultdict(int)
    labels = []
    for r in results:
        seen[r.rank] += 1
        labels.append(f"rank{r.rank}" + (f"-{seen[r.rank]}" if counts[r.rank] > 1 else ""))
    return labels


def pair_ranks(
    before: RankReport, after: RankReport
) -> tuple[list[tuple[str, RankResult, RankResult]], list[str]]:
    """(label, before, after) for every rank both directories hold, paired by rank number (not by
    file order or name); and a note per rank found on one side only."""
    old = dict(zip(rank_labels(before.ranks), before.ranks))
    new = dict(zip(rank_labels(after.ranks), after.ranks))
    pairs = [(label, old[label], new[label]) for label in old if label in new]
    notes = [f"{label} is only in {before.directory} (BEFORE)" for label in old if label not in new]
    notes += [f"{label} is only in {after.directory} (AFTER)" for label in new if label not in old]
    return pairs, notes


# -- combining and comparing ------------------------------------------------------------------------
def combine(results: Sequence[RankResult]) -> tuple[CombinedFinding, ...]:
    """Findings keyed by (kernel, origin key) across ranks, biggest total first."""
    grand_total = sum(r.analysis.total_ns for r in results) or 1
    by_key: dict[tuple[str, str], list[tuple[RankResult, Finding]]] = defaultdict(list)
    for result in results:
        for finding in result.analysis.findings:
            by_key[(finding.kernel, finding.origin.key)].append((result, finding))
    out = []
    for (kernel, key), pairs in by_key.items():
        first = pairs[0][1]
        figures = tuple(
            RankFigure(r.rank, f.calls, f.total_ns, f.total_ns / r.steps, f.calls_per_step, f.share)
            for r, f in sorted(pairs, key=lambda p: p[0].rank)
        )
        total = sum(f.total_ns for _, f in pairs)
        out.append(
            CombinedFinding(
                kernel,
                first.kernel_short,
                first.category,
                key,
                first.origin.location,
                first.origin.source,
                total,
                total / grand_total,
                figures,
            )
        )
    out.sort(key=lambda c: (-c.total_ns, c.kernel_short, c.origin_key))
    return tuple(out)


def consistency(results: Sequence[RankResult], combined: Sequence[CombinedFinding]) -> list[str]:
    """Whether the ranks agree, in words: hot origin, calls per step, a slower rank and where, clocks."""
    if len(results) < 2:
        return ["one rank only: nothing to compare"]
    names = {r.rank: f"rank {r.rank}" for r in results}
    lines = [_hot_origin(results, names), *_calls_per_step(results, combined, names)]
    lines.extend(_slower_rank(results, combined, names))
    lines.extend(_clocks(results, names))
    return lines


def finding_label(finding: Finding | CombinedFinding) -> str:
    """``file.py:209 (kernel)``: a finding named by its line (else its origin key) and short kernel name."""
    location = finding.origin.location if isinstance(finding, Finding) else finding.location
    key = finding.origin.key if isinstance(finding, Finding) else finding.origin_key
    where = location if location not in ("?", None) and ":" in location else key
    return f"{where} ({finding.kernel_short})"


def _hot_origin(results: Sequence[RankResult], names: dict[int, str]) -> str:
    tops = {r.rank: r.analysis.findings[0] for r in results if r.analysis.findings}
    if not tops:
        return "no findings on any rank"
    keys = {(f.kernel, f.origin.key) for f in tops.values()}
    if len(keys) == 1 and len(tops) == len(results):
        top = next(iter(tops.values()))
        shares = ", ".join(f"{tops[r].share:.0%}" for r in sorted(tops))
        return (
            f"same hot origin on all {len(results)} ranks: {finding_label(top)}, {shares} of each rank's time"
        )
    parts = "; ".join(f"{names[r]}: {finding_label(f)} {f.share:.0%}" for r, f in sorted(tops.items()))
    return f"the hot origin differs between ranks: {parts}"


def _calls_per_step(results, combined, names) -> list[str]:
    compared = [c for c in combined if len(c.ranks) == len(results)][:TOP_COMPARED]
    differing = []
    for c in compared:
        values = {f.rank: f.calls_per_step for f in c.ranks}
        known = [v for v in values.values() if v is not None]
        if known and max(known) - min(known) > 1e-6 * max(1.0, max(known)):
            per_rank = ", ".join(f"{v:g} on {names[r]}" for r, v in sorted(values.items()) if v is not None)
            differing.append(f"calls/step differ for {finding_label(c)}: {per_rank}")
    missing = [c for c in combined[:TOP_COMPARED] if len(c.ranks) < len(results)]
    for c in missing:
        present = ", ".join(names[f.rank] for f in c.ranks)
        differing.append(f"{finding_label(c)} runs on {present} only")
    if differing:
        return differing
    if not compared:
        return ["no finding appears on every rank"]
    counts = ", ".join(
        f"{c.ranks[0].calls_per_step:g}" if c.ranks[0].calls_per_step is not None else "?" for c in compared
    )
    return [f"same calls/step on all ranks for the top {len(compared)} findings ({counts})"]


def _slower_rank(results, combined, names) -> list[str]:
    work = {r.rank: r.own_work_per_step_ns for r in results}
    fastest = min(work, key=work.get)
    slowest = max(work, key=work.get)
    unit = "step" if all(r.analysis.steps for r in results) else "trace"
    if work[fastest] <= 0 or work[slowest] <= work[fastest] * (1 + SLOWER_BY):
        spread = (work[slowest] / work[fastest] - 1) if work[fastest] > 0 else 0.0
        return [
            f"no rank is slower: own work per {unit} within {spread:.0%} across ranks (communication excluded)"
        ]
    line = (
        f"{names[slowest]} is slower: {work[slowest] / 1e6:.3f} ms of its own work per {unit} against "
        f"{work[fastest] / 1e6:.3f} ms on {names[fastest]} (x{work[slowest] / work[fastest]:.2f}, communication excluded)"
    )
    gaps = []
    for c in combined:
        if c.category == "communication":
            continue
        per = {f.rank: f.per_step_ns for f in c.ranks}
        gaps.append((per.get(slowest, 0.0) - per.get(fastest, 0.0), c))
    gaps.sort(key=lambda g: -g[0])
    lines = [line]
    if gaps and gaps[0][0] > 0:
        gap, c = gaps[0]
        per = {f.rank: f.per_step_ns for f in c.ranks}
        total_gap = work[slowest] - work[fastest]
        lines.append(
            f"{names[slowest]} is slower in {finding_label(c)}: {per.get(slowest, 0) / 1e6:.3f} ms per {unit} against "
            f"{per.get(fastest, 0) / 1e6:.3f} ms on {names[fastest]} ({gap / total_gap:.0%} of the difference)"
        )
    waits = {r.rank: r.collective_ns for r in results if r.collectives}
    if len(waits) == len(results) and waits[fastest] > waits[slowest]:
        lines.append(
            f"the other ranks wait for {names[slowest]} in collectives: {waits[fastest] / 1e6:.3f} ms in them on "
            f"{names[fastest]} against {waits[slowest] / 1e6:.3f} ms on {names[slowest]}"
        )
    return lines


def _clocks(results: Sequence[RankResult], names: dict[int, str]) -> list[str]:
    """Aligned clocks (baseTimeNanoseconds + ts): who arrives last at collectives, step-start skew."""
    lines = []
    if any(r.base_time_ns is None for r in results):
        lines.append("some traces lack baseTimeNanoseconds: clocks not aligned, no arrival times compared")
        return lines
    counts = {len(r.collectives) for r in results}
    if len(counts) == 1 and counts != {0}:
        calls = counts.pop()
        lateness: dict[int, list[int]] = defaultdict(list)
        end_spread = []
        for k in range(calls):
            starts = {r.rank: r.collectives[k].start_ns for r in results}
            ends = [r.collectives[k].end_ns for r in results]
            first = min(starts.values())
            for rank, start in starts.items():
                lateness[rank].append(start - first)
            end_spread.append(max(ends) - min(ends))
        median_late = {rank: statistics.median(v) for rank, v in lateness.items()}
        last = max(median_late, key=median_late.get)
        source = results[0].collective_source
        lines.append(
            f"{names[last]} arrives last at the {calls} collectives ({source}): median "
            f"{median_late[last] / 1e6:.3f} ms after the first rank; they end within "
            f"{statistics.median(end_spread) / 1e3:.1f} us of each other (median), clocks aligned by baseTimeNanoseconds"
        )
    elif len(counts) > 1:
        per = ", ".join(f"{len(r.collectives)} on {names[r.rank]}" for r in results)
        lines.append(f"collective calls differ between ranks ({per}): arrival times not compared")
    stepped = [r for r in results if r.step_starts_ns]
    if len(stepped) == len(results):
        n = min(len(r.step_starts_ns) for r in stepped)
        skew = max(
            max(r.step_starts_ns[k] for r in stepped) - min(r.step_starts_ns[k] for r in stepped)
            for k in range(n)
        )
        lines.append(f"step starts differ by at most {skew / 1e6:.3f} ms across ranks over {n} steps")
    return lines


__all__ = [
    "CombinedFinding",
    "RankReport",
    "RankResult",
    "RankTrace",
    "combine",
    "consistency",
    "explain_ranks",
    "find_rank_traces",
    "finding_label",
    "pair_ranks",
    "rank_labels",
]
