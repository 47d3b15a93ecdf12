"""Activities grouped by (kernel, origin) into findings: bytes per call, shapes, invariant, waste."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tracer.explain.activities import Activities, exact_sums
from tracer.explain.bandwidth import BASIS_DEVICE, BASIS_ESTIMATE, CallBytes, call_bytes, describe_shapes
from tracer.explain.invariants import state_invariant
from tracer.explain.kernels import categorise, shorten
from tracer.explain.optree import OpTree
from tracer.explain.steps import Steps
from tracer.explain.structure import ModelShape
from tracer.explain.waste import whole_buffer_cast
from tracer.join.columns import ValueCodes, column, values_at
from tracer.model.events import NONE, Cat, EventTable
from tracer.model.finding import Finding
from tracer.model.origin import Attributions, Origin

if TYPE_CHECKING:
    import numpy as np

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
    attributions: Attributions, activities: Activities, basis: str
) -> tuple[np.ndarray, list[CallBytes]]:
    """Bytes of each activity, as (index into the list of distinct `CallBytes`, -1 for none; that list).

    An op call that launched several kernels gives its bytes to the longest one (a graph replay's
    kernels are one call of their capture-time op per replay).
    """
    import numpy as np

    events = attributions.trace.events
    count = len(activities)
    codes = np.full(count, -1, dtype=np.int64)
    values: dict[CallBytes, int] = {}
    cat = column(events.cat)[activities.row]
    copies = np.flatnonzero((cat == Cat.MEMCPY) | (cat == Cat.MEMSET))
    for i, row in zip(copies.tolist(), activities.row[copies].tolist()):
        moved = (events.args[row] or {}).get("bytes")
        if isinstance(moved, (int, float)):
            codes[i] = values.setdefault(CallBytes(int(moved), BASIS_DEVICE), len(values))
    sized = (activities.shape_row != NONE) & (cat != Cat.MEMCPY) & (cat != Cat.MEMSET)
    if basis == "gpu":
        # Only the longest kernel of each call (the first of equals): sort calls by time, longest last.
        kernels = np.flatnonzero(sized & (cat == Cat.KERNEL))
        call = _pair_codes(
            _pair_codes(activities.shape_table[kernels], activities.shape_row[kernels]),
            activities.launch[kernels],
        )
        order = np.lexsort((-kernels, activities.ns[kernels], call))
        ranked = call[order]
        last = np.concatenate([ranked[1:] != ranked[:-1], [True]]) if len(ranked) else ranked.astype(bool)
        sized = np.zeros(count, dtype=bool)
        sized[kernels[order[last]]] = True
    picked = np.flatnonzero(sized)
    which = activities.shape_table[picked]
    for t, table in enumerate(activities.tables):
        mine = picked[which == t]
        rows = activities.shape_row[mine]
        args, op_names = values_at(table.args, rows), values_at(table.name, rows)
        kernel_names = values_at(events.name, activities.row[mine])
        # call_bytes is a pure function of (op name, args, kernel name): once per distinct triple.
        same, firsts = _identity_codes(args, op_names, kernel_names)
        found = []
        for f in firsts.tolist():
            moved = call_bytes(op_names[f], args[f], kernel_names[f])
            found.append(-1 if moved is None else values.setdefault(moved, len(values)))
        codes[mine] = np.asarray(found, dtype=np.int64)[same]
    return codes, list(values)


def group_activities(
    attributions: Attributions,
    activities: Activities,
    step_of: np.ndarray,
    steps: int,
    moved: tuple[np.ndarray, list[CallBytes]],
    basis: str,
) -> dict[tuple[str, str], Group]:
    """The activities grouped by (kernel name, origin key): time, calls per step, bytes, shapes.

    Groups, and the entries of their Counters, come in order of first appearance, as a loop over
    the activities would add them (`most_common` breaks ties by that order).
    """
    import numpy as np

    events = attributions.trace.events
    origins = attributions.origins
    if not len(activities):
        return {}
    names = ValueCodes()
    kernel = names.of(values_at(events.name, activities.row))
    used = np.unique(activities.origin_id)
    key_codes = ValueCodes()
    origin_key = np.zeros(len(origins), dtype=np.int64)
    origin_key[used] = key_codes.of([origins[i].key for i in used.tolist()])
    group, firsts = _first_order_codes(_pair_codes(kernel, origin_key[activities.origin_id]))
    groups: list[Group] = []
    for first in firsts.tolist():
        row, origin = int(activities.row[first]), origins[int(activities.origin_id[first])]
        cat = events.cat[row]
        category = categorise(
            events.name[row], origin.ops, is_memcpy=cat == Cat.MEMCPY, is_memset=cat == Cat.MEMSET
        )
        groups.append(Group(events.name[row], category, per_step=[0] * steps))
    count = len(groups)
    for g, calls in enumerate(np.bincount(group, minlength=count).tolist()):
        groups[g].calls = calls
    for g, total in enumerate(exact_sums(activities.ns, group, count)):
        groups[g].total_ns = total
    for g, origin_id, ns in _counted(group, activities.origin_id, activities.ns):
        groups[g].origin_ns[origin_id] = ns
    in_step = step_of >= 0
    for g, step, calls in _counted(group[in_step], step_of[in_step]):
        groups[g].per_step[step] = calls

    codes, values = moved
    has_bytes = codes >= 0
    for g, ns in enumerate(exact_sums(activities.ns[has_bytes], group[has_bytes], count)):
        groups[g].bytes_ns = ns
    for g, code, calls in _counted(group[has_bytes], codes[has_bytes]):
        target = groups[g]
        target.bytes_sum += calls * values[code].bytes
        target.bytes_calls += calls
        target.bases.add(values[code].basis)

    shaped = np.flatnonzero(activities.shape_row != NONE)
    if len(shaped):
        texts = _shape_texts(activities, shaped)
        for g, text, calls in _counted(group[shaped], texts[0]):
            groups[g].shapes[texts[1][text]] = calls
        # The first 64 shape ops of each group, in activity order (sampled for waste).
        order = np.argsort(group[shaped], kind="stable")
        ranked = group[shaped][order]
        starts = np.searchsorted(ranked, ranked, side="left")
        keep = np.sort(order[np.arange(len(order)) - starts < 64])
        tables = activities.tables
        for g, t, shape_row in zip(
            group[shaped][keep].tolist(),
            activities.shape_table[shaped][keep].tolist(),
            activities.shape_row[shaped][keep].tolist(),
        ):
            groups[g].op_rows.append((tables[t], shape_row))
    return {(g.kernel, origins[int(activities.origin_id[f])].key): g for g, f in zip(groups, firsts.tolist())}


def _pair_codes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One code per distinct (a, b) pair (codes are not in any order of use)."""
    import numpy as np

    if len(a) == 0:
        return np.zeros(0, dtype=np.int64)
    a, b = _small(a), _small(b)
    return a * (int(b.max()) + 1) + b  # both in [0, 2**31): the pair fits in an int64


