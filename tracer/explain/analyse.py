"""`analyse`: the join's attributions -> findings (kernel x origin) with cost, steps, invariants, bytes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tracer.explain.activities import (
    Activities,
    busy_window,
    cpu_activities,
    exact_sums,
    gpu_activities,
    has_gpu_events,
    in_steps,
)
from tracer.explain.bandwidth import BASIS_ESTIMATE, peak_gbps_for
from tracer.explain.findings import bytes_per_activity, group_activities, make_finding
from tracer.explain.invariants import StepCheck, check_steps, per_step_calls, state_invariant
from tracer.explain.optree import OpTree
from tracer.explain.steps import Steps, StepWork, find_steps, layers_from_steps, work_of_trace
from tracer.explain.structure import ModelShape, find_model_shape, tokens_per_step
from tracer.formatting import format_duration, format_share
from tracer.join.columns import column, values_at
from tracer.model.events import Cat
from tracer.model.finding import Analysis, Finding
from tracer.model.origin import Attributions

LAUNCH_BOUND_BELOW = 0.6  # GPU busy fraction under which the GPU mostly waits for the CPU


def analyse(
    attributions: Attributions,
    *,
    layers: int | None = None,
    config: Path | None = None,
    step_range: str | None = None,
    peak_gbps: float | None = None,
    step_methods: tuple[str, ...] | None = None,
) -> Analysis:
    """Group the attributed GPU time (or CPU op self time, without GPU events) into ranked findings."""
    import numpy as np

    trace = attributions.trace
    events = trace.events
    tree = OpTree(events)
    gpu_cats = tuple(int(c) for c in Cat if c.is_gpu)
    has_gpu_rows = bool(np.isin(column(events.cat)[column(attributions.gpu_rows)], gpu_cats).any())
    time_basis = "gpu" if has_gpu_rows or has_gpu_events(trace) else "cpu"
    notes: list[str] = list(trace.notes)

    activities = gpu_activities(attributions) if time_basis == "gpu" else cpu_activities(attributions, tree)
    shape = find_model_shape(trace, layers=layers, config=config)
    work: list[StepWork] = []

    def step_work() -> StepWork:
        if not work:
            # CPU-only traces: every op, not only the leaves: embedding, argmax and the LM head's linear
            # run once per step, while their leaves (empty, view) run at other counts too.
            work.append(_step_work(events, activities) if time_basis == "gpu" else work_of_trace(trace))
        return work[0]

    steps = find_steps(trace, step_range=step_range, work=step_work, shape=shape, methods=step_methods)
    check = StepCheck()
    if steps is not None:
        if shape.layers is None:
            found = layers_from_steps(steps, step_work())
            if found is not None:
                shape = replace(shape, layers=found[0], layers_source=found[1])
        check = check_steps(steps, shape)
        shape = replace(shape, approximate=check.approximate)
    if steps is not None and steps.clock == "gpu":
        activities.when_ns = column(events.ts_ns)[activities.row]
    if steps is not None and steps.labels:
        shape = replace(shape, tokens_per_step=tokens_per_step(steps.labels))

    in_window, step_of = in_steps(activities, steps)
    if steps is not None and len(in_window) < len(activities):
        left_ns = activities.total_ns() - in_window.total_ns()
        left = len(activities) - len(in_window)
        notes.append(f"{left} activities ({format_duration(left_ns)}) outside the steps were left out")

    device = trace.meta.device_name if time_basis == "gpu" else None
    memory = trace.meta.devices[0].get("totalGlobalMem") if trace.meta.devices else None
    peak = peak_gbps if peak_gbps is not None else peak_gbps_for(device, memory)
    if peak_gbps is not None and peak_gbps <= 0:
        from tracer.errors import InputError

        raise InputError("--peak-gbps", f"must be positive, not {peak_gbps}")

    bytes_of = bytes_per_activity(attributions, in_window, time_basis)
    step_count = len(steps) if steps else 0
    groups = group_activities(attributions, in_window, step_of, step_count, bytes_of, time_basis)
    total_ns = in_window.total_ns()
    trees = {id(events): tree}
    findings = [
        _per_own_kind(
            make_finding(attributions, trees, g, total_ns, steps, shape, peak), g.per_step, steps, shape
        )
        for g in groups.values()
    ]
    findings.sort(key=lambda f: (-f.total_ns, f.kernel_short, f.origin.key))

    window_ns, busy = busy_window(events, in_window, steps, time_basis)
    attributed_ns, replay_ns, replay_attributed_ns = _attributed_ns(attributions, in_window)

    notes.extend(_notes(time_basis, steps, check, shape, busy, device, peak, findings, window_ns))
    early_ns = sum(f.total_ns for f in findings if f.origin.before_trace)
    if early_ns:
        notes.append(
            f"{format_share(early_ns / total_ns)} of GPU time ran work launched before the profiler started (the "
            "GPU was still busy with earlier steps): no origin; a torch.cuda.synchronize() just before "
            "the recorded steps leaves it out (`kerneltrace profile` does)"
        )
    return Analysis(
        trace=trace.meta.path,
        findings=tuple(findings),
        time_basis=time_basis,
        device=device,
        peak_gbps=peak,
        total_ns=total_ns,
        window_ns=window_ns,
        gpu_busy_fraction=busy,
        steps=len(steps) if steps else None,
        step_ns=steps.mean_ns if steps else None,
        step_method=steps.method if steps else None,
        step_evidence=_step_evidence(steps, check) if steps else (),
        step_starts_ns=steps.starts_ns if steps else (),
        step_ends_ns=steps.ends_ns if steps else (),
        step_kinds=steps.stages if steps and any(steps.stages) else (),
        steps_exact=not check.approximate,
        layers=shape.layers,
        attributed_fraction=attributed_ns / total_ns if total_ns else 0.0,
        replay_fraction=replay_ns / total_ns if total_ns else 0.0,
        replay_attributed_fraction=replay_attributed_ns / replay_ns if replay_ns else 0.0,
        rank=trace.meta.rank,
        notes=tuple(dict.fromkeys(notes)),
    )


def _step_work(events, activities: Activities) -> StepWork:
    """The activities as step detection reads them: in start order, placed by launch time."""
    import numpy as np

    starts = column(events.ts_ns)[activities.row]
    order = np.argsort(starts, kind="stable")
    rows = activities.row[order]
    names = events.name
    return StepWork.of(
        activities.when_ns[order],
        starts[order],
        starts[order] + column(events.dur_ns)[rows],
        activities.ns[order],
        values_at(names, rows),
    )


def _per_own_kind(finding: Finding, per_step, steps: Steps | None, shape: ModelShape) -> Finding:
    """Calls/step over the steps of the kinds the kernel runs in (a decode kernel over the decode
    steps, not over the prefill too), and the invariant in the words that go with it."""
    if steps is None or not len(per_step):
        return finding
    kinds = steps.stages if any(steps.stages) else ()
    if not kinds and not shape.approximate:
        return finding
    return replace(
        finding,
        calls_per_step=per_step_calls(per_step, kinds),
        invariant=state_invariant(per_step, shape, kinds),
    )


def _step_evidence(steps: Steps, check: StepCheck) -> tuple[str, ...]:
    """How the steps were found and checked, in sentences, for the summary and --json."""
    return (*steps.evidence, *check.confirmed, *check.disagreements, *check.layer_doubts, *steps.left_out)


def _attributed_ns(attributions: Attributions, activities: Activities) -> tuple[int, int, int]:
    """ns of the activities whose origin names a line; of graph replays; of replays with a line."""
    import numpy as np

    origins = attributions.origins
    line = np.asarray([o.file is not None and o.line is not None for o in origins], dtype=np.int64)
    replay = np.asarray([o.replay for o in origins], dtype=np.int64)
    if not len(activities):
        return 0, 0, 0
    # Origin kinds as groups: 0 none, 1 line, 2 replay, 3 replay with a line.
    kind = (line + 2 * replay)[activities.origin_id]
    by_kind = exact_sums(activities.ns, kind, 4)
    return by_kind[1] + by_kind[3], by_kind[2] + by_kind[3], by_kind[3]


def _notes(
    basis: str,
    steps: Steps | None,
    check: StepCheck,
    shape: ModelShape,
    busy: float | None,
    device: str | None,
    peak: float | None,
    findings: list[Finding],
    window_ns: int,
) -> list[str]:
    notes = []
    if basis == "cpu":
        notes.append(
            "CPU time basis: findings rank leaf CPU ops (ops that call no other op; for others, their self "
            "time) by time, grouped by op and origin like kernels"
        )
    if steps is not None:
        text = f"{len(steps)} steps from {steps.method}, {format_duration(steps.mean_ns)} each on average"
        notes.append(text + (f" ({steps.note})" if steps.note else ""))
        notes.extend(check.confirmed)
        for doubt in check.disagreements:
            notes.append(f"the evidence disagrees: {doubt}; calls/step are approximate (~)")
        notes.extend(check.layer_doubts)
        notes.extend(steps.left_out)
    else:
        notes.append(
            "no steps found (no ProfilerStep#N, SGLang step[...] span, repeating range holding the layers, "
            "CUDA graph launch per step, repeated model forward or repeating kernel sequence): calls/step "
            "unknown; --step-range NAME names the step range"
        )
    if shape.layers:
        notes.append(f"{shape.layers} layers (from {shape.layers_source})")
    elif steps is not None:
        notes.append(
            "layer count unknown: give --layers N or --config config.json to check per-layer invariants"
        )
    if busy is not None:
        idle = 1.0 - busy
        if busy < LAUNCH_BOUND_BELOW:
            notes.append(
                f"GPU busy {format_share(busy)} of the {format_duration(window_ns)} window, idle {format_share(idle)}: "
                "launch-bound "
                "(the GPU waits for the CPU to launch work; CUDA graphs or fewer, larger kernels help)"
            )
        else:
            notes.append(
                f"GPU busy {format_share(busy)} of the {format_duration(window_ns)} window, idle {format_share(idle)}"
            )
    if basis == "gpu" and peak is None:
        notes.append(f"no peak bandwidth known for device {device!r}: give --peak-gbps to get % of peak")
    if any(f.bytes_basis == BASIS_ESTIMATE for f in findings):
        notes.append(
            "bytes/call marked 'estimate' (GEMM, elementwise) count each operand read once and the result "
            "written once; copies and casts are exact from shapes"
        )
    return notes
