"""Write the input trace back with each attributed GPU event's ``args`` naming its origin.

Perfetto and chrome://tracing show ``args`` on click, so a user sees ``origin: file.py:512`` on the
kernel itself. Only ``args`` of attributed GPU events gain keys; every other byte of meaning (events,
order, top-level keys, values) stays as it was, so the file loads wherever the original did.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tracer.errors import InputError
from tracer.explain.diff import origin_where
from tracer.model import Attributions, Origin

GZIP_MAGIC = b"\x1f\x8b"
ADDED_KEYS = ("origin", "site", "source", "rule", "confidence")


@dataclass(frozen=True)
class AnnotateSummary:
    path: str
    gpu_events: int  # GPU events the join saw
    annotated: int  # of those, events given an origin (a file at least)
    with_line: int  # of those, events whose origin names the exact line
    origins: int  # distinct origins written


def origin_args(origin: Origin) -> dict[str, Any] | None:
    """The keys added to an event's args, or None where the origin names no source file."""
    if origin.file is None:
        return None
    args: dict[str, Any] = {"origin": origin_where(origin)}
    if origin.site_id:
        args["site"] = origin.site_id
    if origin.source:
        args["source"] = origin.source
    if origin.rule:
        args["rule"] = origin.rule
    args["confidence"] = round(float(origin.confidence), 3)
    return args


def read_raw_trace(path: str | Path) -> dict[str, Any]:
    """The trace file as parsed JSON (gzip or plain, by content), for rewriting."""
    path = Path(path)
    try:
        data = path.read_bytes()
        if data[:2] == GZIP_MAGIC:
            data = gzip.decompress(data)
        document = orjson.loads(data)
    except OSError as err:
        raise InputError(path, f"cannot read: {err.strerror or err}") from err
    except (orjson.JSONDecodeError, EOFError, gzip.BadGzipFile) as err:
        raise InputError(path, f"not a readable JSON trace: {err}") from err
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise InputError(path, 'not a torch.profiler trace (no "traceEvents" list)')
    return document


def annotate_document(document: dict[str, Any], attributions: Attributions) -> tuple[int, int, int]:
    """Add origin keys to the args of attributed GPU events in `document` (in place).

    Returns (events annotated, of them with an exact line, distinct origins written).
    """
    events = document["traceEvents"]
    raw_index = attributions.trace.events.raw_index
    per_origin = [origin_args(origin) for origin in attributions.origins]
    annotated = with_line = 0
    used: set[int] = set()
    for gpu_row, origin_id in zip(attributions.gpu_rows, attributions.origin_ids, strict=True):
        if origin_id < 0:
            continue
        added = per_origin[origin_id]
        position = raw_index[gpu_row]
        if added is None or not 0 <= position < len(events):
            continue
        event = events[position]
        args = event.get("args")
        if not isinstance(args, dict):
            args = event["args"] = {}
        args.update(added)
        annotated += 1
        with_line += attributions.origins[origin_id].line is not None
        used.add(origin_id)
    return annotated, with_line, len(used)


def write_annotated_trace(attributions: Attributions, out_path: str | Path) -> AnnotateSummary:
    """Write ``attributions.trace`` with origins in its GPU events' args to `out_path`
    (gzip when the name ends in ``.gz``). Refuses to overwrite the input trace."""
    source = Path(attributions.trace.meta.path)
    out_path = Path(out_path)
    if out_path.exists() and source.exists() and out_path.resolve() == source.resolve():
        raise InputError(out_path, "is the input trace; write the annotated trace to another file")
    document = read_raw_trace(source)
    annotated, with_line, origins = annotate_document(document, attributions)
    data = orjson.dumps(document)
    if out_path.name.lower().endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    try:
        out_path.write_bytes(data)
    except OSError as err:
        raise InputError(out_path, f"cannot write: {err.strerror or err}") from err
    return AnnotateSummary(str(out_path), len(attributions), annotated, with_line, origins)
