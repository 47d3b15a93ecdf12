"""CUDA-graph replays -> the capture-time lines that launched each replayed kernel.

A replayed kernel shares its ``cudaGraphLaunch``'s correlation and has no External id, so the join
can only name the ``graph.replay()`` call. When the capture itself was profiled (in the same trace or
a second one), its launches are the graph's nodes, each with an origin (`tracer.join.replay.capture`).
Replay kernel k of a graph is capture launch k: by Kineto's ``graph node id`` where the trace has it,
else by alignment (`tracer.join.replay.align`). Aligned kernels take the launch's origin, scaled by
the alignment's confidence, and keep its capture-time op (`Attributions.capture_ops`) for their
shapes; unplaced ones keep a replay label with the static map's candidate sites.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tracer.join.columns import column, rows_where
from tracer.join.ranking import MAX_CANDIDATES
from tracer.join.replay.align import EagerNames, best_capture, families_disagree, merge_streams
from tracer.join.replay.capture import (
    GRAPH_LAUNCH_PREFIXES,
    Capture,
    attach_capture_origins,
    find_captures,
    gpu_kind,
    launch_kind,
)
from tracer.join.replay.report import CapturedGraph, GraphReplays, ReplayReport
from tracer.model.events import NONE, Cat, EventTable, Trace
from tracer.model.origin import Attributions, Origin
from tracer.model.site import Site

# Alignment confidence by method: node ids name the node; order is exact on one stream; a
# sequence alignment that needed gaps, or several streams ordered by start time, are less sure.
CONFIDENCE = {
    "graph node id": 1.0,
    "launch order": 0.95,
    "stream merge": 0.8,
    "launch order, several streams": 0.7,
}
NAME_DISAGREES = 0.5  # a position whose kernel name differs from the one its origin launched eagerly

NO_CAPTURE = (
    "replayed from a CUDA graph whose capture was not profiled, so no line can be named: profile the "
    "capture (kerneltrace's SGLang plugin, SGLANG_ENABLE_CUDA_GRAPH_CAPTURE_TRACE) or pass --capture TRACE"
)
UNPLACED = "replayed from a CUDA graph, but no position in the profiled capture(s) fits this kernel"


# -- the public entry ------------------------------------------------------------------------------
def attribute_replays(
    trace: Trace,
    attributions: Attributions,
    capture: Trace | Sequence[Trace] | None = None,
    *,
    sites: Sequence[Site] | None = None,
    source_roots: Sequence[str | Path] = (),
    use_call_from: bool = True,
) -> ReplayReport:
    """Give each replayed kernel of `attributions` the origin of its capture-time launch (in place).

    `capture`: the trace(s) holding the profiled capture; None looks in `trace` itself (a capture
    trace passed explicitly is searched too, in addition to `trace`). `sites`, `source_roots` and
    `use_call_from` are the join's (`tracer.join.attribute`), used for the capture-time launches.
    Replayed kernels keep ``Origin.replay=True``; aligned ones get the capture line's file, line,
    frames, ops and ranges, with confidence = the line's confidence x the alignment's. Without any
    capture, they get `Origin.candidates` from the static sites by kernel family. Appends the
    report's summary to ``trace.notes`` (so `tracer.explain.analyse` prints it).
    """
    groups = _replay_groups(trace, attributions)
    if not groups:
        return ReplayReport(trace.meta.path, (), (), (), 0, 0, 0, 0, 0)
    captures: list[Capture] = []
    for source in [trace] + [t for t in _as_list(capture) if t is not trace]:
        captures.extend(find_captures(source))
    if captures:
        attach_capture_origins(captures, sites, source_roots, use_call_from)
    state = _Aligner(trace, attributions, sites or ())
    graphs = state.align_all(groups, captures)
    report = ReplayReport(
        trace=trace.meta.path,
        capture_traces=tuple(dict.fromkeys(c.trace.meta.path for c in captures)),
        captures=tuple(c.record for c in captures),
        graphs=tuple(graphs),
        graph_launches=len(groups),
        replay_kernels=sum(g.kernels for g in graphs),
        replay_ns=sum(g.replay_ns for g in graphs),
        aligned_ns=sum(g.aligned_ns for g in graphs),
        line_ns=sum(g.line_ns for g in graphs),
        notes=tuple(state.notes),
    )
    trace.notes.append(report.summary())
    trace.notes.extend(state.notes)
    return report


def _as_list(capture: Trace | Sequence[Trace] | None) -> list[Trace]:
    if capture is None:
        return []
    if isinstance(capture, Trace):
        return [capture]
    return list(capture)


# -- replays ----------------------------------------------------------------------------------------
def _replay_groups(trace: Trace, attributions: Attributions) -> dict[int, list[int]]:
    """Graph launch correlation -> indices (into attributions) of its GPU activities."""
    table = trace.events
    graph_corrs = _graph_launch_correlations(table)
    graph_corrs.discard(NONE)
    groups: dict[int, list[int]] = defaultdict(list)
    if not graph_corrs or attributions.time_basis != "gpu":
        return groups
    for i, row in enumerate(attributions.gpu_rows):
        corr = table.correlation[row]
        if corr in graph_corrs:
            groups[corr].append(i)
    return groups


def _graph_launch_correlations(table: EventTable) -> set[int]:
    """Correlations of the runtime/driver calls that launch a CUDA graph. Names are interned: each
    distinct launch name is tested once, the rows by numpy (a Python test per row cost ~1 s on 1.7M)."""
    import numpy as np

    launches = rows_where(column(table.cat), (Cat.RUNTIME, Cat.DRIVER))
    if len(launches) == 0:
        return set()
    names = list(map(table.name.__getitem__, launches.tolist()))
    graph_names = {name for name in set(names) if name.startswith(GRAPH_LAUNCH_PREFIXES)}
    if not graph_names:
        return set()
    is_graph = np.fromiter(map(graph_names.__contains__, names), dtype=bool, count=len(names))
    return set(column(table.correlation)[launches[is_graph]].tolist())


def _ordered(table: EventTable, rows: list[int]) -> tuple[list[int], bool]:
    """Replay rows in node order: by graph node id when every row has one, else by start time."""
    node_ids = [(table.args[r] or {}).get("graph node id") for r in rows]
    if rows and all(isinstance(n, int) and n > 0 for n in node_ids):
        return [r for _, r in sorted(zip(node_ids, rows))], True
    return sorted(rows, key=lambda r: (table.ts_ns[r], table.tid[r])), False


@dataclass
class _Replay:
    """One graph launch's GPU rows in node order, and the same rows per stream."""

    rows: list[int]
    row_index: dict[int, int]  # gpu row -> index into attributions
    by_node: bool
    per_stream: dict[int, list[int]]

    def pairs(self) -> list[tuple[int, int]]:
        return [(row, self.row_index[row]) for row in self.rows]

    def reorder(self, order: list[tuple[int, int]]) -> None:
        """Rows in the given (stream, index within stream) order."""
        self.rows = [self.per_stream[stream][i] for stream, i in order]


