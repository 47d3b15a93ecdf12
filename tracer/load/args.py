"""Make the args the loader keeps safe to read: each key has the type later stages expect, or is gone.

Traces are user input (other exporters, hand edits, truncation repairs): a stage that reads
``args["Input Dims"]`` may assume a list of int lists, ``args["CallFrom"]`` a short string, ``args["bytes"]``
an int. `clean_args` runs once per distinct args dict (they are interned), so its cost does not grow
with the number of events.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
MAX_DIM = 1 << 40  # no tensor dimension (or element count) on any device is this large
MAX_RANK = 64  # torch's own limit on tensor dimensions
MAX_TEXT = 4096  # a CallFrom ("file.py:45") or a concrete input longer than this is not one


def clean_args(kept: dict[str, Any]) -> dict[str, Any]:
    """`kept` with every value checked: wrong types dropped (or, inside lists, blanked in place so that
    positions still line up with "Input type")."""
    out: dict[str, Any] = {}
    for key, value in kept.items():
        check = _CHECKS.get(key)
        cleaned = check(value) if check is not None else None
        if cleaned is not None:
            out[key] = cleaned
    return out


def _int(value: Any) -> int | None:
    if value.__class__ is int and INT64_MIN <= value <= INT64_MAX:
        return value
    if value.__class__ is float and math.isfinite(value) and value.is_integer() and abs(value) < 2**62:
        return int(value)
    return None


def _count(value: Any) -> int | None:
    number = _int(value)
    return number if number is not None and number >= 0 else None


def _text(value: Any) -> str | None:
    return value if value.__class__ is str and len(value) <= MAX_TEXT else None


def _shape(value: Any) -> list[int] | None:
    """One tensor's dims: non-negative ints, few enough, with an element count a device could hold."""
    if value.__class__ is not list or len(value) > MAX_RANK:
        return None
    elements = 1
    for dim in value:
        if dim.__class__ is not int or not 0 <= dim < MAX_DIM:
            return None
        elements *= dim
    return value if elements < MAX_DIM else None


def _dims(value: Any) -> list[Any] | None:
    """Per input: a tensor's dims, a TensorList's list of dims, or [] where the entry is unreadable."""
    if value.__class__ is not list:
        return None
    out: list[Any] = []
    for entry in value:
        shape: list[Any] | None = _shape(entry)
        if shape is None and entry.__class__ is list and entry and entry[0].__class__ is list:
            shapes = [_shape(item) for item in entry]
            shape = shapes if all(s is not None for s in shapes) else None
        out.append(shape if shape is not None else [])
    return out


def _strides(value: Any) -> list[Any] | None:
    """Per input: a list of non-negative ints (or a list of them), else []; strides have no size bound."""
    if value.__class__ is not list:
        return None

    def ints(item: Any) -> bool:
        return item.__class__ is list and all(v.__class__ is int and 0 <= v <= INT64_MAX for v in item)

    out: list[Any] = []
    for entry in value:
        if ints(entry) or (entry.__class__ is list and all(ints(item) for item in entry)):
            out.append(entry)
        else:
            out.append([])
    return out


def _types(value: Any) -> list[str] | None:
    if value.__class__ is not list:
        return None
    return [entry if entry.__class__ is str and len(entry) <= MAX_TEXT else "" for entry in value]


def _concrete(value: Any) -> list[Any] | None:
    """Concrete inputs are strings (dtype codes, scalars); numbers are kept, anything else blanked."""
    if value.__class__ is not list:
        return None
    return [
        entry
        if (entry.__class__ is str and len(entry) <= MAX_TEXT)
        or _int(entry) is not None
        or (entry.__class__ is float and math.isfinite(entry))
        else ""
        for entry in value
    ]


def _launch_dims(value: Any) -> list[int] | None:
    """A kernel's grid or block: up to three non-negative ints."""
    if value.__class__ is not list or len(value) > 3:
        return None
    return value if all(v.__class__ is int and 0 <= v < MAX_DIM for v in value) else None


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "Input Dims": _dims,
    "Input Strides": _strides,
    "Input type": _types,
    "Concrete Inputs": _concrete,
    "Sequence number": _int,
    "CallFrom": _text,
    "Python module id": _int,
    "grid": _launch_dims,
    "block": _launch_dims,
    "stream": _int,
    "device": _int,
    "bytes": _count,
    "cbid": _int,
    "graph id": _int,
    "graph node id": _int,
}
