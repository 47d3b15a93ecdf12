"""Draw the call graph with graphviz `dot`: SVG, PNG, PDF or the DOT text itself.

Colour says the kernel category (or, for a diff, faster/slower/new/vanished), edge width the share
of GPU time, and the heaviest chain from the root to its kernel is drawn bold red.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx

from tracer.errors import InputError
from tracer.graph.build import KERNEL, OTHER, ROOT
from tracer.graph.context import FUNCTION, OPS, SCOPE, SITE
from tracer.graph.labels import Line, NodeText, format_share, node_text
from tracer.output_files import check_output, write_output
from tracer.render.escape import dot_html, dot_string

RENDER_SUFFIXES = (".svg", ".png", ".pdf", ".dot")
FONT = "Helvetica,Arial,sans-serif"
MONO = "DejaVu Sans Mono,Menlo,Consolas,monospace"
HOT = "#c0111f"
RANKDIR = "TB"

# category -> (fill, border). Context nodes take a paler fill of their heaviest category.
CATEGORY_COLOURS: dict[str, tuple[str, str]] = {
    "cast/copy": ("#fdc48a", "#d95f0e"),
    "gemm": ("#b7d3ef", "#2c7fb8"),
    "attention": ("#d4cfee", "#6a51a3"),
    "communication": ("#bfe5b8", "#31a354"),
    "other": ("#e3e3e3", "#8a8a8a"),
}
CATEGORY_OF = {"memcpy": "cast/copy", "memset": "other"}
PALE = {
    "cast/copy": "#fff1e2",
    "gemm": "#edf4fb",
    "attention": "#f3f1fa",
    "communication": "#eef8ec",
    "other": "#f6f6f6",
}

# change -> (fill, border) for diff graphs
CHANGE_COLOURS: dict[str, tuple[str, str]] = {
    "faster": ("#c7e9c0", "#238b45"),
    "slower": ("#fcbba1", "#cb181d"),
    "new": ("#fdd0a2", "#d94801"),
    "vanished": ("#e5f5e0", "#238b45"),
    "same": ("#f0f0f0", "#8a8a8a"),
}


def _category(attrs: dict[str, Any]) -> str:
    category = str(attrs.get("category") or "other")
    category = CATEGORY_OF.get(category, category)
    return category if category in CATEGORY_COLOURS else "other"


def _html_label(text: NodeText) -> str:
    rows = []
    for line in text.lines:
        rows.append(f'<TR><TD ALIGN="LEFT" BALIGN="LEFT">{_styled(line)}</TD></TR>')
    return f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">{"".join(rows)}</TABLE>>'


def _styled(line: Line) -> str:
    text = dot_html(line.text)
    if line.style == "bold":
        return f'<FONT POINT-SIZE="12"><B>{text}</B></FONT>'
    if line.style == "code":
        return f'<FONT FACE="{MONO}" POINT-SIZE="10">{text}</FONT>'
    if line.style == "small":
        return f'<FONT POINT-SIZE="10" COLOR="#333333">{text}</FONT>'
    if line.style == "alert":
        return f'<FONT POINT-SIZE="10" COLOR="{HOT}">{text}</FONT>'
    if line.style == "muted":
        return f'<FONT POINT-SIZE="10" COLOR="#777777">{text}</FONT>'
    return text


def _edge_width(share: float, top_share: float) -> float:
    return round(1.0 + 5.0 * (share / top_share if top_share > 0 else 0.0), 2)


def _title(graph: nx.DiGraph) -> str:
    if graph.graph.get("diff"):
        title = "Change per origin: green faster or vanished, red slower, orange new"
        legend = ["faster", "slower", "new", "vanished"]
        cells = "".join(
            f'<TD BGCOLOR="{CHANGE_COLOURS[name][0]}" COLOR="{CHANGE_COLOURS[name][1]}" BORDER="1">'
            f"{dot_html(name)}</TD>"
            for name in legend
        )
    else:
        basis = "GPU time" if graph.graph.get("time_basis", "gpu") == "gpu" else "CPU op time"
        title = f"Where the {basis} comes from: scope → Python → source line → aten ops → kernel"
        cells = "".join(
            f'<TD BGCOLOR="{fill}" COLOR="{border}" BORDER="1">{dot_html(name)}</TD>'
            for name, (fill, border) in CATEGORY_COLOURS.items()
        )
        cells += f'<TD BORDER="1" COLOR="{HOT}"><FONT COLOR="{HOT}"><B>hot path</B></FONT></TD>'
    return (
        '<<TABLE BORDER="0" CELLSPACING="4" CELLPADDING="3">'
        f'<TR><TD COLSPAN="8" ALIGN="LEFT"><FONT POINT-SIZE="14"><B>{dot_html(title)}</B></FONT></TD></TR>'
        f"<TR>{cells}</TR></TABLE>>"
    )


def to_dot(graph: nx.DiGraph):  # -> graphviz.Digraph
    """The graphviz drawing of `graph` (a `build_graph` or diff graph), every text escaped."""
    import graphviz

    diff = bool(graph.graph.get("diff"))
    dot = graphviz.Digraph("kerneltrace", engine="dot")
    dot.attr(
        rankdir=RANKDIR,
        nodesep="0.25",
        ranksep="0.35",
        fontname=FONT,
        label=_title(graph),
        labelloc="t",
        labeljust="l",
        bgcolor="white",
        pad="0.3",
    )
    dot.attr("node", shape="box", style="rounded,filled", fontname=FONT, fontsize="11", margin="0.12,0.06")
    dot.attr("edge", color="#9a9a9a", arrowsize="0.5", fontname=FONT, fontsize="10", fontcolor="#444444")
    ids = {node: f"n{index}" for index, node in enumerate(graph)}
    inlined = inlined_op_chains(graph)
    top_share = max((attrs.get("share") or 0.0 for _, attrs in graph.nodes(data=True)), default=0.0)
    if diff:
        top_share = max((_diff_weight(attrs) for _, attrs in graph.nodes(data=True)), default=0.0)
    for node, attrs in graph.nodes(data=True):
        if node in inlined.values():
            continue
        text = node_text(attrs, graph.graph)
        if node in inlined:
            chain = node_text(graph.nodes[inlined[node]], graph.graph).lines
            text = NodeText(_insert_chain(text.lines, chain), text.tooltip)
        dot.node(
            ids[node], label=_html_label(text), tooltip=dot_string(text.tooltip), **_node_style(attrs, diff)
        )
    owner_of = {chain: owner for owner, chain in inlined.items()}
    for u, v, attrs in graph.edges(data=True):
        if v in owner_of:
            continue  # drawn inside its parent
        tail = owner_of.get(u, u)
        share = _diff_weight(attrs) if diff else (attrs.get("share") or 0.0)
        style: dict[str, str] = {"penwidth": str(_edge_width(share, top_share))}
        if attrs.get("hot") and not diff:
            style.update(color=HOT, penwidth=str(_edge_width(share, top_share) + 1.0))
        if not diff and graph.nodes[v].get("kind") == KERNEL and graph.in_degree(v) > 1:
            style["label"] = dot_string(f" {format_share(attrs.get('share'))}")
        dot.edge(ids[tail], ids[v], **style)
    return dot


def _insert_chain(lines: tuple[Line, ...], chain: tuple[Line, ...]) -> tuple[Line, ...]:
    """The op chain goes under the source text (a site) or above the figures (a function)."""
    code = [i for i, line in enumerate(lines) if line.style == "code"]
    small = [i for i, line in enumerate(lines) if line.style == "small"]
    at = code[-1] + 1 if code else (small[0] if small else len(lines))
    return lines[:at] + chain + lines[at:]


def inlined_op_chains(graph: nx.DiGraph) -> dict[str, str]:
    """Op-chain nodes drawn as a line inside their parent (parent -> chain) where the chain is the
    parent's only child: one rank fewer, and the chain reads right under its source line."""
    inlined = {}
    for node, attrs in graph.nodes(data=True):
        if attrs.get("kind") != OPS:
            continue
        parents = list(graph.predecessors(node))
        if (
            len(parents) == 1
            and graph.out_degree(parents[0]) == 1
            and graph.nodes[parents[0]].get("kind") in (SITE, FUNCTION, SCOPE)
        ):
            inlined[parents[0]] = node
    return inlined


