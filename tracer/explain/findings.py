"""Activities grouped by (kernel, origin) into findings: bytes per call, shapes, invariant, waste."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace

from tracer.explain.activities import Activity
from tracer.explain.bandwidth import BASIS_DEVICE, BASIS_ESTIMATE, CallBytes, call_bytes, describe_shapes
from tracer.explain.invariants import state_invariant
from tracer.explain.kernels import categorise, shorten
from tracer.explain.optree import OpTree
from tracer.explain.steps import Steps
from tracer.explain.structure import ModelShape
from tracer.explain.waste import whole_buffer_cast
from tracer.model.events import NONE, Cat, EventTable
from tracer.model.finding import Finding
from tracer.model.origin import Attributions, Origin

MAX_SHAPES = 3  # distinct launching-op shapes kept per finding
WASTE_SAMPLES = 3  # calls of a cast finding checked for whole-buffer waste
_DIGITS = re.compile(r"\d+")


@dataclass
class Group:
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


def bytes_per_activity(
    attributions: Attributions, activities: list[Activity], basis: str
) -> list[CallBytes | None]:
    """Bytes of each activity; an op call that launched several kernels gives its bytes to the longest
    one (a graph replay's kernels are one call of their capture-time op per replay)."""
    events = attributions.trace.events
    longest: dict[tuple[int, int, int], Activity] = {}
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


def group_activities(
    attributions: Attributions,
    activities: list[Activity],
    step_of: list[int],
    steps: int,
    bytes_of: list[CallBytes | None],
    basis: str,
) -> dict[tuple[str, str], Group]:
    """The activities grouped by (kernel name, origin key): time, calls per step, bytes, shapes."""
    events = attributions.trace.events
    origins = attributions.origins
    groups: dict[tuple[str, str], Group] = {}
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
            group = groups[key] = Group(kernel, category, per_step=[0] * steps)
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


def make_finding(
    attributions: Attributions,
    trees: dict[int, OpTree],
    group: Group,
    total_ns: int,
    steps: Steps | None,
    shape: ModelShape,
    peak: float | None,
) -> Finding:
    """One group's `Finding`; bytes/call only when most calls have them, % of ``peak`` when known."""
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


def _representative_origin(attributions: Attributions, group: Group) -> Origin:
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


def _waste(trees: dict[int, OpTree], group: Group) -> str | None:
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
