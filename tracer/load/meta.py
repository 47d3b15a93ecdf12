"""`TraceMeta` from a trace's top-level keys (device properties, distributed info, versions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracer.model.events import TraceMeta


def trace_meta(path: Path, top: dict[str, Any], *, has_python: bool, has_call_from: bool) -> TraceMeta:
    distributed = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else {}
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
        trace_name=str(top["traceName"]) if top.get("traceName") is not None else None,
    )


def _flag(value: Any) -> bool | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
