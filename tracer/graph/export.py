"""`write_graph`: the call graph as GraphML (yEd, Gephi, networkx) or node-link JSON, by suffix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx
import orjson

from tracer.errors import InputError
from tracer.output_files import check_output, json_ready, write_output, xml_data

GRAPH_SUFFIXES = (".graphml", ".json")


def _graphml_value(value: Any) -> Any:
    """GraphML holds scalars only: lists become lines of text; None is left out by the caller. Text is
    XML: characters it cannot hold (ESC, NUL, U+FFFF, bytes of a file name that are not UTF-8) are
    written as ``\\xNN`` escapes, so the file stays well-formed and the names distinct."""
    if isinstance(value, (list, tuple)):
        return xml_data("\n".join(str(item) for item in value))
    if isinstance(value, str):
        return xml_data(value)
    return value


def _graphml_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    return {key: _graphml_value(value) for key, value in attrs.items() if value is not None}


def to_graphml_ready(graph: nx.DiGraph) -> nx.DiGraph:
    """A copy of `graph` whose every attribute GraphML can store."""
    ready = nx.DiGraph()
    ready.graph.update(_graphml_attrs(graph.graph))
    for node, attrs in graph.nodes(data=True):
        ready.add_node(_graphml_value(node), **_graphml_attrs(attrs))
    for u, v, attrs in graph.edges(data=True):
        ready.add_edge(_graphml_value(u), _graphml_value(v), **_graphml_attrs(attrs))
    return ready


def node_link(graph: nx.DiGraph) -> dict[str, Any]:
    """The graph as node-link data (``nodes``, ``edges``, ``graph``), JSON-ready."""
    return nx.node_link_data(graph, edges="edges")


def write_graph(graph: nx.DiGraph, path: str | Path) -> Path:
    """Write `graph` to `path` as GraphML (``.graphml``) or node-link JSON (``.json``)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in GRAPH_SUFFIXES:
        raise InputError(
            path, f"unknown graph format {suffix or '(no suffix)'}; use one of {', '.join(GRAPH_SUFFIXES)}"
        )
    check_output(path)
    if suffix == ".graphml":
        data = b"".join(line.encode() + b"\n" for line in nx.generate_graphml(to_graphml_ready(graph)))
    else:
        data = orjson.dumps(
            json_ready(node_link(graph)), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
        )
    return write_output(path, data)
