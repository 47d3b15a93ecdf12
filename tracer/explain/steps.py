"""Step boundaries: ProfilerStep#N, SGLang's step spans, a named range, CUDA graph launches, model
forwards, or repetition.

A step runs from one marker's start to the next marker's start, so work between markers (sampling,
scheduling) belongs to the step before it; the last step ends where its marker ends, or one typical
step period after its start when the marker covers only the forward pass.
"""

from __future__ import annotations

import bisect
import itertools
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tracer.errors import InputError
from tracer.explain.optree import rows_of
from tracer.model.events import NONE, Cat, Trace

PROFILER_STEP = "ProfilerStep#"
SGLANG_STEP = re.compile(r"^step\[(?P<stage>[A-Z_]+)\b")

METHOD_PROFILER = "ProfilerStep#N ranges"
METHOD_SGLANG = "SGLang step[...] spans"
METHOD_RANGE = "range {name!r}"
METHOD_FORWARD = "model forwards ({name})"
METHOD_GRAPH = "CUDA graph launches"
METHOD_REPETITION = "repetition of the kernel sequence"


@dataclass(frozen=True)
class Steps:
    """Step spans on one clock: "cpu" (assign work by launch time) or "gpu" (by kernel start)."""

    method: str
    starts_ns: tuple[int, ...]
    ends_ns: tuple[int, ...]
    clock: str = "cpu"
    labels: tuple[str, ...] = ()
    note: str | None = None

    def __len__(self) -> int:
        return len(self.starts_ns)

    @property
    def window(self) -> tuple[int, int]:
        return self.starts_ns[0], self.ends_ns[-1]

    @property
    def mean_ns(self) -> float:
        return statistics.fmean(e - s for s, e in zip(self.starts_ns, self.ends_ns))

    def index_of(self, ts_ns: int) -> int | None:
        """The step whose span holds ``ts_ns``, or None outside every step."""
        i = bisect.bisect_right(self.starts_ns, ts_ns) - 1
        if i < 0 or ts_ns >= self.ends_ns[i]:
            return None
        return i


def find_steps(
    trace: Trace,
    *,
    step_range: str | None = None,
    gpu_sequence: Sequence[tuple[int, int, str]] | Callable[[], Sequence[tuple[int, int, str]]] = (),
    layers: int | None = None,
) -> Steps | None:
    """Step spans by the first method that finds at least two steps; None when nothing repeats.

    ``gpu_sequence`` is (start ns, end ns, name) of the timed activities, for the repetition fallback
    (or a function returning it, called only when the fallback runs).
    """
    events = trace.events
    ranges: dict[str, list[int]] = defaultdict(list)
    for row in rows_of(events, Cat.USER_ANNOTATION):
        ranges[events.name[row]].append(row)

    if step_range is not None:
        rows = [
            r for name, rs in ranges.items() if name == step_range or name.startswith(step_range) for r in rs
        ]
        if not rows:
            raise InputError(trace.meta.path, f"no record_function range named {step_range!r} (--step-range)")
        return _from_markers(trace, rows, METHOD_RANGE.format(name=step_range), contiguous=False)

    rows = [r for name, rs in ranges.items() if name.startswith(PROFILER_STEP) for r in rs]
    if len(rows) >= 1:
        return _from_markers(trace, rows, METHOD_PROFILER, contiguous=True)

    rows = [r for name, rs in ranges.items() if SGLANG_STEP.match(name) for r in rs]
    if len(rows) >= 2:
        steps = _from_markers(trace, rows, METHOD_SGLANG, contiguous=False)
        stages = Counter(SGLANG_STEP.match(label).group("stage") for label in steps.labels)
        if len(stages) > 1:
            mix = ", ".join(f"{count} {stage}" for stage, count in stages.most_common())
            note = f"the steps mix stages ({mix}); calls/step average over all of them"
            steps = Steps(steps.method, steps.starts_ns, steps.ends_ns, steps.clock, steps.labels, note)
        return steps

    graph_steps = _from_graph_launches(trace, layers)
    if graph_steps is not None:
        return graph_steps

    forward = _model_forward_rows(trace)
    if forward is not None:
        name, rows = forward
        return _from_markers(trace, rows, METHOD_FORWARD.format(name=name), contiguous=False)

    return _from_repetition(gpu_sequence() if callable(gpu_sequence) else gpu_sequence, layers)


