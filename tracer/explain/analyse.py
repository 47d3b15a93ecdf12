"""`analyse`: the join's attributions -> findings (kernel x origin) with cost, steps, invariants, bytes."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from tracer.explain.bandwidth import (
    BASIS_DEVICE,
    BASIS_ESTIMATE,
    CallBytes,
    call_bytes,
    describe_shapes,
    peak_gbps_for,
)
from tracer.explain.invariants import state_invariant
from tracer.explain.kernels import categorise, shorten
from tracer.explain.optree import OpTree, rows_of
from tracer.explain.steps import Steps, find_steps
from tracer.explain.structure import ModelShape, find_model_shape, tokens_per_step
from tracer.explain.waste import whole_buffer_cast
from tracer.model.events import NONE, Cat, EventTable, Trace
from tracer.model.finding import Analysis, Finding
from tracer.model.origin import Attributions, Origin

LAUNCH_BOUND_BELOW = 0.6  # GPU busy fraction under which the GPU mostly waits for the CPU
MAX_SHAPES = 3  # distinct launching-op shapes kept per finding
WASTE_SAMPLES = 3  # calls of a cast finding checked for whole-buffer waste
_DIGITS = re.compile(r"\d+")


@dataclass
class _Activity:
    """One timed unit of work: a GPU kernel/memcpy/memset, or a CPU op's self time (CPU-only traces)."""

    row: int
    ns: int
    origin_id: int
    op_row: int
    when_ns: int  # the time that places it in a step (launch time on the CPU clock, start on the GPU)
    # The op whose shapes size it: the launching op, or for a graph replay its capture-time op (in
    # the capture's table, maybe another trace's); `launch` tells one replay's call from another's.
    shape_table: EventTable | None = None
    shape_row: int = NONE
    launch: int = NONE


@dataclass
class _Group:
    """Running totals of one (kernel name, origin key) while the activities stream past."""

    kernel: str
    category: str
    calls: int = 0
    total_ns: int = 0
    per_step: list[int] = field(default_factory=list)
    bytes_sum: int = 0
    bytes_ns: int = 0
    bytes_calls: int = 0
    bases: set[str] = field(default_factory=set)
    shapes: Counter = field(default_factory=Counter)
    origin_ns: Counter = field(default_factory=Counter)
    op_rows: list[tuple[EventTable, int]] = field(default_factory=list)  # shape ops, sampled for waste


def analyse(
    attributions: Attributions,
    *,
    layers: int | None = None,
    config: Path | None = None,
    step_range: str | None = None,
    peak_gbps: float | None = None,
) -> Analysis:
    """Group the attributed GPU time (or CPU op self time, without GPU events) into ranked findings."""
    trace = attributions.trace
    events = trace.events
    tree = OpTree(events)
    gpu_rows = [r for r in attributions.gpu_rows if Cat(events.cat[r]).is_gpu]
    time_basis = "gpu" if gpu_rows or _has_gpu_events(trace) else "cpu"
    notes: list[str] = list(trace.notes)

    activities = _gpu_activities(attributions) if time_basis == "gpu" else _cpu_activities(attributions, tree)
    sequence = [(events.ts_ns[a.row], events.end_ns(a.row), events.name[a.row]) for a in activities]
    shape = find_model_shape(trace, layers=layers, config=config)
    steps = find_steps(trace, step_range=step_range, gpu_sequence=sequence, layers=shape.layers)
    if steps is not None and steps.clock == "gpu":
        for a in activities:
            a.when_ns = events.ts_ns[a.row]
    if steps is not None and steps.labels:
        shape = replace(shape, tokens_per_step=tokens_per_step(steps.labels))

    in_window, step_of = _window(activities, steps)
    if steps is not None and len(in_window) < len(activities):
        left_ns = sum(a.ns for a in activities) - sum(a.ns for a in in_window)
        notes.append(
            f"{len(activities) - len(in_window)} activities ({left_ns / 1e6:.3f} ms) outside the steps were left out"
        )

    device = trace.meta.device_name if time_basis == "gpu" else None
    memory = trace.meta.devices[0].get("totalGlobalMem") if trace.meta.devices else None
    peak = peak_gbps if peak_gbps is not None else peak_gbps_for(device, memory)
    if peak_gbps is not None and peak_gbps <= 0:
        from tracer.errors import InputError

        raise InputError("--peak-gbps", f"must be positive, not {peak_gbps}")

    bytes_of = _bytes_per_activity(attributions, in_window, time_basis)
    groups = _group(attributions, in_window, step_of, len(steps) if steps else 0, bytes_of, time_basis)
    total_ns = sum(a.ns for a in in_window)
    trees = {id(events): tree}
    findings = [_finding(attributions, trees, g, total_ns, steps, shape, peak) for g in groups.values()]
    findings.sort(key=lambda f: (-f.total_ns, f.kernel_short, f.origin.key))

    window_ns, busy = _busy(events, in_window, steps, time_basis)
    attributed_ns = replay_ns = replay_attributed_ns = 0
    for a in in_window:
        origin = attributions.origins[a.origin_id]
        has_line = origin.file is not None and origin.line is not None
        attributed_ns += a.ns if has_line else 0
        if origin.replay:
            replay_ns += a.ns
            replay_attributed_ns += a.ns if has_line else 0

    notes.extend(_notes(time_basis, steps, shape, busy, device, peak, findings, window_ns))
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
        layers=shape.layers,
        attributed_fraction=attributed_ns / total_ns if total_ns else 0.0,
        replay_fraction=replay_ns / total_ns if total_ns else 0.0,
        replay_attributed_fraction=replay_attributed_ns / replay_ns if replay_ns else 0.0,
        rank=trace.meta.rank,
        notes=tuple(dict.fromkeys(notes)),
    )


