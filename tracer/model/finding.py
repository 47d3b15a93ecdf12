"""`Finding`: one hot kernel from one origin with its cost; `Analysis`: all findings of one trace."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tracer.model.origin import Origin

_NO_ORIGIN = Origin()  # stands in for a finding's origin while the rest converts

CATEGORIES = ("cast/copy", "gemm", "attention", "communication", "memcpy", "memset", "other")


@dataclass(frozen=True)
class Finding:
    """A kernel (by name) launched from one origin, aggregated over the trace.

    Every number a renderer shows is here; renderers compute none of their own.
    """

    kernel: str  # full name as in the trace
    kernel_short: str  # readable: "unrolled_elementwise_kernel<copy>"
    category: str  # one of CATEGORIES
    origin: Origin
    calls: int
    total_ns: int
    share: float  # of all GPU activity time in the analysed window (0..1)
    steps: int | None = None
    calls_per_step: float | None = None
    invariant: str | None = None  # "78 calls/step = once per layer (78 layers)"
    bytes_per_call: int | None = None  # read + written
    gbps: float | None = None  # achieved, bytes_per_call / mean duration
    peak_fraction: float | None = None  # gbps / device peak
    shapes: tuple[str, ...] = ()  # "Input Dims"/"Input type" of the launching op, summarised
    waste: str | None = None  # e.g. "cast of the whole 1.1 GB buffer, then indexed"
    bytes_basis: str | None = None  # how bytes_per_call was found: "shapes" (exact), "estimate", "device"

    @property
    def per_call_ns(self) -> float:
        return self.total_ns / self.calls if self.calls else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(replace(self, origin=_NO_ORIGIN))  # the origin converts itself, once
        data["origin"] = self.origin.to_dict()
        data["per_call_ns"] = self.per_call_ns
        return data


@dataclass(frozen=True)
class Analysis:
    """Everything `kerneltrace explain` knows about one trace (one rank)."""

    trace: str  # path
    findings: tuple[Finding, ...]
    time_basis: str = "gpu"  # "gpu", or "cpu" when the trace has no GPU activity
    device: str | None = None
    peak_gbps: float | None = None
    total_ns: int = 0  # all GPU activity time in the window (sum of durations)
    window_ns: int = 0  # wall time of the analysed window
    gpu_busy_fraction: float | None = None  # union of GPU activity / window; low = launch-bound
    steps: int | None = None
    step_ns: float | None = None  # mean wall time of one step
    step_method: str | None = None  # how the steps were found: "ProfilerStep#N ranges", "range 'decode_step'"
    step_evidence: tuple[str, ...] = ()  # why, in sentences: what was found, checked, passed over, left out
    step_starts_ns: tuple[int, ...] = ()  # each step's span (trace-relative ns, on the steps' clock)
    step_ends_ns: tuple[int, ...] = ()
    step_kinds: tuple[str, ...] = ()  # per step: "EXTEND", "prefill", ... where steps differ in kind
    steps_exact: bool = True  # False when the evidence disagrees: counts per step are worded "~78"
    layers: int | None = None
    attributed_fraction: float = 0.0  # share of GPU time whose origin has a source line
    replay_fraction: float = 0.0  # share of GPU time replayed from CUDA graphs
    replay_attributed_fraction: float = 0.0  # of the replay time, share attributed to a line
    rank: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(replace(self, findings=()))  # each finding converts itself, once
        data["findings"] = [f.to_dict() for f in self.findings]
        return data
