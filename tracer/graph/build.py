"""`build_graph`: the one call graph every renderer draws, built from an `Analysis`'s findings.

The graph is a calling-context tree (root -> scopes -> Python functions -> source site -> aten op
chain) whose leaves point at shared kernel nodes, so a kernel's in-edges sum to its GPU time. A
kernel of torch.compile'd code hangs under its Inductor graph, and has an edge out to each user line
it fused (``fused=True``, that line's ops on the edge).
Findings outside ``top``/``min_share`` fold into "other" nodes (`tracer.graph.tree`). Every number on a node or edge is a sum of `Finding` fields (per-step figures
divide by the analysis' step count); renderers only format them.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import networkx as nx

from tracer.graph.context import FUNCTION, OPS, SCOPE, SITE
from tracer.graph.tree import ROOT, ROOT_ID, Context, Entry, build_tree, entries_of
from tracer.model import Analysis, Finding
from tracer.model.origin import FusedLine

KERNEL, OTHER = "kernel", "other"
NODE_KINDS = (ROOT, SCOPE, FUNCTION, SITE, OPS, KERNEL, OTHER)


def _digest(*parts: str) -> str:
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=6).hexdigest()


def _kernel_id(kernel: str) -> str:
    return f"{KERNEL}:{_digest(kernel)}"


def _context_id(node: Context) -> str:
    return f"{node.step.kind}:{_digest(*node.key_path)}"


class _Totals:
    """Sums of finding fields for one node or edge, per side."""

    def __init__(self) -> None:
        self.time_ns: dict[str, int] = defaultdict(int)
        self.share: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        # per side and kernel: calls per step, summed over the findings of that kernel
        self.kernel_calls_per_step: dict[str, dict[str, float | None]] = defaultdict(dict)
        self.steps: dict[str, int | None] = {}
        self.category_time: dict[str, int] = defaultdict(int)
        self.findings: list[Finding] = []

    def add(self, entry: Entry) -> None:
        finding, side = entry.finding, entry.side
        self.time_ns[side] += finding.total_ns
        self.share[side] += finding.share
        self.calls[side] += finding.calls
        self.steps[side] = entry.steps
        per_kernel = self.kernel_calls_per_step[side]
        previous = per_kernel.get(finding.kernel, 0.0)
        per_kernel[finding.kernel] = (
            None if previous is None or finding.calls_per_step is None else previous + finding.calls_per_step
        )
        self.category_time[finding.category] += finding.total_ns
        self.findings.append(finding)

    def calls_per_step(self, side: str) -> float | None:
        """Calls per step of the most-called kernel: a line's runs (each run launches each of its
        kernels once), as `explain` and `diff` count them, not a sum over the kernels it launches."""
        counts = list(self.kernel_calls_per_step.get(side, {}).values())
        known = [count for count in counts if count is not None]
        if not counts or len(known) < len(counts):
            return None
        return max(known)

    def time_ns_all(self) -> int:
        return sum(self.time_ns.values())

    def attributes(self, sides: Sequence[str]) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        if self.category_time:
            attrs["category"] = max(self.category_time.items(), key=lambda item: (item[1], item[0]))[0]
        for side in sides:
            prefix = f"{side}_" if side and side != sides[-1] else ""
            steps = self.steps.get(side)
            time_ns = self.time_ns.get(side, 0)
            calls = self.calls.get(side, 0)
            attrs[prefix + "time_ns"] = time_ns
            attrs[prefix + "share"] = self.share.get(side, 0.0)
            attrs[prefix + "calls"] = calls
            attrs[prefix + "calls_per_step"] = self.calls_per_step(side) if calls else 0.0
            attrs[prefix + "ns_per_step"] = time_ns / steps if steps else None
            attrs[prefix + "per_call_ns"] = time_ns / calls if calls else None
        attrs["findings"] = len(self.findings)
        # Per-call figures of a single finding carry over unchanged; several findings have no one value.
        single = {(f.bytes_per_call, f.gbps, f.peak_fraction) for f in self.findings}
        if len(single) == 1:
            attrs["bytes_per_call"], attrs["gbps"], attrs["peak_fraction"] = next(iter(single))
        # The explain stage's words (once per layer; whole buffer cast then indexed), where they agree.
        for name in ("invariant", "waste"):
            said = {getattr(f, name) for f in self.findings} - {None}
            if len(said) == 1:
                attrs[name] = next(iter(said))
        return attrs


def build_context_graph(
    analyses: Sequence[tuple[str, Analysis]], *, top: int | None = None, min_share: float = 0.0
) -> nx.DiGraph:
    """The graph of one or more analyses drawn over one tree (sides "" or "before"/"after").

    With two sides, sites match by source text (a fix moves lines), as `diff_analyses` matches them,
    and the contexts kept are those whose time per step changed most.
    """
    entries = entries_of(analyses)
    sides = [side for side, _ in analyses]
    root, kept = build_tree(entries, top=top, min_share=min_share, diff=len(analyses) > 1)

    emitter = _Emitter(sides)
    emitter.emit(root)
    emitter.finish_kernels()
    emitter.fused_lines()
    _mark_hot_path(emitter.graph, entries, kept, emitter.leaf_paths)
    return emitter.graph


def _context_attributes(node: Context) -> dict[str, Any]:
    step = node.step
    attrs: dict[str, Any] = {"kind": step.kind, "label": step.label, "key": step.key, "detail": step.detail}
    if step.kind == FUNCTION:
        attrs["where"] = step.where
    if step.kind == FUNCTION and len(node.chain) > 1:
        # a merged run of frames: named by its last (innermost) frame, all of them listed
        last = node.chain[-1]
        attrs.update(label=last.label, where=last.where, key=last.key)
        attrs["frames"] = [f"{s.label} ({s.where})" if s.where else s.label for s in node.chain]
        attrs["detail"] = "\n".join(s.detail for s in node.chain)
    if step.kind == SCOPE and len(node.raw_names) > 1:
        attrs["merged"] = len(node.raw_names)
    if step.kind == SITE:
        origins = [entry.finding.origin for entry in node.entries()]
        best = max(origins, key=lambda origin: origin.confidence)
        attrs.update(
            location=best.location,
            file=best.file,
            line=best.line,
            source=best.source,
            rule=best.rule,
            site_id=best.site_id,
            confidence=best.confidence,
            evidence=list(best.evidence),
            answer=best.answer,
            candidates=list(best.candidates),
        )
    return attrs


def _totals(entries: Iterable[Entry]) -> _Totals:
    totals = _Totals()
    for entry in entries:
        totals.add(entry)
    return totals


class _Emitter:
    """Writes the tree into a networkx graph: context nodes, shared kernel nodes, "other" nodes."""

    def __init__(self, sides: Sequence[str]) -> None:
        self.graph = nx.DiGraph()
        self.sides = sides
        self.kernel_entries: dict[str, list[Entry]] = defaultdict(list)
        self.leaf_paths: dict[int, list[str]] = {}  # id(entry) -> node ids from the root to its kernel

    def emit(self, node: Context, parent_id: str | None = None, path: tuple[str, ...] = ()) -> None:
        graph, sides = self.graph, self.sides
        node_id = ROOT_ID if node.step.kind == ROOT else _context_id(node)
        totals = _totals(node.entries())
        graph.add_node(node_id, **_context_attributes(node), **totals.attributes(sides))
        if parent_id is not None:
            graph.add_edge(parent_id, node_id, **_edge_attributes(totals, sides))
        path = path + (node_id,)
        # Heaviest first: graphviz keeps insertion order among siblings, so the hot path reads leftmost.
        for child in sorted(node.children.values(), key=lambda c: -_totals(c.entries()).time_ns_all()):
            self.emit(child, node_id, path)
        by_kernel: dict[str, list[Entry]] = defaultdict(list)
        for entry in node.findings:
            by_kernel[entry.finding.kernel].append(entry)
            self.leaf_paths[id(entry)] = [*path, _kernel_id(entry.finding.kernel)]
        for kernel, kernel_entries in sorted(by_kernel.items(), key=lambda kv: -_totals(kv[1]).time_ns_all()):
            kernel_id = _kernel_id(kernel)
            if kernel_id not in graph:
                finding = kernel_entries[0].finding
                graph.add_node(
                    kernel_id,
                    kind=KERNEL,
                    label=finding.kernel_short,
                    key=kernel,
                    detail=kernel,
                    kernel=kernel,
                )
            self.kernel_entries[kernel].extend(kernel_entries)
            graph.add_edge(node_id, kernel_id, **_edge_attributes(_totals(kernel_entries), sides))
        if node.others:
            other_totals = _totals(node.others)
            kernels = {entry.finding.kernel for entry in node.others}
            other_id = f"{OTHER}:{_digest(*node.key_path)}"
            graph.add_node(
                other_id,
                kind=OTHER,
                label="other",
                key=OTHER,
                detail=f"{len(node.others)} smaller findings of {len(kernels)} kernels",
                kernels=len(kernels),
                **other_totals.attributes(sides),
            )
            graph.add_edge(node_id, other_id, **_edge_attributes(other_totals, sides))

    def finish_kernels(self) -> None:
        """A kernel node sums every edge into it (the same kernel launched from several places)."""
        for kernel, entries in self.kernel_entries.items():
            node = self.graph.nodes[_kernel_id(kernel)]
            node.update(_totals(entries).attributes(self.sides))
            node["category"] = entries[0].finding.category

    def fused_lines(self) -> None:
        """A kernel Inductor fused from several user lines: an edge from its node to each line (a site
        node, shared by every kernel that fused it), carrying the time of the kernels that did."""
        by_line: dict[tuple[str, int], list[Entry]] = defaultdict(list)
        edges: dict[tuple[str, tuple[str, int]], list[Entry]] = defaultdict(list)
        lines: dict[tuple[str, int], FusedLine] = {}
        ops: dict[tuple[str, tuple[str, int]], list[str]] = defaultdict(list)
        for kernel, entries in self.kernel_entries.items():
            for entry in entries:
                for fused in entry.finding.origin.fused:
                    place = (fused.file, fused.line)
                    lines.setdefault(place, fused)
                    by_line[place].append(entry)
                    edges[(kernel, place)].append(entry)
                    ops[(kernel, place)].extend(op for op in fused.ops if op not in ops[(kernel, place)])
        for place, entries in by_line.items():
            fused = lines[place]
            short = "/".join(fused.file.replace("\\", "/").split("/")[-2:])
            line_ops = list(dict.fromkeys(op for entry in entries for f in entry.finding.origin.fused
                                          if (f.file, f.line) == place for op in f.ops))  # fmt: skip
            self.graph.add_node(
                _fused_id(place),
                kind=SITE,
                label=f"{short}:{fused.line}" + (f" [{', '.join(line_ops)}]" if line_ops else ""),
                key=fused.location,
                detail=fused.location,
                location=fused.location,
                file=fused.file,
                line=fused.line,
                source=fused.source,
                fused_line=True,
                ops=line_ops,
                **_totals(entries).attributes(self.sides),
            )  # fmt: skip
        for (kernel, place), entries in edges.items():
            attrs = _edge_attributes(_totals(entries), self.sides)
            self.graph.add_edge(
                _kernel_id(kernel), _fused_id(place), fused=True, ops=ops[(kernel, place)], **attrs
            )


def _fused_id(place: tuple[str, int]) -> str:
    return f"fused:{_digest(place[0], str(place[1]))}"


def _edge_attributes(totals: _Totals, sides: Sequence[str]) -> dict[str, Any]:
    attrs = totals.attributes(sides)
    attrs.pop("category", None)
    return attrs


def _mark_hot_path(
    graph: nx.DiGraph, entries: Sequence[Entry], kept: set[int], leaf_paths: dict[int, list[str]]
) -> None:
    for node_id in graph:
        graph.nodes[node_id]["hot"] = False
    for edge in graph.edges:
        graph.edges[edge]["hot"] = False
    last_side = entries[-1].side if entries else ""
    candidates = [i for i in kept if entries[i].side == last_side]
    if not candidates:
        graph.graph["hot_path"] = []
        return
    heaviest = max(candidates, key=lambda i: (entries[i].finding.total_ns, entries[i].finding.kernel))
    hot_path = leaf_paths[id(entries[heaviest])]
    for node_id in hot_path:
        graph.nodes[node_id]["hot"] = True
    for u, v in itertools.pairwise(hot_path):
        graph.edges[u, v]["hot"] = True
    graph.graph["hot_path"] = hot_path


def build_graph(analysis: Analysis, *, top: int | None = None, min_share: float = 0.0) -> nx.DiGraph:
    """The call graph of `analysis`: the `top` heaviest findings at or above `min_share` (0..1) in
    full, the rest folded into "other" nodes. ``graph.graph`` carries the analysis' totals and the
    hot path (node ids from the root to the heaviest finding's kernel)."""
    graph = build_context_graph([("", analysis)], top=top, min_share=min_share)
    root = graph.nodes[ROOT_ID]
    root["label"] = analysis.trace
    graph.graph.update(analysis_summary(analysis), top=top, min_share=min_share, diff=False)
    return graph


def analysis_summary(analysis: Analysis, prefix: str = "") -> dict[str, Any]:
    fields = (
        "trace",
        "device",
        "time_basis",
        "total_ns",
        "window_ns",
        "steps",
        "step_ns",
        "layers",
        "peak_gbps",
        "gpu_busy_fraction",
        "attributed_fraction",
        "replay_fraction",
        "rank",
    )
    return {prefix + name: getattr(analysis, name) for name in fields}
