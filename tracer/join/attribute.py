"""The join: each GPU activity -> launch -> CPU op chain -> ranges -> Python frames -> source line."""

from __future__ import annotations

import gc
from array import array
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from tracer.join.calls import CallOrder
from tracer.join.columns import column, first_row_by_value, group_by_thread, rows_where
from tracer.join.frames import is_user_frame
from tracer.join.nesting import by_start, enclosing_parents, frames_around
from tracer.join.origins import OriginBuilder
from tracer.join.sites import SiteIndex
from tracer.join.source_lines import SourceLines
from tracer.model.events import NONE, Cat, Trace
from tracer.model.origin import Attributions
from tracer.model.site import Site

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
) -> Attributions:
    """Attribute every kernel, memcpy and memset of `trace` to an `Origin` (deduplicated).

    `sites` (from `tracer.static.scan` or `sites_for_trace`) give exact lines where the trace has no
    ``CallFrom``; `source_roots` let the join read line text. ``use_call_from=False`` ignores
    CallFrom (to check the site join on new traces). A trace without GPU activity attributes its
    leaf CPU ops instead (``Attributions.time_basis == "cpu"``).
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the join allocates many small acyclic objects; collections would only rescan them
    try:
        return _Join(trace, SiteIndex(sites or ()), SourceLines(source_roots), use_call_from).run()
    finally:
        if gc_was_enabled:
            gc.enable()


class _Join:
    def __init__(self, trace: Trace, sites: SiteIndex, source: SourceLines, use_call_from: bool) -> None:
        self.trace = trace
        self.table = trace.events
        self.use_call_from = use_call_from and trace.meta.has_call_from
        self.origins = OriginBuilder(trace, sites, source, self.use_call_from)
        n = len(self.table)
        self.op_parents = array("q", [NONE]) * n
        self.frame_parents = array("q", [NONE]) * n
        self.top_ops: set[int] = set()
        self.innermost_frame: dict[int, int] = {}
        self._user_above: dict[int, tuple[int, int]] = {}  # non-user frame -> (U, C), see user_call

    # -- the pipeline -------------------------------------------------------------------------
    def run(self) -> Attributions:
        table = self.table
        gpu_rows, launches, op_by_ext, op_threads, frame_threads = self._index()
        for rows in op_threads.values():
            enclosing_parents(table, by_start(table, rows), self.op_parents, set(_LAUNCH), self.top_ops)
        time_basis = "gpu"
        if gpu_rows:
            op_rows, anchors, replays = self._launching_ops(gpu_rows, launches, op_by_ext)
        else:
            time_basis = "cpu"
            gpu_rows = self._leaf_ops()
            op_rows, anchors, replays = array("q", gpu_rows), list(gpu_rows), [False] * len(gpu_rows)
        self._sweep_frames(frame_threads, anchors)
        calls = CallOrder(self)
        origin_ids = array("q")
        for anchor, replay in zip(anchors, replays):
            origin_ids.append(self.origins.origin_id(self, anchor, replay, calls))
        result = Attributions(trace=self.trace, time_basis=time_basis)
        result.gpu_rows = array("q", gpu_rows)
        result.op_rows = op_rows
        result.origin_ids = origin_ids
        result.origins = self.origins.origins
        return result

    def _index(self):
        """Numpy passes over the columns: GPU rows, launches by correlation, ops by External id, threads."""
        table = self.table
        cat = column(table.cat)
        op_family = rows_where(cat, (_CPU_OP, _RANGE, *_LAUNCH))
        op_threads = group_by_thread(table, op_family)
        frame_threads = group_by_thread(table, rows_where(cat, (_PYTHON,)))
        gpu_rows = rows_where(cat, _GPU).tolist()
        # The first op of each External id; the last launch of each correlation id.
        op_by_ext = first_row_by_value(column(table.ext_id), rows_where(cat, (_CPU_OP,)), NONE)
        launches = first_row_by_value(column(table.correlation), rows_where(cat, _LAUNCH), NONE, last=True)
        return gpu_rows, launches, op_by_ext, op_threads, frame_threads

    def _launching_ops(self, gpu_rows, launches, op_by_ext):
        """Per GPU row: the innermost CPU op (op_rows), the row whose context explains it, replay flag."""
        table = self.table
        names, ext_ids, corrs, cats = table.name, table.ext_id, table.correlation, table.cat
        op_rows = array("q")
        anchors: list[int] = []
        replays: list[bool] = []
        for row in gpu_rows:
            corr = corrs[row]
            launch = launches.get(corr, NONE) if corr != NONE else NONE
            if launch != NONE and names[launch].startswith(GRAPH_LAUNCHES):
                op_rows.append(NONE)
                anchors.append(launch)
                replays.append(True)
                continue
            ext = ext_ids[row]
            if ext == NONE and launch != NONE:
                ext = ext_ids[launch]
            op = op_by_ext.get(ext, NONE) if ext != NONE else NONE
            if op == NONE and launch != NONE:
                # No op by External id (Triton, custom launchers): the innermost op around the launch.
                op = self.op_parents[launch]
                while op != NONE and cats[op] != _CPU_OP:
                    op = self.op_parents[op]
            op_rows.append(op)
            anchors.append(op if op != NONE else launch)
            replays.append(False)
        return op_rows, anchors, replays

    def _leaf_ops(self) -> list[int]:
        """CPU ops with no CPU op inside them: the CPU-only trace's equivalent of kernels."""
        cats, parents = self.table.cat, self.op_parents
        has_child = {parents[r] for r, c in enumerate(cats) if c == _CPU_OP and parents[r] != NONE}
        return [r for r, c in enumerate(cats) if c == _CPU_OP and r not in has_child]

    def _sweep_frames(self, frame_threads, anchors) -> None:
        table = self.table
        queries: dict[tuple[int, int], set[int]] = defaultdict(set)
        pid, tid = table.pid, table.tid
        for row in anchors:
            if row != NONE:
                queries[(pid[row], tid[row])].add(row)
        for row in self.trace.fwdbwd.values():  # backward ops are explained by their forward op
            queries[(pid[row], tid[row])].add(row)
        for row in self.top_ops:
            key = (pid[row], tid[row])
            if key in frame_threads:
                queries[key].add(row)
        self.sorted_frames: dict[tuple[int, int], list[int]] = {}
        for key, frames in frame_threads.items():
            ordered = by_start(table, frames)
            self.sorted_frames[key] = ordered
            asked = by_start(table, queries.get(key, ()))
            frames_around(table, ordered, asked, self.frame_parents, self.innermost_frame)

    # -- chains (used by OriginBuilder) ---------------------------------------------------------
    def outermost_op(self, row: int) -> int:
        """The outermost CPU op enclosing `row` (itself if it is a top-level op)."""
        cats, parents = self.table.cat, self.op_parents
        best = row if cats[row] == _CPU_OP else NONE
        cur = parents[row]
        while cur != NONE:
            if cats[cur] == _CPU_OP:
                best = cur
            cur = parents[cur]
        return best

    def user_call(self, anchor: int, frame: int) -> tuple[int, int]:
        """(U, C): the innermost user frame around the anchor, and the call in U that led to it.

        C is U's child frame on the way down (a builtin such as ``.to``, a module call, a torch
        function), or, when the op runs directly in U (``x[i] = v``), the outermost op itself.
        """
        names = self.table.name
        if frame == NONE:
            return NONE, NONE
        if is_user_frame(names[frame]):
            return frame, self.outermost_op(anchor)
        found = self._user_above.get(frame)
        if found is None:  # the walk up depends on the frame only: many anchors share it
            found = self._user_above[frame] = self._walk_to_user(frame)
        return found

    def _walk_to_user(self, frame: int) -> tuple[int, int]:
        names, parents = self.table.name, self.frame_parents
        child, cur = frame, parents[frame]
        while cur != NONE and not is_user_frame(names[cur]):
            child, cur = cur, parents[cur]
        return cur, child if cur != NONE else NONE


__all__ = ["attribute"]
