"""The join: each GPU activity -> launch -> CPU op chain -> ranges -> Python frames -> source line."""

from __future__ import annotations

import gc
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tracer.join.calls import CallOrder
from tracer.join.columns import ValueCodes, column, group_by_thread, rows_where, values_at
from tracer.join.contexts import context_classes
from tracer.join.nesting import by_start, enclosing_parents, frames_around, python_run_ops, thread_lanes
from tracer.join.origins import OriginBuilder
from tracer.join.sites import SiteIndex
from tracer.join.source_lines import SourceLines
from tracer.join.state import JoinState
from tracer.model.events import NONE, Cat, Trace
from tracer.model.origin import Attributions
from tracer.model.site import Site

if TYPE_CHECKING:
    import numpy as np

GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")
_GPU = (Cat.KERNEL, Cat.MEMCPY, Cat.MEMSET)
_CPU_OP, _RANGE, _PYTHON = Cat.CPU_OP, Cat.USER_ANNOTATION, Cat.PYTHON_FUNCTION
_LAUNCH = (Cat.RUNTIME, Cat.DRIVER)


def attribute(
    trace: Trace,
    sites: Sequence[Site] | None = None,
    *,
    source_roots: Sequence[str | Path] = (),
    use_call_from: bool = True,
    architectures: Sequence[str] = (),
) -> Attributions:
    """Attribute every kernel, memcpy and memset of `trace` to an `Origin` (deduplicated).

    `sites` (from `tracer.static.scan` or `sites_for_trace`) give exact lines where the trace has no
    ``CallFrom``; `source_roots` let the join read line text. ``use_call_from=False`` ignores
    CallFrom (to check the site join on new traces). ``architectures``: the model classes the user
    says ran (a config's ``architectures``); without Python frames, of code that fits alike, the
    files defining them answer first. A trace without GPU activity attributes its leaf CPU ops
    instead (``Attributions.time_basis == "cpu"``).
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the join allocates many small acyclic objects; collections would only rescan them
    try:
        state = JoinState(trace, use_call_from and trace.meta.has_call_from)
        origins = OriginBuilder(
            trace, SiteIndex(sites or ()), SourceLines(source_roots), state.use_call_from, architectures
        )
        return _Join(state, origins).run()
    finally:
        if gc_was_enabled:
            gc.enable()


class _Join:
    """The sweeps that fill a `JoinState`, then one Origin per context class."""

    def __init__(self, state: JoinState, origins: OriginBuilder) -> None:
        self.state = state
        self.trace = state.trace
        self.table = state.table
        self.origins = origins

    # -- the pipeline -------------------------------------------------------------------------
    def run(self) -> Attributions:
        import numpy as np

        table = self.table
        cat = column(table.cat)
        op_family = rows_where(cat, (_CPU_OP, _RANGE, *_LAUNCH))
        lanes = thread_lanes(table, op_family)
        if lanes is not None:  # every thread in one sweep
            ordered = by_start(table, op_family, lanes)
            enclosing_parents(table, ordered, self.state.op_parents, set(_LAUNCH), self.state.top_ops, lanes)
        else:
            for rows in group_by_thread(table, op_family).values():
                enclosing_parents(
                    table, by_start(table, rows), self.state.op_parents, set(_LAUNCH), self.state.top_ops
                )
        tops = np.fromiter(self.state.top_ops, dtype=np.int64, count=len(self.state.top_ops))
        self.state.top_ops.update(python_run_ops(table, self.state.op_parents, tops).tolist())
        time_basis = "gpu"
        gpu_rows = rows_where(cat, _GPU)
        if len(gpu_rows):
            op_rows, anchors, replays, before_trace = self._launching_ops(gpu_rows)
        else:
            time_basis = "cpu"
            gpu_rows = op_rows = anchors = self._leaf_ops()
            replays = before_trace = np.zeros(len(anchors), dtype=bool)
        self._sweep_frames(rows_where(cat, (_PYTHON,)), anchors)
        calls = CallOrder(self.state)
        result = Attributions(trace=self.trace, time_basis=time_basis)
        result.gpu_rows = _int_array(gpu_rows)
        result.op_rows = _int_array(op_rows)
        origin_ids = self._origin_ids(anchors, replays, calls)
        origin_ids = self.origins.agree_on_copies(origin_ids)
        origin_ids = self.origins.harmonize_rankings(origin_ids)
        if before_trace.any():
            origin_ids[before_trace] = self.origins.before_trace_id()
        result.origin_ids = _int_array(origin_ids)
        result.origins = self.origins.origins
        return result

    def _origin_ids(self, anchors: np.ndarray, replays: np.ndarray, calls: CallOrder) -> np.ndarray:
        """The Origin of each anchor: built for the first anchor of each context class, shared by the rest.

        The classes come in order of their first anchor, so Origins are numbered exactly as one call
        of `OriginBuilder.origin_id` per anchor, in order, would number them.
        """
        import numpy as np

        classes, firsts = context_classes(
            self.state, anchors, replays, calls, ValueCodes(), self.origins.orders_calls()
        )
        ids = np.empty(len(firsts), dtype=np.int64)
        for position, (anchor, replay) in enumerate(zip(anchors[firsts].tolist(), replays[firsts].tolist())):
            ids[position] = self.origins.origin_id(self.state, anchor, replay, calls)
        # classes number the sorted contexts; firsts are in anchor order: map one to the other.
        by_class = np.empty(len(firsts), dtype=np.int64)
        by_class[classes[firsts]] = ids
        return by_class[classes]

    def _launching_ops(self, gpu_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per GPU row: the innermost CPU op (op_rows), the row whose context explains it, replay flag,
        launched-before-the-trace flag.

        The launch is the last runtime/driver call of the row's correlation id; the op, the first
        CPU op of its External id (the launch's, if the row has none), else (Triton, custom
        launchers) the innermost CPU op around the launch. A graph launch's rows are replays. A row
        with neither launch nor op whose correlation id precedes every launch in the trace is work
        the CPU queued before the profiler started (correlation ids grow in launch order).
        """
        import numpy as np

        table = self.table
        cat = column(table.cat)
        ext_ids, correlations = column(table.ext_id), column(table.correlation)
        launches = rows_where(cat, _LAUNCH)
        correlation = correlations[gpu_rows]
        launch = _lookup(correlations, launches[::-1], correlation)  # last launch wins
        launched = launch != NONE
        names = ValueCodes()
        launch_names = names.of(values_at(table.name, launch[launched]))
        graph_launch = names.flags(lambda name: isinstance(name, str) and name.startswith(GRAPH_LAUNCHES))
        replay = np.zeros(len(gpu_rows), dtype=bool)
        replay[launched] = graph_launch[launch_names]
        ext = ext_ids[gpu_rows]
        borrow = (ext == NONE) & launched
        ext[borrow] = ext_ids[launch[borrow]]
        op = _lookup(ext_ids, rows_where(cat, (_CPU_OP,)), ext)
        # No op by External id: walk up from the launch to the first CPU op around it.
        climbing = np.flatnonzero((op == NONE) & launched & ~replay)
        above = column(self.state.op_parents)[launch[climbing]]
        while len(climbing):
            found = above == NONE
            found[~found] = cat[above[~found]] == _CPU_OP
            op[climbing[found]] = above[found]
            climbing, above = climbing[~found], column(self.state.op_parents)[above[~found]]
        op[replay] = NONE
        anchors = np.where(op != NONE, op, launch)
        launch_ids = correlations[launches]
        launch_ids = launch_ids[launch_ids != NONE]
        before_trace = np.zeros(len(gpu_rows), dtype=bool)
        if len(launch_ids):
            before_trace = (anchors == NONE) & (correlation != NONE) & (correlation < launch_ids.min())
        return op, anchors, replay, before_trace

    def _leaf_ops(self) -> np.ndarray:
        """CPU ops with no CPU op inside them: the CPU-only trace's equivalent of kernels."""
        import numpy as np

        ops = rows_where(column(self.table.cat), (_CPU_OP,))
        parents = column(self.state.op_parents)[ops]
        has_child = np.zeros(len(self.table), dtype=bool)
        has_child[parents[parents != NONE]] = True
        return ops[~has_child[ops]]

    def _sweep_frames(self, frame_rows: np.ndarray, anchors: np.ndarray) -> None:
        """Frame parents, and the innermost frame of every row asked about: the anchors, the forward
        ops of backward ops (their frames explain them) and the top-level ops; thread by thread, or
        all threads in one sweep (`thread_lanes`)."""
        import numpy as np

        if len(frame_rows) == 0:
            return
        table = self.table
        asked = np.zeros(len(table), dtype=bool)
        asked[anchors[anchors != NONE]] = True
        asked[np.fromiter(self.trace.fwdbwd.values(), dtype=np.int64)] = True
        asked[np.fromiter(self.state.top_ops, dtype=np.int64, count=len(self.state.top_ops))] = True
        asked_rows = np.flatnonzero(asked)
        lanes = thread_lanes(table, np.concatenate([frame_rows, asked_rows]))
        if lanes is not None:
            ordered = self.state.sorted_frames[(NONE, NONE)] = by_start(table, frame_rows, lanes)
            queries = by_start(table, asked_rows, lanes)
            frames_around(
                table, ordered, queries, self.state.frame_parents, self.state.innermost_frame, lanes
            )
            return
        by_thread = group_by_thread(table, asked_rows)
        empty = np.zeros(0, dtype=np.int64)
        for key, frames in group_by_thread(table, frame_rows).items():
            ordered = self.state.sorted_frames[key] = by_start(table, frames)
            queries = by_start(table, by_thread.get(key, empty))
            frames_around(table, ordered, queries, self.state.frame_parents, self.state.innermost_frame)


def _lookup(values: np.ndarray, rows: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each of `wanted`: the first row of `rows` whose value it is (NONE for NONE or none)."""
    import numpy as np

    picked = rows[values[rows] != NONE]
    keys, first = np.unique(values[picked], return_index=True)
    at = np.searchsorted(keys, wanted)
    inside = at < len(keys)
    at[~inside] = 0
    hit = inside & (keys[at] == wanted) if len(keys) else inside
    return np.where(hit & (wanted != NONE), picked[first[at]] if len(keys) else NONE, NONE)


def _int_array(values) -> array:
    """An ``array("q")`` of int64 numpy values."""
    import numpy as np

    out = array("q")
    out.frombytes(np.ascontiguousarray(values, dtype=np.int64).tobytes())
    return out


__all__ = ["attribute"]
