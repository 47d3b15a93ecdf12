"""The call graph: each hot kernel's origin as one networkx DiGraph that every rendering draws."""

from tracer.graph.build import KERNEL, NODE_KINDS, OTHER, ROOT, ROOT_ID, build_context_graph, build_graph
from tracer.graph.context import FUNCTION, OPS, SCOPE, SITE
from tracer.graph.export import GRAPH_SUFFIXES, node_link, write_graph

__all__ = [
    "FUNCTION",
    "GRAPH_SUFFIXES",
    "KERNEL",
    "NODE_KINDS",
    "OPS",
    "OTHER",
    "ROOT",
    "ROOT_ID",
    "SCOPE",
    "SITE",
    "build_context_graph",
    "build_graph",
    "node_link",
    "write_graph",
]