def _diff_weight(attrs: dict[str, Any]) -> float:
    return max(attrs.get("before_share") or 0.0, attrs.get("share") or 0.0)


def _node_style(attrs: dict[str, Any], diff: bool) -> dict[str, str]:
    kind = attrs.get("kind")
    if diff:
        fill, border = CHANGE_COLOURS.get(str(attrs.get("change") or "same"), CHANGE_COLOURS["same"])
        style = {"fillcolor": fill, "color": border}
        if attrs.get("change") == "vanished":
            style["style"] = "rounded,filled,dashed"
        return style
    category = _category(attrs)
    fill, border = CATEGORY_COLOURS[category]
    if kind == ROOT:
        style = {"fillcolor": "white", "color": "#444444", "shape": "box"}
    elif kind == KERNEL:
        style = {"fillcolor": fill, "color": border}
    elif kind == OTHER:
        style = {"shape": "plaintext", "style": "", "fontsize": "9", "margin": "0.02"}
    elif kind == OPS:
        style = {"fillcolor": PALE[category], "color": border, "style": "filled", "shape": "box"}
    else:
        style = {"fillcolor": PALE[category], "color": border}
    if kind == SITE:
        style["penwidth"] = "1.6"
    if attrs.get("hot"):
        style.update(color=HOT, penwidth="3")
    return style


def render_graph(graph: nx.DiGraph, path: str | Path) -> Path:
    """Write the drawing of `graph` to `path`; the suffix picks the format (.svg .png .pdf .dot)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in RENDER_SUFFIXES:
        raise InputError(
            path, f"unknown drawing format {suffix or '(no suffix)'}; use one of {', '.join(RENDER_SUFFIXES)}"
        )
    check_output(path)  # before the drawing: a bad output name should not wait for `dot`
    dot = to_dot(graph)
    if suffix != ".dot":
        return write_output(path, _pipe(dot, suffix[1:], path))
    # A .dot file is laid out once too (where `dot` is installed): one `dot` cannot read is never written.
    _pipe(dot, "canon", path, missing_ok=True)
    return write_output(path, dot.source.encode())


def render_svg(graph: nx.DiGraph) -> str:
    """The SVG text of `graph`'s drawing (for inlining in the HTML report)."""
    return _pipe(to_dot(graph), "svg", "<svg>").decode()


def _pipe(dot: Any, fmt: str, path: object, *, missing_ok: bool = False) -> bytes:
    import graphviz

    try:
        return dot.pipe(format=fmt)
    except graphviz.ExecutableNotFound as err:
        if missing_ok:
            return b""
        raise InputError(path, "graphviz `dot` is not installed (apt-get install graphviz)") from err
    except graphviz.CalledProcessError as err:
        stderr = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else str(err.stderr)
        raise InputError(path, f"graphviz `dot` failed: {stderr.strip().splitlines()[-1:] or err}") from err
