"""CUDA-graph replays -> the capture-time lines that launched each replayed kernel.

A replayed kernel shares its ``cudaGraphLaunch``'s correlation and has no External id, so the join
can only name the ``graph.replay()`` call. When the capture itself was profiled (in the same trace or
a second one), the capture-time ``cudaLaunchKernel``/``cuLaunchKernel``/memcpy/memset calls between
``cudaStreamBeginCapture`` and ``cudaStreamEndCapture`` are the graph's nodes, in order, each inside
its CPU op, ranges and Python frames. Replay kernel k of a graph is capture launch k: by Kineto's
``graph node id`` where the trace has it, else by launch order, checked by kind (kernel, memcpy,
memset) and by the kernel names the same origin launched eagerly; a banded sequence alignment takes
over when the counts differ. Kernel names alone never decide: one name often comes from several lines.
"""

from __future__ import annotations

import re
from array import array
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tracer.model.events import NONE, Cat, EventTable, Trace
from tracer.model.origin import Attributions, Origin
from tracer.model.site import Site

GRAPH_LAUNCH_PREFIXES = ("cudaGraphLaunch", "cuGraphLaunch")
CAPTURE_BEGIN = ("cudaStreamBeginCapture", "cuStreamBeginCapture")
CAPTURE_END = ("cudaStreamEndCapture", "cuStreamEndCapture")
GRAPH_INSTANTIATE = ("cudaGraphInstantiate", "cuGraphInstantiate")
MAX_CANDIDATES = 5
BAND = 64  # extra diagonals the sequence alignment explores beyond the length difference

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

_KERNEL, _MEMCPY, _MEMSET = "kernel", "memcpy", "memset"
_GPU_KIND = {Cat.KERNEL: _KERNEL, Cat.MEMCPY: _MEMCPY, Cat.MEMSET: _MEMSET}


def launch_kind(name: str) -> str | None:
    """What a runtime/driver call puts into a graph when captured: a kernel, memcpy or memset node."""
    if name.startswith(("cudaLaunch", "cuLaunch")):
        return None if "HostFunc" in name else _KERNEL
    if name.startswith(("cudaMemcpy", "cuMemcpy")):
        return _MEMCPY
    if name.startswith(("cudaMemset", "cuMemset")):
        return _MEMSET
    return None


# -- the report --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CapturedGraph:
    """One profiled graph capture: where it ran and how many nodes (launches) it recorded."""

    trace: str
    thread: int
    start_ns: int  # trace-relative, on that trace's clock
    launches: int
    found_by: str  # "cudaStreamBeginCapture..cudaStreamEndCapture" or "launches without GPU activity"


