"""`diff_analyses`: what changed between two analyses (before/after a fix), per origin and per kernel.

Times are compared per step (GPU time of an origin / the analysis' step count) so traces of
different lengths compare; where either side has no step count, per trace. Origins match by their
key (``file:line``); origins left over on both sides match again by file and source text, so a fix
that shifts lines does not read as one origin vanishing and another appearing.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from tracer.model import Analysis, Finding, Origin

NEW, VANISHED, FASTER, SLOWER, SAME = "new", "vanished", "faster", "slower", "same"
SAME_WITHIN = 0.05  # a change under 5% of the before time is noise between two runs


def classify_change(before: float | None, after: float | None) -> str:
    """new / vanished / faster / slower / same, from two times of one thing."""
    before, after = before or 0.0, after or 0.0
    if before <= 0 and after <= 0:
        return SAME
    if before <= 0:
        return NEW
    if after <= 0:
        return VANISHED
    if abs(after - before) <= SAME_WITHIN * before:
        return SAME
    return FASTER if after < before else SLOWER


@dataclass(frozen=True)
class OriginDelta:
    """One origin (a source line, or a launch context without one) before and after.

    ``kernel`` is None for the origin's row (all its kernels summed), the kernel's name otherwise.
    """

    key: str  # the origin's key on the after side (before side for vanished origins)
    location: str
    where: str  # location in words: ``file:line``, or file and function when the line is unknown
    source: str | None
    category: str
    change: str  # new / vanished / faster / slower / same
    before_ns: float  # GPU time per step (per trace where a side has no steps)
    after_ns: float
    delta_ns: float
    ratio: float | None  # after / before; None for new origins
    before_calls: float  # calls per step of its most-called kernel (per trace where a side has no steps)
    after_calls: float
    kernel: str | None = None
    kernel_short: str | None = None
    kernels: tuple[str, ...] = ()  # the short names of the kernels an origin row sums
    before_key: str | None = None  # set when the match was by source text (lines moved)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AnalysisDiff:
    """Before/after of two analyses: step time, GPU time, and every origin and kernel."""

    before: str  # trace paths
    after: str
    per: str  # "step" or "trace": the unit of every time and call count below
    time_basis: str  # "gpu", or "cpu" when the after trace has no GPU activity
    before_steps: int | None
    after_steps: int | None
    before_step_ns: float | None  # mean wall time of a step
    after_step_ns: float | None
    step_delta_ns: float | None
    step_ratio: float | None
    before_gpu_ns: float  # all GPU time per step (or per trace)
    after_gpu_ns: float
    gpu_delta_ns: float
    origins: tuple[OriginDelta, ...]  # biggest |delta| first
    kernels: tuple[OriginDelta, ...]  # per (origin, kernel), biggest |delta| first
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["origins"] = [row.to_dict() for row in self.origins]
        data["kernels"] = [row.to_dict() for row in self.kernels]
        return data


def origin_where(origin: Origin) -> str:
    """Where an origin is, in words: ``file:line``, else the file and function, else its key."""
    if origin.file is not None and origin.line is not None:
        return origin.location
    if origin.file is not None:
        inside = [frame.function for frame in origin.frames if frame.file == origin.file]
        return f"{origin.file} (in {inside[-1]}, line unknown)" if inside else f"{origin.file} (line unknown)"
    return origin.key


def _match_text(origin: Origin) -> tuple[str, str] | None:
    if origin.file is None or not origin.source:
        return None
    return origin.file, " ".join(origin.source.split())


def _match_origins(before: dict[str, Origin], after: dict[str, Origin]) -> dict[str, str]:
    """after key -> before key: equal keys first, then equal (file, source text) when unambiguous."""
    matched = {key: key for key in after if key in before}
    left_before = {key: origin for key, origin in before.items() if key not in matched.values()}
    left_after = {key: origin for key, origin in after.items() if key not in matched}
    by_text: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key, origin in left_before.items():
        text = _match_text(origin)
        if text is not None:
            by_text[text].append(key)
    after_by_text: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key, origin in left_after.items():
        text = _match_text(origin)
        if text is not None:
            after_by_text[text].append(key)
    for text, after_keys in after_by_text.items():
        if len(after_keys) == 1 and len(by_text.get(text, ())) == 1:
            matched[after_keys[0]] = by_text[text][0]
    return matched


@dataclass
class _Side:
    """One analysis' findings grouped by origin key (and by origin key and kernel)."""

    divisor: float
    origins: dict[str, Origin] = field(default_factory=dict)
    time: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    calls: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # Keyed (origin key, kernel); looked up with None as the key of an origin this side lacks.
    kernel_time: dict[tuple[str | None, str], float] = field(default_factory=lambda: defaultdict(float))
    kernel_calls: dict[tuple[str | None, str], float] = field(default_factory=lambda: defaultdict(float))
    findings: dict[tuple[str | None, str], Finding] = field(default_factory=dict)
    categories: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )


