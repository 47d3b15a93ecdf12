"""Interval-containment sweeps per thread: who encloses whom, in O(n log n).

Two families nest perfectly on their own, and interleave with each other (a record_function range
begins inside a Python call), so each is swept on its own:
- the op family: cpu_ops, record_function ranges and runtime/driver calls -> `op_parents`;
- Python frames -> `frame_parents`, and for any query row, its innermost enclosing frame.
Both are stack sweeps in start order, run on whole columns by `tracer.join.sweep`.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tracer.join.columns import column, sorted_by_start, start_order, values_at
from tracer.join.sweep import stack_tops
from tracer.model.events import NONE, Cat, EventTable
from tracer.model.threads import one_thread, thread_numbers

if TYPE_CHECKING:
    import numpy as np

# An op Python code runs inside: an autograd Function's ``apply`` records an op named after its class
# (``GeLUFunction``), and the ops its ``forward`` runs nest in it. Torch's own ops are namespaced
# (``aten::mul``); its C++ ranges are not identifiers (``Torch-Compiled Region: 0/0``), and the
# backward nodes (``MulBackward0``) and torch.compile's ``CompiledFunction`` run no Python of the source.
_CLASS_OP = re.compile(r"_*[A-Z][A-Za-z0-9_]*")
_NOT_PYTHON_RUN = re.compile(r".*Backward\d*|CompiledFunction")
# Rounding ts and dur to ns separately can leave a child 1-2 ns past its parent's end.
TOLERANCE_NS = 2
_DUR_BITS = 42  # durations below 2**42 ns (73 minutes) sort under their start time in one int key


def thread_lanes(table: EventTable, rows) -> np.ndarray | None:
    """A time shift per table row that lays each thread of `rows` after the one before it, so that
    one sweep serves all threads (no interval of one thread then overlaps another's): a trace with
    thousands of threads costs one sweep, not thousands. None when there is one thread, or the
    shifted times would not fit in int64 (then sweep thread by thread)."""
    import numpy as np

    picked = np.asarray(rows, dtype=np.int64)
    if len(picked) == 0:
        return None
    pids, tids = column(table.pid)[picked], column(table.tid)[picked]
    if one_thread(pids, tids):
        return None
    thread = thread_numbers(pids, tids)
    starts = column(table.ts_ns)[picked]
    durations = column(table.dur_ns)[picked]
    if durations.min() < 0 or durations.max() >= 1 << _DUR_BITS:
        return None
    span = int((starts + durations).max()) - int(starts.min()) + 2 * TOLERANCE_NS + 1
    if int(thread.max()) * span >= 1 << 61:
        return None
    offsets = np.zeros(len(table), dtype=np.int64)
    offsets[picked] = thread.astype(np.int64) * span
    return offsets


def by_start(table: EventTable, rows: Iterable[int], offsets: np.ndarray | None = None) -> np.ndarray:
    """Rows (numpy) by start time, longer first at equal starts (so a parent precedes its children);
    with `offsets` (`thread_lanes`), by shifted start: thread after thread."""
    import numpy as np

    if offsets is not None:
        picked = np.asarray(rows, dtype=np.int64)
        starts = column(table.ts_ns)[picked] + offsets[picked]
        return picked[start_order(starts, column(table.dur_ns)[picked])]
    ordered = sorted_by_start(table, rows)  # numpy: the same order, without a Python key per row
    if ordered is not None:
        return ordered
    ts, dur = table.ts_ns, table.dur_ns
    shift = _DUR_BITS
    rows = rows.tolist() if isinstance(rows, np.ndarray) else rows
    return np.asarray(sorted(rows, key=lambda r: (ts[r] << shift) - dur[r]), dtype=np.int64)


def _starts_ends(table: EventTable, rows, offsets: np.ndarray | None = None):
    """Rows (numpy), and their start and end (ns), shifted by `offsets` when given."""
    import numpy as np

    picked = np.asarray(rows, dtype=np.int64)
    starts = column(table.ts_ns)[picked]
    if offsets is not None:
        starts = starts + offsets[picked]
    return picked, starts, starts + column(table.dur_ns)[picked]


def enclosing_parents(
    table: EventTable,
    sorted_rows: Sequence[int] | np.ndarray,
    parents: array,
    leaves: set[int],
    top_ops: set[int],
    offsets: np.ndarray | None = None,
) -> None:
    """Set ``parents[r]`` to the innermost row of `sorted_rows` enclosing r (NONE at top level).

    Rows whose category is in `leaves` get a parent but never become one (runtime calls). CPU ops
    with no CPU op around them (ranges do not count) are added to `top_ops`.

    The stack: each row pops the entries ending more than TOLERANCE_NS before it ends, takes the
    top as its parent, and is pushed unless it is a leaf.
    """
    import numpy as np

    rows, _, ends = _starts_ends(table, sorted_rows, offsets)
    if len(rows) == 0:
        return
    cat = column(table.cat)[rows]
    pushed = ~np.isin(cat, np.asarray(sorted(leaves), dtype=cat.dtype))
    tops = stack_tops(ends - TOLERANCE_NS, ends, pushed)
    has_parent = tops >= 0
    column(parents)[rows] = np.where(has_parent, rows[np.maximum(tops, 0)], NONE)
    # A CPU op is top-level when no entry on the stack below it is a CPU op: whether the chain
    # (entry, the entry below it, ...) holds one, by pointer doubling over the answers.
    is_op = cat == Cat.CPU_OP
    holds_op = is_op & pushed
    below = tops.copy()
    while True:
        going = np.flatnonzero((below >= 0) & ~holds_op)
        if len(going) == 0:
            break
        step = below[going]
        holds_op[going] = holds_op[step]
        below[going] = below[step]
    op_below = np.zeros(len(rows), dtype=bool)
    op_below[has_parent] = holds_op[tops[has_parent]]
    top_ops.update(rows[is_op & pushed & ~op_below].tolist())  # in sweep order, as the loop added them


def _merged_positions(frame_starts, query_starts):
    """Where each frame and each query goes in the merged sweep: before frame f, the queries (in
    their order) up to the first one that does not start before f."""
    import numpy as np

    frames, queries = np.arange(len(frame_starts)), np.arange(len(query_starts))
    if (np.diff(frame_starts) >= 0).all() and (np.diff(query_starts) >= 0).all():
        before = np.searchsorted(query_starts, frame_starts, side="left")
    else:  # durations the start sort could not take (by_start's Python key): merge as a loop would
        before = np.empty(len(frame_starts), dtype=np.int64)
        starts, j = query_starts.tolist(), 0
        for f, start in enumerate(frame_starts.tolist()):
            while j < len(starts) and starts[j] < start:
                j += 1
            before[f] = j
    # Queries answered before frame f: the first before[f] (a count that never decreases).
    return frames + before, queries + np.searchsorted(before, queries, side="right")


def frames_around(
    table: EventTable,
    sorted_frames: Sequence[int] | np.ndarray,
    sorted_queries: Sequence[int] | np.ndarray,
    frame_parents: array,
    innermost: array,
    offsets: np.ndarray | None = None,
) -> None:
    """Sweep Python frames; set their parents, and ``innermost[q]`` = the frame around q's start.

    One stack sweep over frames and queries merged by start: before each frame come the queries
    starting before it (a frame starting at the same instant as a query goes first: it may enclose
    it). A frame pops the entries ending more than TOLERANCE_NS before it ends; a query pops the
    frames that end before it starts.
    """
    import numpy as np

    frames, frame_starts, frame_ends = _starts_ends(table, sorted_frames, offsets)
    queries, query_starts, _ = _starts_ends(table, sorted_queries, offsets)
    total = len(frames) + len(queries)
    if total == 0:
        return
    frame_at, query_at = _merged_positions(frame_starts, query_starts)
    thresholds = np.empty(total, dtype=np.int64)
    ends = np.zeros(total, dtype=np.int64)
    pushed = np.zeros(total, dtype=bool)
    row = np.empty(total, dtype=np.int64)
    thresholds[frame_at] = frame_ends - TOLERANCE_NS
    thresholds[query_at] = query_starts
    ends[frame_at] = frame_ends
    pushed[frame_at] = True
    row[frame_at] = frames
    row[query_at] = queries
    tops = stack_tops(thresholds, ends, pushed)
    found = np.where(tops >= 0, row[np.maximum(tops, 0)], NONE)
    column(frame_parents)[frames] = found[frame_at]
    column(innermost)[queries] = found[query_at]


def runs_python(name: str) -> bool:
    """Whether an op of this name is one whose inner ops Python code runs (an autograd Function's)."""
    return _CLASS_OP.fullmatch(name) is not None and _NOT_PYTHON_RUN.fullmatch(name) is None


def python_run_ops(table: EventTable, parents: array, tops: np.ndarray) -> np.ndarray:
    """The CPU ops nested (ranges aside) in a Python-run op (`runs_python`) of `tops`, or of such an
    op nested in turn: each is a call of the Python code run inside (a Function's ``forward``), as a
    top-level op is of its own frame, not a part of the outer op's work."""
    import numpy as np

    empty = np.zeros(0, dtype=np.int64)
    names = table.name
    top_names = values_at(names, tops)
    python_run = {name for name in set(top_names) if isinstance(name, str) and runs_python(name)}
    if not python_run:
        return empty
    outer = {int(r) for r, name in zip(tops.tolist(), top_names) if name in python_run}
    cat = column(table.cat)
    up = column(parents)
    ops = np.flatnonzero(cat == Cat.CPU_OP)
    nearest = up[ops].copy()  # each op's nearest enclosing CPU op (ranges skipped)
    while True:
        ranged = np.flatnonzero((nearest != NONE) & (cat[np.maximum(nearest, 0)] != Cat.CPU_OP))
        if len(ranged) == 0:
            break
        nearest[ranged] = up[nearest[ranged]]
    found: list[np.ndarray] = []
    while outer:
        inner = ops[np.isin(nearest, np.fromiter(outer, dtype=np.int64, count=len(outer)))]
        found.append(inner)
        outer = {int(r) for r in inner.tolist() if runs_python(names[r])}
    return np.concatenate(found) if found else empty
