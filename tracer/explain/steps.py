"""Step boundaries, by the first method the trace supports, with the evidence for them in words.

The order: ``--step-range``; ``ProfilerStep#N``; SGLang's ``step[...]`` spans; the caller's own
record_function ranges (`step_ranges`); one CUDA graph launch per replay; the model's outermost
module forward; the period of the kernel sequence (`step_period`). A step runs from one marker's
start to the next marker's start, so work between markers (sampling, scheduling) belongs to the step
before it; the last step ends where its marker ends, or one typical step after its start when the
marker covers only the forward pass. A first or last step cut by the trace's edges (or by
``--window``) is left out, and said so.
"""

from __future__ import annotations

import bisect
import itertools
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tracer.errors import InputError
from tracer.explain.optree import rows_of
from tracer.explain.structure import ModelShape
from tracer.model.events import NONE, Cat, Trace

if TYPE_CHECKING:
    import numpy as np

PROFILER_STEP = "ProfilerStep#"
SGLANG_STEP = re.compile(r"^step\[(?P<stage>[A-Z_]+)\b")
SGLANG_TARGET = "VERIFY"  # speculative decode: one target verify per step, the DRAFT spans around it

METHOD_PROFILER = "ProfilerStep#N ranges"
METHOD_SGLANG = "SGLang step[...] spans"
METHOD_RANGE = "range {name!r}"
METHOD_FORWARD = "model forwards ({name})"
METHOD_GRAPH = "CUDA graph launches"
METHOD_REPETITION = "repetition of the kernel sequence"

PARTIAL_BELOW = 0.6  # an edge step with fewer activities than this share of a typical one is cut


@dataclass(frozen=True)
class StepWork:
    """The timed activities (kernels and copies, or CPU ops' self time) step detection reads.

    ``when_ns`` places one in a step (launch time on the CPU clock; its own start where it has no
    launch); ``start_ns``/``end_ns`` are its own span, the order of the kernel sequence; ``codes``
    number the distinct ``names``.
    """

    when_ns: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    ns: np.ndarray
    codes: np.ndarray
    names: list[str]

    @classmethod
    def of(cls, when_ns, start_ns, end_ns, ns, names: list[str]) -> StepWork:
        import numpy as np

        # Codes by first appearance; dict.fromkeys and map keep the per-name work in C.
        distinct = {name: code for code, name in enumerate(dict.fromkeys(names))}
        codes = np.fromiter(map(distinct.__getitem__, names), dtype=np.int64, count=len(names))
        when, start, end, spent = (np.asarray(a, dtype=np.int64) for a in (when_ns, start_ns, end_ns, ns))
        return cls(when, start, end, spent, codes, list(distinct))

    def __len__(self) -> int:
        return len(self.codes)


@dataclass(frozen=True)
class Steps:
    """Step spans on one clock: "cpu" (assign work by launch time) or "gpu" (by kernel start).

    ``evidence``: how they were found, in sentences; ``stages``: per step, its kind where the trace
    or the work tells kinds apart ("EXTEND", "prefill", ...; "" otherwise); ``left_out``: partial
    steps dropped from the window, in words.
    """

    method: str
    starts_ns: tuple[int, ...]
    ends_ns: tuple[int, ...]
    clock: str = "cpu"
    labels: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    stages: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.starts_ns)

    @property
    def window(self) -> tuple[int, int]:
        return self.starts_ns[0], self.ends_ns[-1]

    @property
    def mean_ns(self) -> float:
        return statistics.fmean(e - s for s, e in zip(self.starts_ns, self.ends_ns))

    @property
    def note(self) -> str | None:
        return "; ".join(self.evidence) or None

    def index_of(self, ts_ns: int) -> int | None:
        """The step whose span holds ``ts_ns``, or None outside every step."""
        i = bisect.bisect_right(self.starts_ns, ts_ns) - 1
        if i < 0 or ts_ns >= self.ends_ns[i]:
            return None
        return i

    def keep(self, indices: list[int], left_out: Sequence[str] = ()) -> Steps:
        """These steps only (in order), with words on the ones dropped."""
        return replace(
            self,
            starts_ns=tuple(self.starts_ns[i] for i in indices),
            ends_ns=tuple(self.ends_ns[i] for i in indices),
            labels=tuple(self.labels[i] for i in indices) if self.labels else (),
            stages=tuple(self.stages[i] for i in indices) if self.stages else (),
            left_out=self.left_out + tuple(left_out),
        )