def _has_gpu_events(trace: Trace) -> bool:
    return bool(rows_of(trace.events, Cat.KERNEL, Cat.MEMCPY, Cat.MEMSET))


def _gpu_activities(attributions: Attributions) -> list[_Activity]:
    events = attributions.trace.events
    launch_ts = _launch_times(attributions)
    out = []
    for i, row in enumerate(attributions.gpu_rows):
        if not Cat(events.cat[row]).is_gpu:
            continue
        op = attributions.op_rows[i]
        when = events.ts_ns[op] if op != NONE else launch_ts.get(events.correlation[row], events.ts_ns[row])
        activity = _Activity(row, events.dur_ns[row], attributions.origin_ids[i], op, when)
        if op != NONE:
            activity.shape_table, activity.shape_row = events, op
        elif row in attributions.capture_ops:
            capture, capture_op = attributions.capture_ops[row]
            activity.shape_table, activity.shape_row = capture.events, capture_op
            activity.launch = events.correlation[row]  # the graph launch: one call of the op per replay
        out.append(activity)
    return out


def _launch_times(attributions: Attributions) -> dict[int, int]:
    """correlation -> start of the runtime call that launched it (graph replays have no op)."""
    events = attributions.trace.events
    wanted = {
        events.correlation[row]
        for i, row in enumerate(attributions.gpu_rows)
        if attributions.op_rows[i] == NONE and events.correlation[row] != NONE
    }
    if not wanted:
        return {}
    return {
        events.correlation[r]: events.ts_ns[r]
        for r in rows_of(events, Cat.RUNTIME, Cat.DRIVER)
        if events.correlation[r] in wanted
    }


def _cpu_activities(attributions: Attributions, tree: OpTree) -> list[_Activity]:
    """CPU-only traces: every attributed cpu_op with its self time (so nested ops are not counted twice)."""
    events = attributions.trace.events
    out = []
    for i, row in enumerate(attributions.gpu_rows):
        if events.cat[row] != Cat.CPU_OP:
            continue
        self_ns = tree.self_ns(row)
        if self_ns > 0:
            out.append(
                _Activity(row, self_ns, attributions.origin_ids[i], row, events.ts_ns[row], events, row)
            )
    return out


def _window(activities: list[_Activity], steps: Steps | None) -> tuple[list[_Activity], list[int]]:
    if steps is None:
        return activities, [-1] * len(activities)
    kept, step_of = [], []
    for a in activities:
        index = steps.index_of(a.when_ns)
        if index is not None:
            kept.append(a)
            step_of.append(index)
    return kept, step_of


