"""`TraceMeta` from a trace's top-level keys (device properties, distributed info, versions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracer.model.events import TraceMeta


def trace_meta(path: Path, top: dict[str, Any], *, has_python: bool, has_call_from: bool) -> TraceMeta:
    distributed = top.get("distributedInfo")
    if not isinstance(distributed, dict):
        distributed = {}
    devices = top.get("deviceProperties")
    with_stack = _flag(top.get("with_stack"))
    if with_stack is None:
        # Kineto writes the key only when stacks were on; python_function events only come with them.
        with_stack = has_python
    return TraceMeta(
        path=str(path),
        base_time_ns=_int_or_none(top.get("baseTimeNanoseconds")),
        ts_origin_ns=0,
        with_stack=with_stack,
        record_shapes=_flag(top.get("record_shapes")),
        devices=tuple(d for d in devices if isinstance(d, dict)) if isinstance(devices, list) else (),
        cuda_runtime_version=_int_or_none(top.get("cuda_runtime_version")),
        rank=_int_or_none(distributed.get("rank")),
        world_size=_int_or_none(distributed.get("world_size")),
        has_call_from=has_call_from,
        schema_version=_int_or_none(top.get("schemaVersion")),
        trace_name=_text_or_none(top.get("traceName")),
    )


def _text_or_none(value: Any) -> str | None:
    # str() of a deeply nested list or dict could recurse past Python's limit: only scalars are names.
    return str(value) if isinstance(value, (str, int, float)) else None


def _flag(value: Any) -> bool | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


def _int_or_none(value: Any) -> int | None:
    """An int within 64 bits from a number or digit string; None for anything else (inf, lists, ...)."""
    if value is None or isinstance(value, bool) or (isinstance(value, str) and len(value) > 24):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if -(1 << 63) <= number < (1 << 63) else None