def find_steps(
    trace: Trace,
    *,
    step_range: str | None = None,
    work: StepWork | Callable[[], StepWork] | None = None,
    shape: ModelShape | None = None,
    layers: int | None = None,
    methods: tuple[str, ...] | None = None,
) -> Steps | None:
    """Step spans by the first method that finds at least two steps; None when nothing repeats.

    ``work``: the activities (or a function making them, called when a method needs them); without
    it they are read from the trace. ``shape``: the layers (count and marks) the steps must hold.
    ``methods``: only these (`method_key` of a `Steps.method`), e.g. to find every rank's steps the
    same way.
    """
    shape = shape if shape is not None else ModelShape(layers=layers)
    cache: list[StepWork] = []

    def get_work() -> StepWork:
        if not cache:
            cache.append(work() if callable(work) else work if work is not None else work_of_trace(trace))
        return cache[0]

    if step_range is not None:
        steps = _named_range(trace, step_range)
    else:
        steps = None
        for key, find in (
            ("profiler", lambda: _profiler_steps(trace)),
            ("sglang", lambda: _sglang_steps(trace)),
            ("range", lambda: _range_steps(trace, get_work(), shape)),
            ("graph", lambda: _from_graph_launches(trace, shape.layers)),
            ("forwards", lambda: _forward_steps(trace, shape)),
            ("period", lambda: _period_steps(get_work(), shape)),
        ):
            if methods is not None and key not in methods:
                continue
            steps = find()
            if steps is not None:
                break
    if steps is None:
        return None
    windowed = any(note.startswith("loaded only") for note in trace.notes)  # tracer.load's --window/--steps
    steps = _without_cut_edges(steps, get_work(), shape, windowed)
    if not steps.stages:
        steps = _stages_by_content(steps, get_work())
    return steps if len(steps) else None


def method_key(method: str) -> str:
    """The short name of a `Steps.method` ("range 'decode_step'" -> "range"), for ``methods``."""
    for key, prefix in (
        ("profiler", METHOD_PROFILER),
        ("sglang", METHOD_SGLANG),
        ("graph", METHOD_GRAPH),
        ("period", METHOD_REPETITION),
        ("forwards", "model forwards"),
    ):
        if method.startswith(prefix):
            return key
    return "range"


def work_of_trace(trace: Trace) -> StepWork:
    """The activities of a trace on its own: GPU kernels/copies placed by their launch or, without
    GPU work, every CPU op with time of its own (embedding and argmax run once per step; their
    leaves, like ``aten::empty``, also run elsewhere)."""
    import numpy as np

    from tracer.explain.optree import OpTree

    events = trace.events
    gpu = rows_of(events, Cat.KERNEL, Cat.MEMCPY, Cat.MEMSET)
    if gpu:
        launch = {
            events.correlation[r]: events.ts_ns[r]
            for r in rows_of(events, Cat.RUNTIME, Cat.DRIVER)
            if events.correlation[r] != NONE
        }
        rows = gpu
        when = [launch.get(events.correlation[r], events.ts_ns[r]) for r in rows]
        ns = [events.dur_ns[r] for r in rows]
    else:
        tree = OpTree(events)
        rows = [r for r in rows_of(events, Cat.CPU_OP) if tree.self_ns(r) > 0]
        when = [events.ts_ns[r] for r in rows]
        ns = [tree.self_ns(r) for r in rows]
    starts = [events.ts_ns[r] for r in rows]
    ends = [events.end_ns(r) for r in rows]
    order = np.argsort(np.asarray(starts, dtype=np.int64), kind="stable")
    pick = order.tolist()
    return StepWork.of(
        [when[i] for i in pick],
        [starts[i] for i in pick],
        [ends[i] for i in pick],
        [ns[i] for i in pick],
        [events.name[rows[i]] for i in pick],
    )


def _named_range(trace: Trace, step_range: str) -> Steps:
    events = trace.events
    rows = [r for r in rows_of(events, Cat.USER_ANNOTATION) if events.name[r].startswith(step_range)]
    if not rows:
        raise InputError(trace.meta.path, f"no record_function range named {step_range!r} (--step-range)")
    steps = _from_markers(trace, rows, METHOD_RANGE.format(name=step_range), contiguous=False)
    return replace(steps, evidence=(f"--step-range {step_range!r}: {len(steps)} ranges",))