def _from_markers(trace: Trace, rows: list[int], method: str, *, contiguous: bool) -> Steps:
    events = trace.events
    rows = sorted(rows, key=lambda r: (events.ts_ns[r], -events.dur_ns[r]))
    outer: list[int] = []  # drop markers nested in an earlier one (a range re-entered recursively)
    for row in rows:
        if outer and events.ts_ns[row] < events.end_ns(outer[-1]):
            continue
        outer.append(row)
    starts = [events.ts_ns[r] for r in outer]
    own_ends = [events.end_ns(r) for r in outer]
    if contiguous or len(outer) < 2:
        ends = own_ends
    else:
        period = statistics.median(b - a for a, b in itertools.pairwise(starts))
        ends = starts[1:] + [max(own_ends[-1], starts[-1] + int(period))]
    return Steps(method, tuple(starts), tuple(ends), "cpu", tuple(events.name[r] for r in outer))


def _from_graph_launches(trace: Trace, layers: int | None = None) -> Steps | None:
    """One step per CUDA graph launch: the span of the GPU work it replayed (GPU clock).

    A decode step captured whole replays as one ``cudaGraphLaunch`` whose kernels share its
    correlation; no marker is needed. Taken only when that is what the trace shows: at least two
    launches, all of one kernel sequence (one graph, or the same code captured for other sizes),
    one after another, holding most of the GPU time, and (with a known layer count) at least a
    kernel per layer each, which rules out piecewise graphs (one launch per layer).
    """
    import numpy as np

    from tracer.join.columns import column, rows_where, values_at
    from tracer.join.replay_capture import GRAPH_LAUNCH_PREFIXES

    events = trace.events
    calls = rows_where(column(events.cat), (Cat.RUNTIME, Cat.DRIVER))
    names = values_at(events.name, calls)
    graph_names = {n for n in dict.fromkeys(names) if n.startswith(GRAPH_LAUNCH_PREFIXES)}
    launches: set[int] = set()
    if graph_names:
        is_graph = np.fromiter(map(graph_names.__contains__, names), dtype=bool, count=len(names))
        launches = set(column(events.correlation)[calls[is_graph]].tolist())
    launches.discard(NONE)
    if len(launches) < 2:
        return None
    replayed: dict[int, list[int]] = defaultdict(list)
    total_ns = replay_ns = 0
    for row in rows_of(events, Cat.KERNEL, Cat.MEMCPY, Cat.MEMSET):
        total_ns += events.dur_ns[row]
        if events.correlation[row] in launches:
            replay_ns += events.dur_ns[row]
            replayed[events.correlation[row]].append(row)
    if len(replayed) < 2 or replay_ns * 2 < total_ns:
        return None
    spans = []
    for rows in replayed.values():
        rows.sort(key=lambda r: (events.ts_ns[r], events.tid[r]))
        end = max(events.end_ns(r) for r in rows)
        # Names as a multiset: concurrent streams start their kernels in a different order each replay.
        spans.append((events.ts_ns[rows[0]], end, tuple(sorted(events.name[r] for r in rows))))
    spans.sort()
    if len({names for _, _, names in spans}) > 1:
        return None  # several graphs: a step may replay a few of them
    if any(b[0] < a[1] for a, b in itertools.pairwise(spans)):
        return None  # replays overlap: not one step after another
    if layers and len(spans[0][2]) < layers:
        return None
    note = (
        f"each of the {len(spans)} CUDA graph launches is one step, spanning the GPU work it replayed, "
        "as the trace has no step markers; work between launches is outside the steps"
    )
    return Steps(METHOD_GRAPH, tuple(s for s, _, _ in spans), tuple(e for _, e, _ in spans), "gpu", (), note)


def _model_forward_rows(trace: Trace) -> tuple[str, list[int]] | None:
    """Calls of the outermost nn.Module (e.g. ``LlamaForCausalLM_0``) when it ran at least twice.

    Python frames nest perfectly per thread, so a module frame inside no other module frame (by
    time, on its thread) is a root; only ``nn.Module: ...`` rows are looked at.
    """
    import numpy as np

    from tracer.join.columns import column, group_by_thread, start_order
    from tracer.join.frame_names import frame_names

    events = trace.events
    frames = frame_names(events)
    python_rows, names = frames.rows, frames.names
    module_names = {n for n in frames.distinct if n.startswith("nn.Module: ")}
    if not module_names:
        return None
    is_module = np.fromiter(map(module_names.__contains__, names), dtype=bool, count=len(names))
    roots: dict[str, list[int]] = defaultdict(list)
    ts_column, dur_column = column(events.ts_ns), column(events.dur_ns)
    for rows in group_by_thread(events, python_rows[is_module]).values():
        order = start_order(ts_column[rows], dur_column[rows])
        rows = rows[order]
        starts, ends = ts_column[rows], ts_column[rows] + dur_column[rows]
        # A root is the first frame starting at or after the end of the root before it.
        after = np.maximum(np.arange(1, len(rows) + 1), np.searchsorted(starts, ends, side="left")).tolist()
        row_list = rows.tolist()
        at = int(np.searchsorted(starts, -1, side="left"))  # the first one starting at or after -1
        while at < len(row_list):
            roots[events.name[row_list[at]]].append(row_list[at])
            at = after[at]
    name, rows = max(roots.items(), key=lambda item: (len(item[1]), -min(events.ts_ns[r] for r in item[1])))
    if len(rows) < 2:
        return None
    return name.removeprefix("nn.Module: "), rows


