"""What each graph node says, as plain text lines with a style: shared by the DOT and HTML renderings.

Numbers are formatted (`tracer.formatting`, as every rendering formats them), never computed: they
are the node's attributes.
Text stays raw; each renderer escapes it for its own format (`tracer.render.escape`).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

from tracer.formatting import (
    cut_middle,
    format_bandwidth,
    format_bytes,
    format_change,
    format_count,
    format_duration,
    format_origin,
    format_share,
)
from tracer.graph.build import KERNEL, OTHER, ROOT
from tracer.graph.context import FUNCTION, OPS, SCOPE, SITE

__all__ = [  # the formatters, as every rendering of the graph uses them (tracer.formatting)
    "format_bytes",
    "format_change",
    "format_count",
    "format_ns",
    "format_share",
]

# How wide each kind of text may get before it is cut in the middle (characters).
KERNEL_WIDTH, SOURCE_WIDTH, FUNCTION_WIDTH, OPS_WIDTH, WASTE_WIDTH = 56, 72, 64, 72, 60


@dataclass(frozen=True)
class Line:
    text: str
    style: str = ""  # "", "bold", "code", "small", "muted", "alert"


@dataclass(frozen=True)
class NodeText:
    lines: tuple[Line, ...]
    tooltip: str


def format_ns(ns: float | None) -> str:
    return format_duration(ns)


def cut(text: str, width: int) -> str:
    """`text` cut in the middle to at most `width` characters (both ends of a name say the most)."""
    return cut_middle(text, width)


def change_line(attrs: dict[str, Any]) -> str:
    """A diff node's "64.58 → 3.10 ms/step (-95%) · 78 → 78 calls/step", or "new: ..."/"vanished: ..."."""
    per_step = attrs.get("per") == "step"
    time_key, unit = ("ns_per_step", "/step") if per_step else ("time_ns", "")
    before, after = attrs.get("before_" + time_key) or 0.0, attrs.get(time_key) or 0.0
    calls_key = "calls_per_step" if per_step else "calls"
    before_calls, after_calls = attrs.get("before_" + calls_key) or 0, attrs.get(calls_key) or 0
    change = attrs.get("change")
    if change == "new":
        return f"new: {format_ns(after)}{unit} · {format_count(after_calls)} calls{unit}"
    if change == "vanished":
        return f"vanished: was {format_ns(before)}{unit} · {format_count(before_calls)} calls{unit}"
    percent = f" ({format_change(after / before)})" if before else ""
    calls = f"{format_count(before_calls)} → {format_count(after_calls)} calls{unit}"
    return f"{format_ns(before)} → {format_ns(after)}{unit}{percent} · {calls}"


def cost_line(attrs: dict[str, Any], *, per_step_calls: bool = True) -> str:
    """ "69% · 64.58 ms/step · 78 calls/step" from the node's own attributes (a diff: `change_line`)."""
    if "change" in attrs:
        return change_line(attrs)
    parts = [format_share(attrs.get("share"))]
    ns_per_step = attrs.get("ns_per_step")
    if ns_per_step is not None:
        parts.append(f"{format_ns(ns_per_step)}/step")
    else:
        parts.append(format_ns(attrs.get("time_ns")))
    calls_per_step = attrs.get("calls_per_step")
    if per_step_calls and calls_per_step:
        parts.append(f"{format_count(calls_per_step)} calls/step")
    elif attrs.get("calls"):
        parts.append(f"{attrs['calls']} calls")
    return " · ".join(parts)