def _bytes_per_activity(
    attributions: Attributions, activities: list[_Activity], basis: str
) -> list[CallBytes | None]:
    """Bytes of each activity; an op call that launched several kernels gives its bytes to the longest
    one (a graph replay's kernels are one call of their capture-time op per replay)."""
    events = attributions.trace.events
    longest: dict[tuple[int, int, int], _Activity] = {}
    if basis == "gpu":
        for a in activities:
            if a.shape_row != NONE and events.cat[a.row] == Cat.KERNEL:
                call = (id(a.shape_table), a.shape_row, a.launch)
                best = longest.get(call)
                if best is None or a.ns > best.ns:
                    longest[call] = a
    cache: dict[tuple[int, str, str], CallBytes | None] = {}
    out: list[CallBytes | None] = []
    for a in activities:
        cat = events.cat[a.row]
        if cat in (Cat.MEMCPY, Cat.MEMSET):
            count = (events.args[a.row] or {}).get("bytes")
            out.append(CallBytes(int(count), BASIS_DEVICE) if isinstance(count, (int, float)) else None)
            continue
        if a.shape_row == NONE or (
            basis == "gpu" and longest.get((id(a.shape_table), a.shape_row, a.launch)) is not a
        ):
            out.append(None)
            continue
        table = a.shape_table
        args = table.args[a.shape_row]
        op_name, kernel = table.name[a.shape_row], events.name[a.row]
        # The loader interns identical args dicts, so their identity is a cheap cache key.
        key = (id(args), op_name, kernel if op_name == "aten::cat" else "")
        if key not in cache:
            cache[key] = call_bytes(op_name, args, kernel)
        out.append(cache[key])
    return out


def _group(
    attributions: Attributions,
    activities: list[_Activity],
    step_of: list[int],
    steps: int,
    bytes_of: list[CallBytes | None],
    basis: str,
) -> dict[tuple[str, str], _Group]:
    events = attributions.trace.events
    origins = attributions.origins
    groups: dict[tuple[str, str], _Group] = {}
    shape_cache: dict[tuple[int, str], str] = {}
    keys: dict[int, str] = {}  # origin id -> Origin.key, a property worth computing once
    for a, step, moved in zip(activities, step_of, bytes_of):
        origin = origins[a.origin_id]
        kernel = events.name[a.row]
        origin_key = keys.get(a.origin_id)
        if origin_key is None:
            origin_key = keys[a.origin_id] = origin.key
        key = (kernel, origin_key)
        group = groups.get(key)
        if group is None:
            cat = events.cat[a.row]
            category = categorise(
                kernel, origin.ops, is_memcpy=cat == Cat.MEMCPY, is_memset=cat == Cat.MEMSET
            )
            group = groups[key] = _Group(kernel, category, per_step=[0] * steps)
        group.calls += 1
        group.total_ns += a.ns
        group.origin_ns[a.origin_id] += a.ns
        if step >= 0:
            group.per_step[step] += 1
        if moved is not None:
            group.bytes_sum += moved.bytes
            group.bytes_ns += a.ns
            group.bytes_calls += 1
            group.bases.add(moved.basis)
        if a.shape_row != NONE:
            table = a.shape_table
            if len(group.op_rows) < 64:
                group.op_rows.append((table, a.shape_row))
            args = table.args[a.shape_row]
            shape_key = (id(args), table.name[a.shape_row])
            text = shape_cache.get(shape_key)
            if text is None:
                text = shape_cache[shape_key] = describe_shapes(table.name[a.shape_row], args)
            group.shapes[text] += 1
    return groups


def _finding(
    attributions: Attributions,
    trees: dict[int, OpTree],
    group: _Group,
    total_ns: int,
    steps: Steps | None,
    shape: ModelShape,
    peak: float | None,
) -> Finding:
    origin = _representative_origin(attributions, group)
    bytes_per_call = gbps = peak_fraction = basis = None
    # Bytes only when most calls have them: a mean over a few calls would misstate the rest.
    if group.bytes_calls and group.bytes_calls * 2 >= group.calls and group.bytes_ns > 0:
        bytes_per_call = round(group.bytes_sum / group.bytes_calls)
        gbps = group.bytes_sum / group.bytes_ns  # bytes per ns == GB/s
        peak_fraction = gbps / peak if peak else None
        basis = BASIS_ESTIMATE if BASIS_ESTIMATE in group.bases else min(group.bases)
    n_steps = len(steps) if steps else None
    in_steps = sum(group.per_step)
    shapes = tuple(
        f"{text} (x{count})" if len(group.shapes) > 1 else text
        for text, count in group.shapes.most_common(MAX_SHAPES)
    )
    return Finding(
        kernel=group.kernel,
        kernel_short=shorten(group.kernel),
        category=group.category,
        origin=origin,
        calls=group.calls,
        total_ns=group.total_ns,
        share=group.total_ns / total_ns if total_ns else 0.0,
        steps=n_steps,
        calls_per_step=in_steps / n_steps if n_steps else None,
        invariant=state_invariant(group.per_step, shape) if n_steps else None,
        bytes_per_call=bytes_per_call,
        gbps=gbps,
        peak_fraction=peak_fraction,
        shapes=shapes,
        waste=_waste(trees, group),
        bytes_basis=basis,
    )


