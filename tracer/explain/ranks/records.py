"""The records of a per-rank analysis (each rank, the combined findings, the report), and rank labels."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tracer.model.finding import Analysis


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
    collectives: tuple[Collective, ...] = ()
    collective_source: str = ""  # "GPU kernels", "gloo:/nccl: ranges", "c10d:: ops", ""

    @property
    def step_starts_ns(self) -> tuple[int, ...]:
        """The steps the analysis used, on the aligned clock (ns since the Unix epoch)."""
        base = self.base_time_ns or 0
        return tuple(base + s for s in self.analysis.step_starts_ns)

    @property
    def step_ends_ns(self) -> tuple[int, ...]:
        base = self.base_time_ns or 0
        return tuple(base + e for e in self.analysis.step_ends_ns)

    @property
    def steps(self) -> int:
        return self.analysis.steps or 1

    @property
    def step_method(self) -> str | None:
        return self.analysis.step_method

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
    per_step_ns: float  # over this rank's own steps: compare across ranks only when they agree on them
    calls_per_step: float | None
    share: float

    @property
    def per_call_ns(self) -> float:
        return self.total_ns / self.calls if self.calls else 0.0


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
                    "step_method": r.step_method,
                    "analysis": r.analysis.to_dict(),
                }
                for r in self.ranks
            ],
            "combined": [
                {**asdict(c), "ranks": [{**asdict(f), "per_call_ns": f.per_call_ns} for f in c.ranks]}
                for c in self.combined
            ],
            "consistency": list(self.consistency),
            "notes": list(self.notes),
        }


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