def node_text(attrs: dict[str, Any], graph_attrs: dict[str, Any] | None = None) -> NodeText:
    """The lines a node shows and its tooltip (the full, uncut text)."""
    kind = attrs.get("kind")
    graph_attrs = graph_attrs or {}
    detail = str(attrs.get("detail") or attrs.get("label") or "")
    if kind == ROOT:
        return _root_text(attrs, graph_attrs)
    if kind == SCOPE:
        name = str(attrs["label"])
        if attrs.get("merged"):
            name += f"  \u00d7{attrs['merged']}"
        return NodeText((Line(name, "bold"), Line(cost_line(attrs), "small")), detail)
    if kind == FUNCTION:
        frames = attrs.get("frames") or []
        lines = []
        if len(frames) > 1:
            lines.append(Line(cut(str(frames[0]), FUNCTION_WIDTH), "muted"))
            if len(frames) > 2:
                lines.append(Line(f"⋮ {len(frames) - 2} more frame{'s' if len(frames) > 3 else ''}", "muted"))
        lines.append(Line(cut(str(attrs["label"]), FUNCTION_WIDTH), "bold"))
        if attrs.get("where"):
            lines.append(Line(str(attrs["where"]), "muted"))
        lines.append(Line(cost_line(attrs), "small"))
        return NodeText(tuple(lines), detail)
    if kind == SITE:
        lines = [Line(site_label(attrs), "bold")]
        if attrs.get("source"):
            lines.append(Line(cut(" ".join(str(attrs["source"]).split()), SOURCE_WIDTH), "code"))
        tags = [str(attrs["rule"])] if attrs.get("rule") else []
        tags.append(cost_line(attrs))
        lines.append(Line(" · ".join(tags), "small"))
        if attrs.get("waste") and "change" not in attrs:
            lines.extend(Line(part, "alert") for part in textwrap.wrap(str(attrs["waste"]), WASTE_WIDTH)[:3])
        tooltip = f"{attrs.get('location', detail)}\n{attrs.get('source') or ''}".strip()
        return NodeText(tuple(lines), tooltip)
    if kind == OPS:
        return NodeText((Line(cut(str(attrs["label"]), OPS_WIDTH), "code"),), detail)
    if kind == KERNEL:
        return _kernel_text(attrs)
    if kind == OTHER:
        kernels = attrs.get("kernels")
        what = f"+{kernels} more kernel{'s' if kernels != 1 else ''}" if kernels else "other"
        if "change" in attrs:
            return NodeText((Line(what, "muted"), Line(change_line(attrs), "small")), detail)
        return NodeText((Line(f"{what} · {format_share(attrs.get('share'))}", "muted"),), detail)
    return NodeText((Line(str(attrs.get("label", "")), ""),), detail)


def site_label(attrs: dict[str, Any]) -> str:
    """The site's ``dir/file.py:line``, marked by its kind of answer as every rendering marks it
    (``~model.py:209? (ranked 1 of 5)``, ``model.py:209 (0.8)``, ``model.py:209 | 214 ?``)."""
    label = str(attrs["label"])
    if "answer" not in attrs or attrs.get("location") is None:
        return label
    return format_origin(
        str(attrs["answer"]),
        str(attrs["location"]),
        file=attrs.get("file"),
        confidence=attrs.get("confidence"),
        candidates=tuple(attrs.get("candidates") or ()),
        shown=label,
    )


def _kernel_text(attrs: dict[str, Any]) -> NodeText:
    lines = [Line(cut(str(attrs["label"]), KERNEL_WIDTH), "bold"), Line(cost_line(attrs), "small")]
    per_call = []
    if attrs.get("per_call_ns") is not None:
        per_call.append(f"{format_ns(attrs['per_call_ns'])}/call")
    if attrs.get("bytes_per_call"):
        per_call.append(f"{format_bytes(attrs['bytes_per_call'])}/call")
    if attrs.get("gbps") is not None:
        per_call.append(format_bandwidth(attrs["gbps"], attrs.get("peak_fraction")))
    if per_call:
        lines.append(Line(" · ".join(per_call), "small"))
    if attrs.get("invariant") and "change" not in attrs:
        lines.append(Line(str(attrs["invariant"]), "small"))
    return NodeText(tuple(lines), str(attrs.get("kernel") or attrs["label"]))


def _root_text(attrs: dict[str, Any], graph_attrs: dict[str, Any]) -> NodeText:
    import posixpath

    trace = str(graph_attrs.get("trace") or attrs.get("label") or "trace")
    name = posixpath.basename(trace)
    if graph_attrs.get("diff"):
        name = f"{posixpath.basename(str(graph_attrs.get('before_trace')))} → {name}"
    lines = [Line(name, "bold")]
    facts = []
    if graph_attrs.get("device"):
        facts.append(str(graph_attrs["device"]))
    if graph_attrs.get("steps"):
        step = f"{graph_attrs['steps']} steps"
        if graph_attrs.get("step_ns"):
            step += f" of {format_ns(graph_attrs['step_ns'])}"
            if graph_attrs.get("before_step_ns"):
                step += f" (was {format_ns(graph_attrs['before_step_ns'])})"
        facts.append(step)
    if facts:
        lines.append(Line(" · ".join(facts), "small"))
    if "change" in attrs:
        lines.append(Line(change_line(attrs), "small"))
        return NodeText(tuple(lines), trace)
    basis = "GPU" if graph_attrs.get("time_basis", "gpu") == "gpu" else "CPU"
    total = f"{basis} time {format_ns(graph_attrs.get('total_ns') or attrs.get('time_ns'))}"
    if graph_attrs.get("attributed_fraction") is not None:
        total += f", {format_share(graph_attrs['attributed_fraction'])} attributed to a line"
    lines.append(Line(total, "small"))
    return NodeText(tuple(lines), trace)