def _group(analysis: Analysis, per_step: bool) -> _Side:
    side = _Side(divisor=float(analysis.steps) if per_step and analysis.steps else 1.0)
    for finding in analysis.findings:
        key = finding.origin.key
        side.origins.setdefault(key, finding.origin)
        side.time[key] += finding.total_ns / side.divisor
        # Calls per step as explain counts them (over the steps of the kernel's own kind); an
        # origin's calls are its line's runs, so those of its most-called kernel, not a sum over the
        # kernels each run launches (a cast's copy_ and empty_strided are one call of the line).
        calls = finding.calls_per_step if per_step and finding.calls_per_step is not None else None
        side.kernel_calls[key, finding.kernel] += calls if calls is not None else finding.calls / side.divisor
        side.calls[key] = max(side.calls[key], side.kernel_calls[key, finding.kernel])
        side.kernel_time[key, finding.kernel] += finding.total_ns / side.divisor
        side.findings.setdefault((key, finding.kernel), finding)
        side.categories[key][finding.category] += finding.total_ns
    return side


def _row(
    key: str,
    origin: Origin,
    category: str,
    before_ns: float,
    after_ns: float,
    before_calls: float,
    after_calls: float,
    **extra: Any,
) -> OriginDelta:
    return OriginDelta(
        key=key,
        location=origin.location,
        where=origin_where(origin),
        source=origin.source,
        category=category,
        change=classify_change(before_ns, after_ns),
        before_ns=before_ns,
        after_ns=after_ns,
        delta_ns=after_ns - before_ns,
        ratio=after_ns / before_ns if before_ns > 0 else None,
        before_calls=before_calls,
        after_calls=after_calls,
        **extra,
    )


def _category(side: _Side, key: str) -> str:
    times = side.categories.get(key)
    return max(times.items(), key=lambda item: item[1])[0] if times else "other"


def diff_analyses(before: Analysis, after: Analysis) -> AnalysisDiff:
    """Compare two analyses of the same workload (before and after a change)."""
    per_step = bool(before.steps and after.steps)
    notes = [] if per_step else ["a trace has no step count: times and calls are per trace, not per step"]
    old, new = _group(before, per_step), _group(after, per_step)
    after_to_before = _match_origins(old.origins, new.origins)
    before_to_after = {b: a for a, b in after_to_before.items()}

    origin_rows: list[OriginDelta] = []
    kernel_rows: list[OriginDelta] = []
    for key in list(new.origins) + [k for k in old.origins if k not in before_to_after]:
        in_after = key in new.origins
        before_key = after_to_before.get(key) if in_after else key
        origin = new.origins[key] if in_after else old.origins[key]
        after_key = key if in_after else None
        category = _category(new if in_after else old, key)
        moved = {"before_key": before_key} if before_key not in (None, key) else {}
        kernels = sorted(
            {k for (o, k) in new.kernel_time if o == after_key}
            | {k for (o, k) in old.kernel_time if o == before_key}
        )
        shorts = tuple(
            (new.findings.get((after_key, k)) or old.findings[(before_key, k)]).kernel_short for k in kernels
        )
        origin_rows.append(
            _row(
                key,
                origin,
                category,
                old.time.get(before_key, 0.0) if before_key else 0.0,
                new.time.get(after_key, 0.0) if after_key else 0.0,
                old.calls.get(before_key, 0.0) if before_key else 0.0,
                new.calls.get(after_key, 0.0) if after_key else 0.0,
                kernels=shorts,
                **moved,
            )
        )
        for kernel, short in zip(kernels, shorts, strict=True):
            finding = new.findings.get((after_key, kernel)) or old.findings[(before_key, kernel)]
            kernel_rows.append(
                _row(
                    key,
                    origin,
                    finding.category,
                    old.kernel_time.get((before_key, kernel), 0.0),
                    new.kernel_time.get((after_key, kernel), 0.0),
                    old.kernel_calls.get((before_key, kernel), 0.0),
                    new.kernel_calls.get((after_key, kernel), 0.0),
                    kernel=kernel,
                    kernel_short=short,
                    **moved,
                )
            )

    def biggest_first(row: OriginDelta) -> tuple[float, str]:
        return (-abs(row.delta_ns), row.key)

    before_step = before.step_ns
    after_step = after.step_ns
    step_delta_ns: float | None = None
    step_ratio: float | None = None
    if before_step is not None and after_step is not None:
        step_delta_ns = after_step - before_step
        step_ratio = after_step / before_step if before_step else None
    return AnalysisDiff(
        before=before.trace,
        after=after.trace,
        per="step" if per_step else "trace",
        time_basis=after.time_basis,
        before_steps=before.steps,
        after_steps=after.steps,
        before_step_ns=before_step,
        after_step_ns=after_step,
        step_delta_ns=step_delta_ns,
        step_ratio=step_ratio,
        before_gpu_ns=before.total_ns / old.divisor,
        after_gpu_ns=after.total_ns / new.divisor,
        gpu_delta_ns=after.total_ns / new.divisor - before.total_ns / old.divisor,
        origins=tuple(sorted(origin_rows, key=biggest_first)),
        kernels=tuple(sorted(kernel_rows, key=biggest_first)),
        notes=tuple(notes),
    )