@dataclass(frozen=True)
class GraphReplays:
    """The replays of one graph (same graph id, or the same kernel sequence) and how they were aligned."""

    capture: int | None  # index into ReplayReport.captures; None when unaligned
    graph_id: int | None
    launches: int  # cudaGraphLaunch calls
    kernels: int  # GPU activities of all those launches
    replay_ns: int
    aligned_ns: int  # given a capture-time origin
    line_ns: int  # ... whose origin names a source line
    method: (
        str  # "graph node id", "launch order", "launch order, several streams", "sequence alignment", "none"
    )
    confidence: float  # of the alignment (a line's own confidence multiplies it)
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReplayReport:
    """What `attribute_replays` did: captures found, replays aligned, share of replay time attributed."""

    trace: str
    capture_traces: tuple[str, ...]
    captures: tuple[CapturedGraph, ...]
    graphs: tuple[GraphReplays, ...]
    graph_launches: int
    replay_kernels: int
    replay_ns: int
    aligned_ns: int
    line_ns: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def aligned_fraction(self) -> float:
        """Share of replay time given a capture-time origin (ops, ranges, frames)."""
        return self.aligned_ns / self.replay_ns if self.replay_ns else 0.0

    @property
    def line_fraction(self) -> float:
        """Share of replay time attributed to an exact capture-time source line."""
        return self.line_ns / self.replay_ns if self.replay_ns else 0.0

    def summary(self) -> str:
        if not self.graph_launches:
            return "no CUDA graph replays in this trace"
        head = (
            f"CUDA graph replays: {self.replay_kernels} kernels of {self.graph_launches} graph launches "
            f"({self.replay_ns / 1e6:.3f} ms)"
        )
        if not self.captures:
            return (
                head + "; no profiled capture, so replayed kernels are labelled as replays (candidates only)"
            )
        return (
            f"{head}; {self.aligned_fraction:.1%} of replay time attributed to capture-time origins, "
            f"{self.line_fraction:.1%} to an exact source line ({len(self.captures)} capture(s))"
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["aligned_fraction"] = self.aligned_fraction
        data["line_fraction"] = self.line_fraction
        data["summary"] = self.summary()
        return data


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
    traces = [trace] + [t for t in _as_list(capture) if t is not trace]
    captures: list[_Capture] = []
    if groups:
        for source in traces:
            captures.extend(_find_captures(source))
    state = _Aligner(trace, attributions, sites or (), source_roots, use_call_from)
    if groups and captures:
        state.attach_capture_origins(captures)
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
    if groups:
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
    graph_corrs = {
        table.correlation[r]
        for r, c in enumerate(table.cat)
        if (c == Cat.RUNTIME or c == Cat.DRIVER) and table.name[r].startswith(GRAPH_LAUNCH_PREFIXES)
    }
    graph_corrs.discard(NONE)
    groups: dict[int, list[int]] = defaultdict(list)
    if not graph_corrs or attributions.time_basis != "gpu":
        return groups
    for i, row in enumerate(attributions.gpu_rows):
        corr = table.correlation[row]
        if corr in graph_corrs:
            groups[corr].append(i)
    return groups


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


# -- captures ---------------------------------------------------------------------------------------
@dataclass
class _Capture:
    trace: Trace
    rows: list[int]  # launch rows in capture order
    kinds: list[str]
    record: CapturedGraph
    origins: list[Origin] = field(default_factory=list)  # per launch, from the capture-time join
    ops: list[str] = field(default_factory=list)  # per launch: the innermost op name ("" if none)
    window: tuple[int, int] = (0, 0)


def _find_captures(trace: Trace) -> list[_Capture]:
    """Capture windows (begin..end capture on one thread) and the node-creating launches inside."""
    table = trace.events
    calls: dict[tuple[int, int], list[int]] = defaultdict(list)
    for r, c in enumerate(table.cat):
        if c == Cat.RUNTIME or c == Cat.DRIVER:
            calls[(table.pid[r], table.tid[r])].append(r)
    found: list[_Capture] = []
    for (_, tid), rows in calls.items():
        rows.sort(key=lambda r: table.ts_ns[r])
        if any(table.name[r].startswith(CAPTURE_BEGIN) for r in rows):
            found.extend(_windowed(trace, tid, rows))
        else:
            found.extend(_orphaned(trace, tid, rows))
    found.sort(key=lambda c: c.record.start_ns)
    return found


def _windowed(trace: Trace, tid: int, rows: list[int]) -> list[_Capture]:
    table = trace.events
    out: list[_Capture] = []
    begin: int | None = None
    launches: list[int] = []
    for r in rows:
        name = table.name[r]
        if name.startswith(CAPTURE_BEGIN):
            begin, launches = r, []
        elif name.startswith(CAPTURE_END) and begin is not None:
            if launches:
                window = (table.ts_ns[begin], table.end_ns(r))
                out.append(
                    _capture(trace, tid, launches, "cudaStreamBeginCapture..cudaStreamEndCapture", window)
                )
            begin = None
        elif begin is not None and launch_kind(name) is not None:
            launches.append(r)
    return out


def _orphaned(trace: Trace, tid: int, rows: list[int]) -> list[_Capture]:
    """No capture markers: runs of launches whose correlation produced no GPU activity, ended by an
    instantiate call or an ordinary launch (captured launches never run at capture time)."""
    table = trace.events
    produced = {table.correlation[r] for r, c in enumerate(table.cat) if Cat(c).is_gpu}
    out: list[_Capture] = []
    run: list[int] = []

    def close() -> None:
        if len(run) > 1:  # one stray launch at the end of a trace is a lost kernel, not a capture
            window = (table.ts_ns[run[0]], table.end_ns(run[-1]))
            out.append(_capture(trace, tid, list(run), "launches without GPU activity", window))
        run.clear()

    for r in rows:
        name = table.name[r]
        if name.startswith(GRAPH_INSTANTIATE):
            close()
        elif launch_kind(name) is not None:
            if table.correlation[r] in produced:
                close()
            else:
                run.append(r)
    close()
    return out


def _capture(trace: Trace, tid: int, rows: list[int], found_by: str, window: tuple[int, int]) -> _Capture:
    table = trace.events
    kinds = [launch_kind(table.name[r]) or _KERNEL for r in rows]
    record = CapturedGraph(trace.meta.path, tid, table.ts_ns[rows[0]], len(rows), found_by)
    return _Capture(trace, rows, kinds, record, window=window)


def _capture_join_trace(trace: Trace, captures: list[_Capture]) -> tuple[Trace, dict[int, int]]:
    """The rows overlapping the capture windows, plus one stand-in kernel per captured launch.

    The join explains a kernel from its launch (correlation) and op (External id); a captured launch
    has no kernel, so a stand-in with the launch's ids lets the unchanged join build its origin.
    Only rows overlapping the windows are kept (enclosing frames and ranges overlap too), so the
    extra join costs what the captures cost, not the whole trace. Returns the trace and a map
    launch row -> stand-in row.
    """
    table = trace.events
    windows = sorted(c.window for c in captures)
    lo, hi = windows[0][0], max(w[1] for w in windows)
    ts, dur = table.ts_ns, table.dur_ns
    keep = [
        r
        for r in range(len(table))
        if ts[r] <= hi
        and ts[r] + dur[r] >= lo
        and any(ts[r] <= w[1] and ts[r] + dur[r] >= w[0] for w in windows)
    ]
    index = {r: i for i, r in enumerate(keep)}
    sub = EventTable()
    for name in (
        "cat",
        "pid",
        "tid",
        "ts_ns",
        "dur_ns",
        "ext_id",
        "correlation",
        "py_id",
        "py_parent",
        "raw_index",
    ):
        column = getattr(table, name)
        setattr(sub, name, array(column.typecode, (column[r] for r in keep)))
    sub.name = [table.name[r] for r in keep]
    sub.args = [table.args[r] for r in keep]
    stand_in: dict[int, int] = {}
    for cap in captures:
        for r in cap.rows:
            stand_in[r] = sub.add(
                Cat.KERNEL,
                "<captured launch>",
                NONE,
                NONE,
                ts[r],
                0,
                ext_id=table.ext_id[r],
                correlation=table.correlation[r],
            )
    fwdbwd = {index[b]: index[f] for b, f in trace.fwdbwd.items() if b in index and f in index}
    return Trace(meta=trace.meta, events=sub, notes=[], fwdbwd=fwdbwd), stand_in


# -- alignment --------------------------------------------------------------------------------------
class _Aligner:
    def __init__(self, trace, attributions, sites, source_roots, use_call_from) -> None:
        self.trace = trace
        self.table = trace.events
        self.attributions = attributions
        self.sites = sites
        self.source_roots = source_roots
        self.use_call_from = use_call_from
        self.notes: list[str] = []
        self._origin_index = {o: i for i, o in enumerate(attributions.origins)}
        self._eager_names = self._eager_kernel_names()

    def attach_capture_origins(self, captures: list[_Capture]) -> None:
        """Run the join once per capture trace over its windows; keep each launch's origin."""
        from tracer.join.attribute import attribute

        by_trace: dict[int, list[_Capture]] = defaultdict(list)
        for cap in captures:
            by_trace[id(cap.trace)].append(cap)
        for caps in by_trace.values():
            joined_trace, stand_in = _capture_join_trace(caps[0].trace, caps)
            joined = attribute(
                joined_trace, self.sites, source_roots=self.source_roots, use_call_from=self.use_call_from
            )
            origin_of_row = {row: joined.origins[o] for row, o in zip(joined.gpu_rows, joined.origin_ids)}
            op_of_row = dict(zip(joined.gpu_rows, joined.op_rows))
            names = joined_trace.events.name
            for cap in caps:
                cap.origins = [origin_of_row[stand_in[r]] for r in cap.rows]
                cap.ops = [names[op] if (op := op_of_row[stand_in[r]]) != NONE else "" for r in cap.rows]

    def _eager_kernel_names(self) -> dict[Origin, set[str]]:
        """Kernel names each origin launched outside graphs: a check on the position-based match."""
        names: dict[Origin, set[str]] = defaultdict(set)
        attributions, table = self.attributions, self.table
        for row, origin_id in zip(attributions.gpu_rows, attributions.origin_ids):
            origin = attributions.origins[origin_id]
            if not origin.replay and table.cat[row] == Cat.KERNEL:
                names[origin].add(table.name[row])
        return names

    def align_all(self, groups: dict[int, list[int]], captures: list[_Capture]) -> list[GraphReplays]:
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

    def _align_graph(self, graph_id, replays: list[_Replay], captures: list[_Capture]) -> GraphReplays:
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
            merged = self._merge_streams(first, captures)
        if merged is not None:
            cap_index, order, mismatches = merged
            for rp in replays:
                rp.reorder(order)
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
            kinds = [_GPU_KIND.get(Cat(table.cat[r]), _KERNEL) for r in first.rows]
            names = [table.name[r] for r in first.rows]
            cap_index, positions, method, evidence = self._best_capture(kinds, names, captures)
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
                if (
                    eager
                    and table.name[row] not in eager
                    or _families_disagree(capture.ops[pos], table.name[row])
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

    def _merge_streams(self, replay: _Replay, captures: list[_Capture]):
        """(capture index, merge order as (stream, index) pairs, mismatches) for a multi-stream replay.

        Without node ids, start times do not give capture order across streams (concurrent branches
        start in either order). Each stream's own order is kept; a beam search interleaves the
        streams so that, position by position, the kernel's kind matches the captured launch and its
        family (GEMM, copy, softmax, ...) matches what the launch's op computes; ties keep start order.
        """
        table = self.table
        streams = sorted(replay.per_stream)
        seqs = [replay.per_stream[s] for s in streams]
        total = sum(len(q) for q in seqs)
        kinds = sorted(_GPU_KIND.get(Cat(table.cat[r]), _KERNEL) for r in replay.rows)
        best = None
        for index, cap in enumerate(captures):
            if len(cap.kinds) != total or sorted(cap.kinds) != kinds:
                continue
            order, score, mismatches = _beam_merge(table, seqs, cap, self._eager_names)
            if order is not None and (best is None or score > best[0]):
                best = (score, index, [(streams[s], i) for s, i in order], mismatches)
        if best is None:
            return None
        return best[1], best[2], best[3]

    def _best_capture(self, kinds, names, captures):
        """(capture index, capture position per replay kernel, method, evidence) of the best fit."""
        scored = []
        for index, cap in enumerate(captures):
            if len(cap.kinds) == len(kinds) and cap.kinds == kinds:
                positions: list[int | None] = list(range(len(kinds)))
                agree = self._name_score(names, cap, positions)
                scored.append((2.0 + agree, index, positions, "launch order"))
            else:
                positions, matched = _sequence_alignment(kinds, names, cap, self._eager_names)
                scored.append(
                    (matched / max(len(kinds), len(cap.kinds), 1), index, positions, "sequence alignment")
                )
        scored.sort(key=lambda s: (-s[0], -captures[s[1]].record.start_ns))
        score, index, positions, method = scored[0]
        cap = captures[index]
        evidence: tuple[str, ...]
        if method == "launch order":
            evidence = (
                (
                    f"replay kernel k = capture launch k: {len(kinds)} kernels per replay, {len(cap.kinds)} "
                    f"captured launches, kinds agree at every position"
                ),
            )
        else:
            placed = sum(p is not None for p in positions)
            evidence = (
                (
                    f"sequence alignment: {placed} of {len(kinds)} kernels per replay placed among "
                    f"{len(cap.kinds)} captured launches (counts or kinds differ)"
                ),
            )
        tied = [s for s in scored[1:] if abs(s[0] - score) < 1e-9 and s[3] == method]
        if tied:
            mine = [cap.origins[p] if p is not None else None for p in positions]
            differ = [
                s
                for s in tied
                if [captures[s[1]].origins[p] if p is not None else None for p in s[2]] != mine
            ]
            if differ:
                evidence += (
                    (
                        f"{len(differ)} other capture(s) fit equally well with different origins; "
                        "the latest one was taken"
                    ),
                )
                self.notes.append("a replayed graph fits several profiled captures with different origins")
                return index, positions, "sequence alignment", evidence
            evidence += (f"{len(tied)} other capture(s) fit equally well, with the same origins",)
        return index, positions, method, evidence

    def _name_score(self, names, cap: _Capture, positions) -> float:
        """Share of positions whose kernel name is one their origin launched eagerly (where known)."""
        known = agree = 0
        for name, pos in zip(names, positions):
            eager = self._eager_names.get(cap.origins[pos]) if pos is not None else None
            if eager:
                known += 1
                agree += name in eager
        return agree / known if known else 0.0

    def _replayed(
        self, origin: Origin, capture: _Capture, launches: int, method: str, confidence: float
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


# What a kernel computes, from its name, and what an op computes: used only to order concurrent
# kernels and to check a match, never to pick between origins that launch the same kernel name.
_KERNEL_FAMILIES = (
    ("sort", re.compile(r"topk|sort", re.IGNORECASE)),
    ("gemm", re.compile(r"gemm|nvjet|cutlass|xmma|splitk|cublas|wgmma", re.IGNORECASE)),
    ("softmax", re.compile(r"softmax", re.IGNORECASE)),
    ("copy", re.compile(r"copy", re.IGNORECASE)),
    ("gather", re.compile(r"gather|index", re.IGNORECASE)),
    ("reduce", re.compile(r"reduce_kernel", re.IGNORECASE)),
    ("communication", re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter", re.IGNORECASE)),
)
_OP_FAMILIES = {
    **dict.fromkeys(("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::_scaled_mm"), "gemm"),
    **dict.fromkeys(("aten::copy_", "aten::_to_copy", "aten::clone", "aten::cat"), "copy"),
    **dict.fromkeys(("aten::_softmax", "aten::softmax", "aten::_log_softmax"), "softmax"),
    **dict.fromkeys(
        ("aten::index", "aten::index_select", "aten::gather", "aten::_index_put_impl_"), "gather"
    ),
    **dict.fromkeys(("aten::embedding", "aten::take"), "gather"),
    **dict.fromkeys(("aten::topk", "aten::sort", "aten::argsort"), "sort"),
    **dict.fromkeys(("aten::sum", "aten::mean", "aten::amax", "aten::max", "aten::norm"), "reduce"),
}
BEAM = 32


def _kernel_family(name: str) -> str | None:
    return next((family for family, pattern in _KERNEL_FAMILIES if pattern.search(name)), None)


def _fit(op: str, kernel: str) -> int:
    """+1 when op and kernel name the same family, -1 when both are known and differ, else 0."""
    wanted = _OP_FAMILIES.get(op)
    found = _kernel_family(kernel)
    if wanted is None or found is None:
        return 0
    return 1 if wanted == found else -1


def _families_disagree(op: str, kernel: str) -> bool:
    return _fit(op, kernel) < 0


def _beam_merge(table: EventTable, seqs: list[list[int]], cap: _Capture, eager):
    """Interleave per-stream sequences onto the capture's launches; (order, score, mismatches)."""
    beams: list[tuple[float, tuple[int, ...], list[tuple[int, int]], int]] = [(0.0, (0,) * len(seqs), [], 0)]
    for pos in range(len(cap.kinds)):
        grown: dict[tuple[int, ...], tuple[float, tuple[int, ...], list[tuple[int, int]], int]] = {}
        for score, heads, order, mismatches in beams:
            starts = [table.ts_ns[q[h]] if h < len(q) else None for q, h in zip(seqs, heads)]
            earliest = min((t for t in starts if t is not None), default=None)
            for s, q in enumerate(seqs):
                h = heads[s]
                if h >= len(q):
                    continue
                row = q[h]
                if _GPU_KIND.get(Cat(table.cat[row]), _KERNEL) != cap.kinds[pos]:
                    continue
                fit = _fit(cap.ops[pos], table.name[row])
                known = eager.get(cap.origins[pos]) if cap.origins else None
                if known:
                    fit = 1 if table.name[row] in known else -1
                gain = 2.0 * fit + (0.5 if starts[s] == earliest else 0.0)
                key = heads[:s] + (h + 1,) + heads[s + 1 :]
                candidate = (score + gain, key, order + [(s, h)], mismatches + (fit < 0))
                if key not in grown or candidate[0] > grown[key][0]:
                    grown[key] = candidate
        if not grown:
            return None, float("-inf"), 0
        beams = sorted(grown.values(), key=lambda b: -b[0])[:BEAM]
    score, _, order, mismatches = beams[0]
    return order, score, mismatches


def _sequence_alignment(
    kinds, names, cap: _Capture, eager: dict[Origin, set[str]]
) -> tuple[list[int | None], int]:
    """Banded global alignment of the replay sequence to the capture's launches.

    A match needs the same kind; it scores more when the kernel name is one the capture position's
    origin launched eagerly. Gaps cost 1, except capture launches skipped at either end (a trace
    cut in the middle of a replay). Returns each replay kernel's capture position (or None).
    """
    n, m = len(kinds), len(cap.kinds)
    if n == 0 or m == 0:
        return [None] * n, 0
    band = abs(n - m) + BAND
    neg = float("-inf")
    # Row i keeps only columns lo[i]..hi[i]; moves: 1 diagonal, 2 skip a replay kernel, 3 skip a launch.
    lo = [0] * (n + 1)
    hi = [m] * (n + 1)
    scores: list[list[float]] = [[0.0] * (m + 1)]  # leading capture launches are free to skip
    moves: list[bytearray] = [bytearray([3]) * (m + 1)]

    def at(i: int, j: int) -> float:
        return scores[i][j - lo[i]] if lo[i] <= j <= hi[i] else neg

    for i in range(1, n + 1):
        centre = i * m // n
        lo[i], hi[i] = max(0, centre - band), min(m, centre + band)
        row = [neg] * (hi[i] - lo[i] + 1)
        how_row = bytearray(len(row))
        scores.append(row)
        moves.append(how_row)
        kind, name = kinds[i - 1], names[i - 1]
        skip_cost = 0.0 if i == n else 1.0  # trailing capture launches are free to skip
        for j in range(lo[i], hi[i] + 1):
            best, how = at(i - 1, j) - 1.0, 2
            if j > lo[i] and row[j - 1 - lo[i]] - skip_cost > best:
                best, how = row[j - 1 - lo[i]] - skip_cost, 3
            if j > 0 and kind == cap.kinds[j - 1]:
                diagonal = at(i - 1, j - 1)
                if diagonal > neg:
                    known = eager.get(cap.origins[j - 1]) if cap.origins else None
                    gain = 1.0 if not known else (2.0 if name in known else 0.25)
                    if diagonal + gain > best:
                        best, how = diagonal + gain, 1
            row[j - lo[i]], how_row[j - lo[i]] = best, how
    positions: list[int | None] = [None] * n
    i = n
    j = max(range(lo[n], hi[n] + 1), key=lambda c: scores[n][c - lo[n]])
    matched = 0
    while i > 0:
        how = moves[i][j - lo[i]] if lo[i] <= j <= hi[i] else 2
        if how == 1:
            positions[i - 1] = j - 1
            matched += 1
            i, j = i - 1, j - 1
        elif how == 3 and j > 0:
            j -= 1
        else:
            i -= 1
    return positions, matched


__all__ = ["CapturedGraph", "GraphReplays", "ReplayReport", "attribute_replays", "launch_kind"]
