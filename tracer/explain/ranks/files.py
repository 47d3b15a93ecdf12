"""Which files of a directory are one profiling run's per-rank traces, and each rank's capture traces."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracer.errors import InputError

TRACE_SUFFIXES = (".json", ".json.gz")
CAPTURE_DIR = "graph_capture_profile"  # SGLang's graph_capture_profile_dir()
CAPTURE_PREFIX = "cuda_graph_capture-"
_RANK_PARTS = re.compile(r"(?:^|[-_.])(?P<kind>TP|DP|PP|EP)-(?P<rank>\d+)")
_CAPTURE_RANK = re.compile(r"(?:TP-|_rank)(?P<rank>\d+)\.json(?:\.gz)?$")


@dataclass(frozen=True)
class RankTrace:
    """One rank's trace file, its rank (from the name: ``TP-<n>``) and capture traces found for it."""

    path: Path
    rank: int | None
    parts: str  # "TP-1", "TP-0-DP-1": the rank labels in the name
    set_key: str  # the name with the rank numbers blanked: files of one profiling run share it
    captures: tuple[Path, ...] = ()


def find_rank_traces(directory: Path, select: str | None = None) -> list[RankTrace]:
    """The per-rank traces of `directory` (one profiling run), with their capture traces attached.

    `select` keeps only the files whose name contains it (a stage such as ``DECODE``, a profile id).
    Raises `InputError` when there is none, or when several runs' (or stages') traces are mixed.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(directory, "not a directory of per-rank traces")
    return rank_traces_in(directory, list_trace_files(directory), select)


def list_trace_files(directory: Path) -> list[str]:
    """The trace files of `directory` and of its ``graph_capture_profile/``, as paths relative to it
    (what a host holds: `rank_traces_in` reads the ranks from such a listing)."""
    names = []
    for folder, prefix in ((directory, ""), (directory / CAPTURE_DIR, f"{CAPTURE_DIR}/")):
        if not folder.is_dir():
            continue
        names += [
            prefix + p.name
            for p in sorted(folder.iterdir())
            if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
        ]
    return names


def rank_traces_in(directory: Path, names: Iterable[str], select: str | None = None) -> list[RankTrace]:
    """`find_rank_traces` from a listing of the directory (`list_trace_files`, or the union of the
    listings of several hosts, the files need not be on this one)."""
    directory = Path(directory)
    names = sorted(set(names))
    top = [n for n in names if "/" not in n]
    traces = [
        directory / n
        for n in top
        if n.endswith(TRACE_SUFFIXES)
        and not n.startswith(("merged-", CAPTURE_PREFIX))
        and (select is None or select in n)
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
    captures = _capture_traces(directory, names)
    return [
        RankTrace(t.path, t.rank, t.parts, t.set_key, tuple(captures.get(t.rank, ())))
        for t in sorted(found, key=lambda t: (t.rank is None, t.rank, t.parts, t.path.name))
    ]


def _capture_traces(directory: Path, names: Sequence[str]) -> dict[int | None, list[Path]]:
    """SGLang's CUDA-graph capture traces per TP rank (``graph_capture_profile/`` or beside the traces)."""
    out: dict[int | None, list[Path]] = defaultdict(list)
    inside = [n for n in names if n.startswith(f"{CAPTURE_DIR}/") and n.count("/") == 1]
    beside = [n for n in names if "/" not in n and n.startswith(CAPTURE_PREFIX)]
    for name in (*inside, *beside):
        if not name.endswith(TRACE_SUFFIXES):
            continue
        match = _CAPTURE_RANK.search(name)
        if match:
            out[int(match["rank"])].append(directory / name)
    return out