def _representative_origin(attributions: Attributions, group: _Group) -> Origin:
    """The origin with the most time; range names that differ across the group get ``*`` for digits."""
    ids = [i for i, _ in group.origin_ns.most_common()]
    origin = attributions.origins[ids[0]]
    if len(ids) == 1:
        return origin
    others = [attributions.origins[i] for i in ids[1:]]
    ranges = list(origin.ranges)
    for position, name in enumerate(ranges):
        if any(len(o.ranges) != len(ranges) or o.ranges[position] != name for o in others):
            ranges[position] = _DIGITS.sub("*", name)
    return replace(origin, ranges=tuple(ranges)) if tuple(ranges) != origin.ranges else origin


def _waste(trees: dict[int, OpTree], group: _Group) -> str | None:
    """A whole-buffer cast among a few sampled calls; ``trees``: op trees by id of their event table."""
    if group.category != "cast/copy" or not group.op_rows:
        return None
    rows = group.op_rows
    picks = {(id(t), r): (t, r) for t, r in (rows[0], rows[len(rows) // 2], rows[-1])}
    for table, row in sorted(picks.values(), key=lambda pick: pick[1])[:WASTE_SAMPLES]:
        tree = trees.get(id(table))
        if tree is None:
            tree = trees[id(table)] = OpTree(table)
        found = whole_buffer_cast(tree, row)
        if found is not None:
            return found.text
    return None


def _busy(events, activities: list[_Activity], steps: Steps | None, basis: str) -> tuple[int, float | None]:
    """(window wall ns, union of GPU activity / window); the fraction is None on the CPU basis."""
    if not activities:
        return 0, None
    starts = [events.ts_ns[a.row] for a in activities]
    ends = [events.ts_ns[a.row] + events.dur_ns[a.row] for a in activities]
    if steps is not None:
        begin, finish = steps.window
        finish = max(finish, max(ends)) if basis == "gpu" else finish
    else:
        begin, finish = min(starts), max(ends)
    window = max(0, finish - begin)
    if basis != "gpu" or window == 0:
        return window, None
    by_device: dict[int, list[tuple[int, int]]] = {}
    for a, start, end in zip(activities, starts, ends):
        by_device.setdefault(events.pid[a.row], []).append((start, end))
    busy = 0
    for spans in by_device.values():
        spans.sort()
        current_start, current_end = spans[0]
        for start, end in spans[1:]:
            if start > current_end:
                busy += current_end - current_start
                current_start, current_end = start, end
            elif end > current_end:
                current_end = end
        busy += current_end - current_start
    return window, min(1.0, busy / (window * len(by_device)))


def _notes(
    basis: str,
    steps: Steps | None,
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
        text = f"{len(steps)} steps from {steps.method}, {steps.mean_ns / 1e6:.3f} ms each on average"
        notes.append(text + (f" ({steps.note})" if steps.note else ""))
    else:
        notes.append(
            "no steps found (no ProfilerStep#N, SGLang step[...] range, repeated model forward or repeating "
            "kernel sequence): calls/step unknown; --step-range NAME names the step range"
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
                f"GPU busy {busy:.0%} of the {window_ns / 1e6:.3f} ms window, idle {idle:.0%}: launch-bound "
                "(the GPU waits for the CPU to launch work; CUDA graphs or fewer, larger kernels help)"
            )
        else:
            notes.append(f"GPU busy {busy:.0%} of the {window_ns / 1e6:.3f} ms window, idle {idle:.0%}")
    if basis == "gpu" and peak is None:
        notes.append(f"no peak bandwidth known for device {device!r}: give --peak-gbps to get % of peak")
    if any(f.bytes_basis == BASIS_ESTIMATE for f in findings):
        notes.append(
            "bytes/call marked 'estimate' (GEMM, elementwise) count each operand read once and the result "
            "written once; copies and casts are exact from shapes"
        )
    return notes