def _profiler_steps(trace: Trace) -> Steps | None:
    events = trace.events
    rows = [r for r in rows_of(events, Cat.USER_ANNOTATION) if events.name[r].startswith(PROFILER_STEP)]
    if not rows:
        return None
    steps = _from_markers(trace, rows, METHOD_PROFILER, contiguous=True)
    numbers = [label.removeprefix(PROFILER_STEP) for label in steps.labels]
    span = f"#{numbers[0]}..#{numbers[-1]}" if len(numbers) > 1 else f"#{numbers[0]}"
    return replace(
        steps, evidence=(f"{len(steps)} ProfilerStep ranges ({span}) from the profiler's schedule",)
    )


def _sglang_steps(trace: Trace) -> Steps | None:
    """SGLang's ``step[STAGE bs=..]`` spans (ModelRunner.forward). With speculative decode, a step is
    one target ``VERIFY`` and the draft spans before it (every draft forward is a ``DRAFT`` span)."""
    events = trace.events
    rows = [r for r in rows_of(events, Cat.USER_ANNOTATION) if SGLANG_STEP.match(events.name[r])]
    if len(rows) < 2:
        return None
    spans = _from_markers(trace, rows, METHOD_SGLANG, contiguous=False)
    # every label matches: the rows were picked by SGLANG_STEP
    stages = tuple(m.group("stage") for label in spans.labels if (m := SGLANG_STEP.match(label)))
    if SGLANG_TARGET not in stages:
        mix = Counter(stages)
        words = ", ".join(f"{count} {stage}" for stage, count in mix.most_common())
        return replace(spans, stages=stages, evidence=(f"{len(spans)} SGLang step[...] spans ({words})",))
    # Speculative decode: step k runs from the first span after verify k-1 to the first span after
    # verify k (the draft extend that follows a verify opens the next step).
    own_ends = [events.end_ns(r) for r in _outer_rows(trace, rows)]
    starts, labels, drafts = [], [], []
    group_start, in_group, last_verify_end = None, 0, None
    for start, own_end, label, stage in zip(spans.starts_ns, own_ends, spans.labels, stages):
        if group_start is None:
            group_start = start
        if stage == SGLANG_TARGET:
            starts.append(group_start)
            labels.append(label)
            drafts.append(in_group)
            group_start, in_group, last_verify_end = None, 0, own_end
        else:
            in_group += 1
    if len(starts) < 2 or last_verify_end is None:
        return None
    ends = starts[1:] + [last_verify_end]
    evidence = [
        (
            f"speculative decode: {len(starts)} SGLang step[VERIFY] spans; a step is the target's verify and the "
            f"{min(drafts)}-{max(drafts)} draft spans before it ({sum(drafts)} draft spans in the steps)"
        )
    ]
    left = (
        [
            f"{in_group} draft span{'s' * (in_group > 1)} after the last verify (a step the trace cut): left out"
        ]
        if in_group
        else []
    )
    return Steps(
        METHOD_SGLANG,
        tuple(starts),
        tuple(ends),
        "cpu",
        tuple(labels),
        tuple(evidence),
        tuple(SGLANG_TARGET for _ in starts),
        tuple(left),
    )


def _range_steps(trace: Trace, work: StepWork, shape: ModelShape) -> Steps | None:
    from tracer.explain.step_ranges import find_range_steps

    found = find_range_steps(trace, work, shape)
    if found is None:
        return None
    name = found.families[0] if len(found.families) == 1 else " + ".join(found.families)
    steps = _from_markers(
        trace, list(found.rows), METHOD_RANGE.format(name=name), contiguous=False, stops=found.stops
    )
    stages: tuple[str, ...] = ()
    if len(found.families) > 1:
        from tracer.explain.step_ranges import family_of

        stages = tuple(family_of(label) for label in steps.labels)
    return replace(steps, evidence=found.evidence, stages=stages, left_out=found.left_out)


def _outer_rows(trace: Trace, rows: list[int]) -> list[int]:
    """The markers in start order, without those nested in an earlier one (a range re-entered)."""
    events = trace.events
    outer: list[int] = []
    for row in sorted(rows, key=lambda r: (events.ts_ns[r], -events.dur_ns[r])):
        if outer and events.ts_ns[row] < events.end_ns(outer[-1]):
            continue
        outer.append(row)
    return outer


