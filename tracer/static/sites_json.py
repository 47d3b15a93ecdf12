"""Sites read back from JSON (a ``--sites`` file, ``KERNELTRACE_SITES``, the scan cache), every field
checked: a site from a file is input, and a ``"line": "209"`` must be one line of error, not a crash."""

from __future__ import annotations

import math
from typing import Any

from tracer.model.site import Site

MAX_TEXT = 1 << 16  # a site's source text (a call, a store) longer than this is not one
MAX_LINE = 1 << 31
_OPTIONAL = object()

# field -> (check, required)
_TEXT_FIELDS = ("path", "kind", "method", "function", "receiver", "text", "rule")
_OPTIONAL_TEXT = ("target_dtype", "target_device")
_TEXT_LISTS = ("args", "aten_ops", "kernel_families", "reasons")


class BadSite(ValueError):
    """What is wrong with one site, in words (the caller names the file)."""


def site_from_json(data: Any) -> Site:
    """A `Site` from one decoded JSON object; `BadSite` says which field is wrong and how."""
    if not isinstance(data, dict):
        raise BadSite(f"a site is a JSON object, not {_kind(data)}")
    fields: dict[str, Any] = {}
    for name in ("path", "line", "col", "kind", "method", "function", "def_line", "receiver"):
        if name not in data:
            raise BadSite(f'a site lacks "{name}"')
    for name in _TEXT_FIELDS:
        if name in data:
            fields[name] = _text(data[name], name)
    for name in _OPTIONAL_TEXT:
        if data.get(name) is not None:
            fields[name] = _text(data[name], name)
    for name in _TEXT_LISTS:
        if data.get(name) is not None:
            value = data[name]
            if not isinstance(value, list) or len(value) > 4096:
                raise BadSite(f'"{name}" of a site is {_kind(value)}, not a list of strings')
            fields[name] = tuple(_text(item, name) for item in value)
    fields["line"] = _int(data["line"], "line", 1)
    fields["col"] = _int(data["col"], "col", 0)
    fields["nth"] = _int(data.get("nth", 0), "nth", 0)
    for name in ("def_line", "end_line"):
        if data.get(name) is not None:
            fields[name] = _int(data[name], name, 1)
        else:
            fields[name] = None
    for name in ("in_loop", "launches_kernel"):
        if name in data:
            if not isinstance(data[name], bool):
                raise BadSite(f'"{name}" of a site is {_kind(data[name])}, not true or false')
            fields[name] = data[name]
    if "risk" in data:
        risk = data["risk"]
        if isinstance(risk, bool) or not isinstance(risk, (int, float)) or not math.isfinite(risk):
            raise BadSite(f'"risk" of a site is {_kind(risk)}, not a number')
        if not 0 <= risk <= 100:
            raise BadSite(f'"risk" of a site is {risk:g}, not within 0..100')
        fields["risk"] = float(risk)
    return Site(**fields)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise BadSite(f'"{name}" of a site is {_kind(value)}, not a string')
    if len(value) > MAX_TEXT:
        raise BadSite(f'"{name}" of a site is {len(value)} characters long')
    return value


def _int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadSite(f'"{name}" of a site is {_kind(value)}, not a whole number')
    if not minimum <= value < MAX_LINE:
        raise BadSite(f'"{name}" of a site is {value}, out of range')
    return value


def _kind(value: Any) -> str:
    if isinstance(value, str):
        shown = value if len(value) <= 20 else value[:20] + "…"
        return f"the string {shown!r}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}" if len(repr(value)) <= 24 else "a number"
    kinds: dict[type, str] = {list: "a list", dict: "an object"}
    return kinds.get(type(value), type(value).__name__)
