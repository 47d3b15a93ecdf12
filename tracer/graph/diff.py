"""`build_diff_graph`: one call graph over a before and an after analysis, each node marked by change."""

from __future__ import annotations

import networkx as nx

from tracer.explain.diff import classify_change
from tracer.graph.build import ROOT_ID, analysis_summary, build_context_graph
from tracer.model import Analysis


def build_diff_graph(
    before: Analysis, after: Analysis, *, top: int | None = None, min_share: float = 0.0
) -> nx.DiGraph:
    """Nodes carry the after side's figures unprefixed and the before side's as ``before_*``;
    ``change`` is new / vanished / faster / slower / same (per-step time where both have steps)."""
    graph = build_context_graph([("before", before), ("after", after)], top=top, min_share=min_share)
    per_step = bool(before.steps and after.steps)
    for _, attrs in list(graph.nodes(data=True)) + [(None, a) for *_, a in graph.edges(data=True)]:
        time_key = "ns_per_step" if per_step else "time_ns"
        attrs["change"] = classify_change(attrs.get("before_" + time_key), attrs.get(time_key))
        attrs["per"] = "step" if per_step else "trace"
    graph.nodes[ROOT_ID]["label"] = f"{before.trace} → {after.trace}"
    graph.graph.update(analysis_summary(after), diff=True, top=top, min_share=min_share)
    graph.graph.update(analysis_summary(before, prefix="before_"))
    return graph