def _from_markers(
    trace: Trace, rows: list[int], method: str, *, contiguous: bool, stops: tuple[int, ...] = ()
) -> Steps:
    """Steps from marker ranges; ``stops``: starts of markers left out (cut ones), where a step ends
    at the latest, so that it takes in none of their work."""
    events = trace.events
    outer = _outer_rows(trace, rows)
    starts = [events.ts_ns[r] for r in outer]
    own_ends = [events.end_ns(r) for r in outer]
    if contiguous or len(outer) < 2:
        ends = own_ends
    else:
        period = statistics.median(b - a for a, b in itertools.pairwise(starts))
        ends = starts[1:] + [max(own_ends[-1], starts[-1] + int(period))]
    if stops:
        bounds = sorted(stops)
        for i, (start, own_end) in enumerate(zip(starts, own_ends)):
            after = bisect.bisect_right(bounds, start)
            if after < len(bounds):
                ends[i] = max(own_end, min(ends[i], bounds[after]))
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
    from tracer.join.replay.capture import GRAPH_LAUNCH_PREFIXES

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
    evidence = (
        (
            f"each of the {len(spans)} CUDA graph launches is one step ({len(spans[0][2])} kernels each, one graph), "
            "spanning the GPU work it replayed, as the trace has no step markers; work between launches is "
            "outside the steps"
        ),
    )
    return Steps(
        METHOD_GRAPH, tuple(s for s, _, _ in spans), tuple(e for _, e, _ in spans), "gpu", (), evidence
    )


def _forward_steps(trace: Trace, shape: ModelShape) -> Steps | None:
    """Calls of the outermost nn.Module (``LlamaForCausalLM_0``), when each runs every decoder layer.

    Of several root modules (a draft and a target model), the one whose calls each hold one whole
    set of the layer modules; without layer modules, the one called most often.
    """
    roots = _model_forward_rows(trace)
    if not roots:
        return None
    events = trace.events
    marks = shape.marks if shape.marks is not None and shape.marks.source.startswith("nn.Module") else None
    ranked = sorted(roots.items(), key=lambda item: (-len(item[1]), min(events.ts_ns[r] for r in item[1])))
    passed_over = []
    for name, rows in ranked:
        if len(rows) < 2:
            continue
        module = name.removeprefix("nn.Module: ")
        if marks is not None:
            held = [marks.sets_within(events.ts_ns[r], events.end_ns(r)) for r in rows]
            whole = sum(1 for distinct, most in held if distinct == marks.count and most == 1)
            if whole * 2 < len(rows):
                passed_over.append(
                    f"{module} ({len(rows)} calls) does not run all {marks.count} layers each time"
                )
                continue
            why = f"each runs all {marks.count} layers ({marks.source}) once"
        else:
            why = "no layer modules to check them against"
        steps = _from_markers(trace, rows, METHOD_FORWARD.format(name=module), contiguous=False)
        evidence = (f"{len(steps)} calls of the outermost module {module}: {why}", *passed_over)
        return replace(steps, evidence=evidence)
    return None


def _model_forward_rows(trace: Trace) -> dict[str, list[int]]:
    """Root nn.Module frames (inside no other module frame, by time, on their thread), by name.

    Python frames nest perfectly per thread, so a module frame inside no other module frame is a
    root; only ``nn.Module: ...`` rows are looked at.
    """
    import numpy as np

    from tracer.join.columns import column, group_by_thread, start_order
    from tracer.join.frame_names import frame_names

    events = trace.events
    frames = frame_names(events)
    python_rows, names = frames.rows, frames.names
    module_names = {n for n in frames.distinct if n.startswith("nn.Module: ")}
    if not module_names:
        return {}
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
        at = 0
        while at < len(row_list):
            roots[events.name[row_list[at]]].append(row_list[at])
            at = after[at]
    return roots