# -- alignment --------------------------------------------------------------------------------------
class _Aligner:
    """Aligns each replayed graph to a capture and rewrites its kernels' origins in `attributions`."""

    def __init__(self, trace: Trace, attributions: Attributions, sites: Sequence[Site]) -> None:
        self.trace = trace
        self.table = trace.events
        self.attributions = attributions
        self.sites = sites
        self.notes: list[str] = []
        self._origin_index = {o: i for i, o in enumerate(attributions.origins)}
        self._eager_names = self._eager_kernel_names()

    def _eager_kernel_names(self) -> EagerNames:
        """Kernel names each origin launched outside graphs: a check on the position-based match."""
        names: dict[Origin, set[str]] = defaultdict(set)
        attributions, table = self.attributions, self.table
        for row, origin_id in zip(attributions.gpu_rows, attributions.origin_ids):
            origin = attributions.origins[origin_id]
            if not origin.replay and table.cat[row] == Cat.KERNEL:
                names[origin].add(table.name[row])
        return names

    def align_all(self, groups: dict[int, list[int]], captures: list[Capture]) -> list[GraphReplays]:
        table, attributions = self.table, self.attributions
        # Replays of one graph share a graph id (newer Kineto), else their kernel sequence per stream
        # (per stream: concurrent streams interleave differently from one replay to the next).
        by_graph: dict[Any, list[_Replay]] = defaultdict(list)
        row_index = {row: i for i, row in enumerate(attributions.gpu_rows)}
        for indices in groups.values():
            rows, by_node = _ordered(table, [attributions.gpu_rows[i] for i in indices])
            per_stream: dict[int, list[int]] = defaultdict(list)
            for row in rows:
                per_stream[table.tid[row]].append(row)
            graph_id = (table.args[rows[0]] or {}).get("graph id") if rows else None
            key = (
                graph_id
                if isinstance(graph_id, int)
                else tuple((s, tuple(table.name[r] for r in rs)) for s, rs in sorted(per_stream.items()))
            )
            by_graph[key].append(_Replay(rows, row_index, by_node, per_stream))
        out = []
        for key, replays in by_graph.items():
            out.append(self._align_graph(key if isinstance(key, int) else None, replays, captures))
        out.sort(key=lambda g: -g.replay_ns)
        return out

    def _align_graph(self, graph_id, replays: list[_Replay], captures: list[Capture]) -> GraphReplays:
        table = self.table
        first = replays[0]
        replay_ns = sum(table.dur_ns[r] for rp in replays for r in rp.rows)
        kernels = sum(len(rp.rows) for rp in replays)
        if not captures:
            self._label_unplaced([pair for rp in replays for pair in rp.pairs()], NO_CAPTURE)
            return GraphReplays(
                None, graph_id, len(replays), kernels, replay_ns, 0, 0, "none", 0.0, (NO_CAPTURE,)
            )
        merged = None
        if len(first.per_stream) > 1 and not first.by_node:
            merged = merge_streams(table, first.per_stream, captures, self._eager_names)
        if merged is not None:
            cap_index, mismatches = merged.capture, merged.mismatches
            for rp in replays:
                rp.reorder(merged.order)
            capture = captures[cap_index]
            positions: list[int | None] = list(range(len(first.rows)))
            method = "stream merge"
            evidence: tuple[str, ...] = (
                (
                    f"kernels ran on {len(first.per_stream)} streams: each stream's kernels kept in order and "
                    f"merged into the {len(capture.kinds)} captured launches by kind and by what each launch's op "
                    f"computes (GEMM, copy, softmax, ...){f'; {mismatches} position(s) disagree' if mismatches else ''}"
                ),
            )
        else:
            kinds = [gpu_kind(table.cat[r]) for r in first.rows]
            names = [table.name[r] for r in first.rows]
            placement = best_capture(kinds, names, captures, self._eager_names)
            cap_index, positions = placement.capture, placement.positions
            method, evidence = placement.method, placement.evidence
            if placement.note:
                self.notes.append(placement.note)
            capture = captures[cap_index]
            if method == "launch order" and first.by_node:
                method = "graph node id"
            elif method == "launch order" and len(first.per_stream) > 1:
                method = "launch order, several streams"
        base = CONFIDENCE.get(method)
        if base is None:  # a sequence alignment: the share of kernels it could place
            placed = sum(p is not None for p in positions)
            base = 0.8 * placed / len(positions) if positions else 0.0
        aligned_ns = line_ns = 0
        disagreements = 0
        new_ids: dict[tuple[int, float], int] = {}
        unplaced: list[tuple[int, int]] = []
        for rp in replays:
            for k, (row, i) in enumerate(rp.pairs()):
                pos = positions[k] if k < len(positions) else None
                if pos is None:
                    unplaced.append((row, i))
                    continue
                origin = capture.origins[pos]
                confidence = base
                eager = self._eager_names.get(origin)
                if (eager and table.name[row] not in eager) or families_disagree(
                    capture.ops[pos], table.name[row]
                ):
                    confidence *= NAME_DISAGREES
                    disagreements += 1
                key = (pos, confidence)
                origin_id = new_ids.get(key)
                if origin_id is None:
                    origin_id = new_ids[key] = self._add(
                        self._replayed(origin, capture, len(replays), method, confidence)
                    )
                self.attributions.origin_ids[i] = origin_id
                if capture.op_rows[pos] != NONE:
                    self.attributions.capture_ops[row] = (capture.trace, capture.op_rows[pos])
                aligned_ns += table.dur_ns[row]
                if origin.file is not None and origin.line is not None:
                    line_ns += table.dur_ns[row]
        if disagreements:
            evidence += (
                (
                    f"{disagreements} replayed kernel(s) do not look like what their capture-time op computes, "
                    "or differ from what it launched eagerly (confidence halved there)"
                ),
            )
        if unplaced:
            self._label_unplaced(unplaced, UNPLACED)
            self.notes.append(
                f"{len(unplaced)} replayed kernel(s) could not be placed in any profiled capture"
            )
        return GraphReplays(
            cap_index,
            graph_id,
            len(replays),
            kernels,
            replay_ns,
            aligned_ns,
            line_ns,
            method,
            round(base, 3),
            evidence,
        )

    def _replayed(
        self, origin: Origin, capture: Capture, launches: int, method: str, confidence: float
    ) -> Origin:
        where = "this trace" if capture.trace is self.trace else capture.trace.meta.path
        return replace(
            origin,
            replay=True,
            confidence=round(origin.confidence * confidence, 3),
            evidence=(
                (
                    f"replayed from a CUDA graph captured in {where} ({capture.record.launches} launches); "
                    f"matched to its capture-time launch by {method} (alignment confidence {confidence:.2f})"
                ),
                *origin.evidence,
            ),
        )

    def _add(self, origin: Origin) -> int:
        index = self._origin_index.get(origin)
        if index is None:
            index = self._origin_index[origin] = len(self.attributions.origins)
            self.attributions.origins.append(origin)
        return index

    def _label_unplaced(self, pairs: list[tuple[int, int]], reason: str) -> None:
        """Replays no capture explains keep their replay label and get the static map's candidates
        (sites lowering to the kernel's family, by risk): a ranking to check, never a line."""
        table, attributions = self.table, self.attributions
        by_name: dict[tuple[int, str], int] = {}
        for row, i in pairs:
            key = (attributions.origin_ids[i], table.name[row])
            origin_id = by_name.get(key)
            if origin_id is None:
                ranked = _candidates_by_family(self.sites, table.name[row])
                if ranked:
                    ranking = f"{len(ranked)} static site(s) lower to this kernel's family, ranked by risk"
                else:
                    ranking = (
                        "no static site lowers to this kernel's family"
                        if self.sites
                        else "no static sites given"
                    )
                origin = replace(
                    attributions.origins[key[0]],
                    replay=True,
                    candidates=tuple(s.location for s in ranked),
                    evidence=(reason, ranking),
                )
                origin_id = by_name[key] = self._add(origin)
            attributions.origin_ids[i] = origin_id


def _candidates_by_family(sites: Sequence[Site], kernel: str) -> list[Site]:
    fitting = [s for s in sites if s.launches_kernel and any(f in kernel for f in s.kernel_families)]
    fitting.sort(key=lambda s: (-s.risk, s.path, s.line))
    return fitting[:MAX_CANDIDATES]


__all__ = [
    "GRAPH_LAUNCH_PREFIXES",
    "CapturedGraph",
    "GraphReplays",
    "ReplayReport",
    "attribute_replays",
    "launch_kind",
]
