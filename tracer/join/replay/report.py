"""What the CUDA-graph replay attribution found: captures, replayed graphs, share of replay time attributed."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class CapturedGraph:
    """One profiled graph capture: where it ran and how many nodes (launches) it recorded."""

    trace: str
    thread: int
    start_ns: int  # trace-relative, on that trace's clock
    launches: int
    found_by: str  # "cudaStreamBeginCapture..cudaStreamEndCapture" or "launches without GPU activity"


@dataclass(frozen=True)
class GraphReplays:
    """The replays of one graph (same graph id, or the same kernel sequence) and how they were aligned."""

    capture: int | None  # index into ReplayReport.captures; None when unaligned
    graph_id: int | None
    launches: int  # cudaGraphLaunch calls
    kernels: int  # GPU activities of all those launches
    replay_ns: int
    aligned_ns: int  # given a capture-time origin
    line_ns: int  # ... whose origin names a source line
    # "graph node id", "launch order", "launch order, several streams", "stream merge",
    # "sequence alignment", "none"
    method: str
    confidence: float  # of the alignment (a line's own confidence multiplies it)
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReplayReport:
    """What `attribute_replays` did: captures found, replays aligned, share of replay time attributed."""

    trace: str
    capture_traces: tuple[str, ...]
    captures: tuple[CapturedGraph, ...]
    graphs: tuple[GraphReplays, ...]
    graph_launches: int
    replay_kernels: int
    replay_ns: int
    aligned_ns: int
    line_ns: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def aligned_fraction(self) -> float:
        """Share of replay time given a capture-time origin (ops, ranges, frames)."""
        return self.aligned_ns / self.replay_ns if self.replay_ns else 0.0

    @property
    def line_fraction(self) -> float:
        """Share of replay time attributed to an exact capture-time source line."""
        return self.line_ns / self.replay_ns if self.replay_ns else 0.0

    def summary(self) -> str:
        if not self.graph_launches:
            return "no CUDA graph replays in this trace"
        head = (
            f"CUDA graph replays: {self.replay_kernels} kernels of {self.graph_launches} graph launches "
            f"({self.replay_ns / 1e6:.3f} ms)"
        )
        if not self.captures:
            return (
                head + "; no profiled capture, so replayed kernels are labelled as replays (candidates only)"
            )
        return (
            f"{head}; {self.aligned_fraction:.1%} of replay time attributed to capture-time origins, "
            f"{self.line_fraction:.1%} to an exact source line ({len(self.captures)} capture(s))"
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["aligned_fraction"] = self.aligned_fraction
        data["line_fraction"] = self.line_fraction
        data["summary"] = self.summary()
        return data