def _period_steps(work: StepWork, shape: ModelShape) -> Steps | None:
    """Steps from the period of the kernel sequence (GPU clock: kernels, in start order)."""
    import numpy as np

    from tracer.explain.step_period import find_period

    if len(work) < 4:
        return None
    gaps = np.zeros(len(work), dtype=np.int64)
    gaps[1:] = np.maximum(0, work.start_ns[1:] - np.maximum.accumulate(work.end_ns)[:-1])
    choice = find_period(work.codes, gaps, work.names, shape.layers)
    if choice is None:
        return None
    period = choice.period
    starts = [int(work.start_ns[c]) for c in period.cuts]
    ends = starts[1:] + [int(work.end_ns[period.cuts[-1] :].max())]
    anchors = ", ".join(_short(a) for a in period.anchors[:3]) + (" ..." if len(period.anchors) > 3 else "")
    if period.group > 1:
        evidence = [
            (
                f"the kernel sequence repeats every ~{period.typical // period.group} kernels ({len(period.anchors)} kernels "
                f"once each: {anchors}), and every {period.group}th repeat holds kernels the others do not after a wait "
                f"for the device: {sum(period.whole)} steps of {period.group} layers"
            )
        ]
    else:
        evidence = [
            (
                f"the kernel sequence repeats {period.repeats} times (~{period.typical} kernels each): "
                f"{len(period.anchors)} kernels that run least often ({anchors}) run once in every repeat"
            )
        ]
    if shape.layers and period.layer_check:
        evidence.append(
            f"each repeat holds all {shape.layers} layers ({shape.layers_source}): "
            + (
                f"{_short(period.per_layer_kernel)} runs a multiple of {shape.layers} times in it"
                if not (period.per_layer_kernel or "").startswith("a block of")
                else f"{period.per_layer_kernel} in it"
            )
        )
    elif shape.layers:
        evidence.append(
            f"no kernel runs a multiple of the {shape.layers} layers ({shape.layers_source}) in every repeat: "
            "the steps or the layer count may be wrong"
        )
    if period.cut_gap > 0:
        evidence.append(f"the repeats start after idle gaps of {period.cut_gap / 1e3:.1f} us (median)")
    evidence += [f"not a step: the period of {text}" for text in choice.passed_over]
    # CPU ops (no GPU work) run on the clock of the ranges and frames: the layer marks can be counted.
    clock = "cpu" if bool((work.when_ns == work.start_ns).all()) else "gpu"
    steps = Steps(METHOD_REPETITION, tuple(starts), tuple(ends), clock, (), tuple(evidence))
    keep = [i for i, whole in enumerate(period.whole) if whole]
    cut = [i for i, whole in enumerate(period.whole) if not whole]
    sizes = [b - a for a, b in zip(period.cuts, period.ends)]
    words = [
        f"{'the first' if i == 0 else 'the last' if i == len(period.whole) - 1 else 'a'} repeat ({sizes[i]} "
        f"kernel{'' if sizes[i] == 1 else 's'} "
        f"against ~{period.typical}) lacks kernels every whole repeat runs (cut by the trace's edge, or work outside "
        "the steps): left out"
        for i in cut
    ]
    return steps.keep(keep, words)