def _from_repetition(sequence: Sequence[tuple[int, int, str]], layers: int | None = None) -> Steps | None:
    """Steps from the activity sequence (start ns, end ns, name) when nothing in the trace marks them.

    A candidate step count m is backed by kernels that run exactly m times, each once between
    consecutive occurrences of the first of them, cutting the sequence into segments of similar
    length. The cut goes where the idle gap is longest at the same offset in every segment (steps end
    with a sync; layers run back to back). Candidates score by how many kernels back them times how
    much longer that gap is than a typical one; with a known layer count, a candidate that is another
    candidate times the layers is the layers, not the steps.
    """
    if len(sequence) < 4:
        return None
    ordered = sorted(sequence)
    names = [name for _, _, name in ordered]
    import numpy as np

    starts_ns = np.fromiter((s for s, _, _ in ordered), dtype=np.int64, count=len(ordered))
    ends_ns = np.fromiter((e for _, e, _ in ordered), dtype=np.int64, count=len(ordered))
    gap_array = np.zeros(len(ordered), dtype=np.int64)
    gap_array[1:] = np.maximum(0, starts_ns[1:] - ends_ns[:-1])
    typical_gap = max(1.0, float(np.median(gap_array)))
    positions: dict[str, list[int]] = defaultdict(list)
    for i, name in enumerate(names):
        positions[name].append(i)
    by_count: dict[int, list[str]] = defaultdict(list)
    for name, where in positions.items():
        by_count[len(where)].append(name)
    scored: dict[int, tuple[float, list[int], int]] = {}
    for m, candidates in by_count.items():
        if m < 2 or len(candidates) < 2:
            continue
        anchor = min((positions[n] for n in candidates), key=lambda where: where[0])
        lengths = [b - a for a, b in itertools.pairwise(anchor)]
        typical = statistics.median(lengths)
        if typical < 2 or min(lengths) < typical / 2 or max(lengths) > typical * 2:
            continue
        agreeing = sum(
            1
            for n in candidates
            if [bisect.bisect_right(anchor, p) - 1 for p in positions[n]] == list(range(m))
        )
        if agreeing < 2:
            continue
        offset, gap = _widest_gap_offset(gap_array, anchor, min(lengths))
        ratio = gap / typical_gap
        cuts = [p + offset for p in anchor if p + offset < len(names)]
        if len(names) - cuts[-1] < typical / 2:  # only the tail of a step follows the last cut
            cuts.pop()
        if cuts and cuts[0] >= typical / 2:  # most of a step ran before the first cut: count it as a step
            cuts.insert(0, max(0, cuts[0] - int(typical)))
        if len(cuts) < 2:
            continue
        scored[m] = (agreeing * max(ratio, 1.0), cuts, agreeing)
    if layers and layers > 1:
        scored = {m: v for m, v in scored.items() if not (m % layers == 0 and m // layers in scored)}
    if not scored:
        return None
    m = max(scored, key=lambda count: (scored[count][0], -count))
    _, cuts, agreeing = scored[m]
    starts = [ordered[p][0] for p in cuts]
    ends = starts[1:] + [max(end for _, end, _ in ordered[cuts[-1] :])]
    note = f"{agreeing} kernels run exactly once in each of {m} repeats"
    return Steps(METHOD_REPETITION, tuple(starts), tuple(ends), "gpu", (), note)


def _widest_gap_offset(gaps, anchor: list[int], span: int, sample: int = 32) -> tuple[int, float]:
    """(offset from each anchor, median gap there): where consecutive repeats are separated."""
    import numpy as np

    picks = np.asarray(anchor[1 : sample + 1], dtype=np.int64)
    span = min(span, len(gaps) - int(picks.max()))
    if span <= 0:
        return 0, 0.0
    window = gaps[picks[:, None] + np.arange(span)[None, :]]
    medians = np.median(window, axis=0)
    offset = int(np.argmax(medians))
    return offset, float(medians[offset])