def _small(values: np.ndarray) -> np.ndarray:
    """`values` if they already lie in [0, 2**31), else their ranks among the distinct values."""
    import numpy as np

    if int(values.min()) >= 0 and int(values.max()) < 1 << 31:
        return values.astype(np.int64, copy=False)
    _, inverse = np.unique(values, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def _first_order_codes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`codes` renumbered 0, 1, ... by first appearance, and the position of each one's first appearance."""
    import numpy as np

    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)], first[order]


def _counted(group: np.ndarray, values: np.ndarray, weights: np.ndarray | None = None):
    """(group, value, count or sum of weights) per distinct pair, in order of the pair's first appearance."""
    if len(group) == 0:
        return []
    pair, firsts = _first_order_codes(_pair_codes(group, values))
    if weights is None:
        import numpy as np

        totals = np.bincount(pair, minlength=len(firsts)).tolist()
    else:
        totals = exact_sums(weights, pair, len(firsts))
    return zip(group[firsts].tolist(), values[firsts].tolist(), totals)


def _shape_texts(activities: Activities, shaped: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(text code of each shaped activity, the texts): `describe_shapes` of its shape op, once per args."""
    import numpy as np

    text_codes: dict[str, int] = {}
    out = np.empty(len(shaped), dtype=np.int64)
    which = activities.shape_table[shaped]
    for t, table in enumerate(activities.tables):
        mine = np.flatnonzero(which == t)
        rows = activities.shape_row[shaped][mine]
        args, names = values_at(table.args, rows), values_at(table.name, rows)
        # describe_shapes is a pure function of (name, args): once per distinct pair of objects.
        same, firsts = _identity_codes(args, names)
        texts = [
            text_codes.setdefault(describe_shapes(names[f], args[f]), len(text_codes))
            for f in firsts.tolist()
        ]
        out[mine] = np.asarray(texts, dtype=np.int64)[same]
    return out, list(text_codes)


def _identity_codes(*columns: list) -> tuple[np.ndarray, np.ndarray]:
    """One code per distinct tuple of objects (by identity) across `columns`, and a position of each."""
    import numpy as np

    if not columns[0]:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    codes = None
    for objects in columns:
        identities = np.fromiter(map(id, objects), dtype=np.int64, count=len(objects))
        codes = identities if codes is None else _pair_codes(codes, identities)
    assert codes is not None  # there is a first column (read above)
    _, firsts, inverse = np.unique(codes, return_index=True, return_inverse=True)
    return inverse.reshape(-1), firsts


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