def layers_from_steps(steps: Steps, work: StepWork) -> tuple[int, str] | None:
    """The layer count from the block of kernels that repeats back to back inside a typical step
    (the one with the median number of activities), and the words for where it came from."""

    from tracer.explain.step_period import find_layer_block

    counts, by_step = _codes_by_step(steps, work)
    kinds = steps.stages or ("",) * len(steps)
    usual = [i for i in range(len(steps)) if not kinds[i]] or list(range(len(steps)))
    typical = sorted(usual, key=lambda i: counts[i])[(len(usual) - 1) // 2]  # the lower median
    block = find_layer_block(by_step[typical])
    if block is None:
        return None
    source = f"kernel sequence: a block of {block.kernels} kernels repeats {block.repeats} times in a step"
    return block.repeats, source


def _short(name: str | None) -> str:
    text = name or "?"
    return text if len(text) <= 40 else text[:37] + "..."


def _step_counts(steps: Steps, work: StepWork) -> tuple[np.ndarray, np.ndarray]:
    """(activities per step, step index of each activity or -1) on the steps' clock."""
    import numpy as np

    when = work.when_ns if steps.clock == "cpu" else work.start_ns
    starts = np.asarray(steps.starts_ns, dtype=np.int64)
    ends = np.asarray(steps.ends_ns, dtype=np.int64)
    index = np.searchsorted(starts, when, side="right") - 1
    inside = index >= 0
    inside[inside] = when[inside] < ends[index[inside]]
    index[~inside] = -1
    counts = np.bincount(index[inside], minlength=len(steps))
    return counts, index


def _codes_by_step(steps: Steps, work: StepWork) -> tuple[np.ndarray, list[np.ndarray]]:
    """(activities per step, the kernel codes of each step), one sort instead of a pass per step."""
    import numpy as np

    counts, index = _step_counts(steps, work)
    order = np.argsort(index, kind="stable")
    ranked = index[order]
    bounds = np.searchsorted(ranked, np.arange(len(steps) + 1), side="left")
    codes = work.codes[order]
    return counts, [codes[bounds[i] : bounds[i + 1]] for i in range(len(steps))]


def _without_cut_edges(steps: Steps, work: StepWork, shape: ModelShape, windowed: bool) -> Steps:
    """Leave out a first or last step the trace's edges (or --window) cut: one holding part of the
    layers the trace marks; one holding far fewer activities than a typical step, none of them more
    often; in a windowed trace, one reaching past the loaded work and holding fewer activities."""
    import numpy as np

    if len(steps) < 2 or not len(work):
        return steps
    counts, by_step = _codes_by_step(steps, work)
    inner = counts[1:-1] if len(steps) > 2 else counts
    typical = float(np.median(inner))
    if typical <= 0:
        return steps
    held_by_step: list[np.ndarray] = [np.bincount(codes, minlength=len(work.names)) for codes in by_step]
    typical_held = np.median(
        np.stack(
            held_by_step[1:-1]
            or [np.bincount(np.concatenate(by_step), minlength=len(work.names)) / len(steps)]
        ),
        axis=0,
    )
    marks = shape.marks if steps.clock == "cpu" else None
    if (
        marks is not None and len(steps) > 2
    ):  # only where the steps hold whole sets (not --step-range on layers)
        middle = len(steps) // 2
        if marks.sets_within(steps.starts_ns[middle], steps.ends_ns[middle])[0] < marks.count:
            marks = None
    starts, ends = sorted(work.start_ns.tolist()), sorted(work.end_ns.tolist())
    loaded = (
        starts[min(2, len(starts) - 1)],
        ends[max(0, len(ends) - 3)],
    )  # the window's work, not one odd op
    slack = 0.05 * statistics.median(e - s for s, e in zip(steps.starts_ns, steps.ends_ns))
    drop, words = [], []
    for i, where in ((0, "first"), (len(steps) - 1, "last")):
        held = np.bincount(by_step[i], minlength=len(work.names))
        layers = marks.sets_within(steps.starts_ns[i], steps.ends_ns[i])[0] if marks is not None else None
        reaches_out = (
            steps.starts_ns[i] < loaded[0] - slack if i == 0 else steps.ends_ns[i] > loaded[1] + slack
        ) or steps.method == METHOD_REPETITION  # repeats start and end at loaded work: the edges are suspect
        if layers is not None and marks is not None and 0 < layers < marks.count:
            why = f"holds {layers} of the {marks.count} layers ({marks.source})"
        elif counts[i] < PARTIAL_BELOW * typical and bool((held <= typical_held).all()):
            why = f"holds {counts[i]} activities against {typical:.0f} in a typical step"
        elif windowed and reaches_out and counts[i] < 0.9 * typical:
            why = f"reaches past the loaded window and holds {counts[i]} activities against {typical:.0f}"
        else:
            continue
        if i not in drop:
            drop.append(i)
            words.append(f"the {where} step {why} (cut by the trace's edge or --window): left out")
    if not drop or len(drop) >= len(steps):
        return steps
    return steps.keep([i for i in range(len(steps)) if i not in drop], words)


def _stages_by_content(steps: Steps, work: StepWork) -> Steps:
    """Steps that run kernels the typical step does not (a prefill before decode steps) are another
    kind: counted per step of their own kind."""
    import numpy as np

    if len(steps) < 3 or not len(work):
        return steps
    _, by_step = _codes_by_step(steps, work)
    signatures = [frozenset(np.unique(codes).tolist()) for codes in by_step]
    seen = Counter(code for s in signatures for code in s)
    usual = frozenset(code for code, count in seen.items() if count * 2 > len(steps))  # in most steps
    # Another kind: two or more kernels that most steps do not run, well beyond what any step adds
    # (a kernel every other step is not a kind of step).
    extra = [len(s - usual) for s in signatures]
    odd = [i for i, n in enumerate(extra) if n >= 2 and n > 2 * statistics.median(extra)]
    if not odd or len(odd) * 2 >= len(steps):
        return steps
    common = usual
    stages = tuple("other" if i in odd else "" for i in range(len(steps)))
    which = ", ".join(str(i + 1) for i in odd[:5]) + (" ..." if len(odd) > 5 else "")
    extra_kernels = len(set().union(*(signatures[i] for i in odd)) - common)
    words = (
        f"step{'s' if len(odd) > 1 else ''} {which} run{'' if len(odd) > 1 else 's'} {extra_kernels} kernels the other "
        f"{len(steps) - len(odd)} steps do not (a prefill?): kernels of one kind of step are counted per step of that kind"
    )
    return replace(steps, stages=stages, evidence=steps.evidence + (words,))
