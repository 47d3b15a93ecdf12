"""Fill an `EventTable` from parsed trace events: one pass, trimmed args, interned names."""

from __future__ import annotations

import re
import sys
import zlib
from typing import Any

import orjson

from tracer.model.events import CATEGORY_NAMES, NONE, Cat, EventTable

# Categories by their spelling in any torch version (old traces capitalise, some say "Runtime").
CATEGORIES: dict[str, Cat] = {
    **CATEGORY_NAMES,
    "Operator": Cat.CPU_OP,
    "Kernel": Cat.KERNEL,
    "Memcpy": Cat.MEMCPY,
    "Memset": Cat.MEMSET,
    "Runtime": Cat.RUNTIME,
    "cuda_runtime": Cat.RUNTIME,
    "Driver": Cat.DRIVER,
    "gpu_user_annotation": Cat.GPU_ANNOTATION,
    "user_annotation": Cat.USER_ANNOTATION,
    "python_function": Cat.PYTHON_FUNCTION,
}

# The args each category keeps: what later stages read (shapes and dtypes, grid, bytes, CallFrom...).
KEPT_ARGS: dict[Cat, tuple[str, ...]] = {
    Cat.CPU_OP: ("Input Dims", "Input type", "Input Strides", "Concrete Inputs", "Sequence number"),
    Cat.PYTHON_FUNCTION: ("CallFrom", "Python module id"),
    Cat.KERNEL: ("grid", "block", "stream", "device", "graph id", "graph node id"),
    Cat.MEMCPY: ("bytes", "stream", "device"),
    Cat.MEMSET: ("bytes", "stream", "device"),
    Cat.RUNTIME: ("cbid",),
    Cat.DRIVER: ("cbid",),
}

_BUILTIN_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>$")


def frame_name(raw: str) -> str:
    """A python_function name without the object address: ``<built-in method to of Tensor object>``."""
    if raw.startswith("<built-in"):
        return _BUILTIN_ADDRESS.sub(">", raw)
    return raw


class EventTableBuilder:
    """Accumulates rows chunk by chunk; flows and odd ids are kept aside for `finish`."""

    def __init__(self) -> None:
        self.table = EventTable()
        self.fwdbwd_points: list[tuple[str, int, int, int, int]] = []  # (ph, id, pid, tid, ts_ns)
        self.string_ids: dict[str, int] = {}  # string pids/tids ("Spans") -> negative ints
        self.skipped_no_ts = 0
        self.call_from = False
        self._names: dict[str, str] = {}
        self._args: dict[bytes, dict[str, Any]] = {}

    def add_events(self, events: list[Any], first_index: int) -> None:
        """Append the duration events of `events` (whose first is event number `first_index`)."""
        # Rows are gathered as tuples, then each column is extended once per chunk: one C-level
        # extend per column instead of a Python-level append per cell.
        rows: list[tuple] = []
        add_row = rows.append
        categories, names, kept_args = CATEGORIES, self._names, KEPT_ARGS
        python = Cat.PYTHON_FUNCTION
        trimmed = self._trimmed
        for index, event in enumerate(events, first_index):
            try:
                phase = event["ph"]
            except (KeyError, TypeError, IndexError):
                continue
            if phase != "X":
                if (phase == "s" or phase == "f") and event.get("cat") == "fwdbwd":
                    self._add_flow_point(event)
                continue
            cat = categories.get(event.get("cat"))
            if cat is None:
                continue
            try:
                ts_ns = round(event["ts"] * 1000)
                dur = event.get("dur")
                dur_ns = round(dur * 1000) if dur else 0
            except (KeyError, TypeError):  # no ts, or not a number: nothing to place in time
                self.skipped_no_ts += 1
                continue
            pid = event.get("pid")
            tid = event.get("tid")
            if pid.__class__ is not int:
                pid = self._int_id(pid)
            if tid.__class__ is not int:
                tid = self._int_id(tid)
            raw_name = event.get("name", "")
            name = names.get(raw_name) if raw_name.__class__ is str else None
            if name is None:
                name = self.intern_name(raw_name)
            ext = corr = py_id = py_parent = NONE
            kept = None
            args = event.get("args")
            if args:
                if cat is python:
                    py_id = args.get("Python id", NONE)
                    py_parent = args.get("Python parent id", NONE)
                    if py_parent is None:
                        py_parent = NONE
                    if "CallFrom" in args or "Python module id" in args:
                        kept = trimmed(args, kept_args[cat])
                        if kept is not None and "CallFrom" in kept:
                            self.call_from = True
                else:
                    ext = args.get("External id", NONE)
                    corr = args.get("correlation", NONE)
                    keys = kept_args.get(cat)
                    if keys is not None:
                        kept = trimmed(args, keys)
                if ext.__class__ is not int:
                    ext = _as_int(ext)
                if corr.__class__ is not int:
                    corr = _as_int(corr)
                if py_id.__class__ is not int:
                    py_id = _as_int(py_id)
                if py_parent.__class__ is not int:
                    py_parent = _as_int(py_parent)
            add_row((cat, name, pid, tid, ts_ns, dur_ns, ext, corr, py_id, py_parent, index, kept))
        if not rows:
            return
        table = self.table
        columns = (
            table.cat, table.name, table.pid, table.tid, table.ts_ns, table.dur_ns,
            table.ext_id, table.correlation, table.py_id, table.py_parent, table.raw_index, table.args,
        )  # fmt: skip
        for column, values in zip(columns, zip(*rows)):
            column.extend(values)

    def _trimmed(self, args: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any] | None:
        kept = {key: args[key] for key in keys if key in args}
        if not kept:
            return None
        return self.intern_args(kept, orjson.dumps(kept))

    def intern_args(self, kept: dict[str, Any], key: bytes) -> dict[str, Any]:
        """Identical args (same shapes in every layer and step) share one dict: read-only."""
        shared = self._args.get(key)
        if shared is None:
            shared = self._args[key] = kept
        return shared

    def intern_name(self, raw_name: Any) -> str:
        text = raw_name if raw_name.__class__ is str else str(raw_name)
        name = self._names.get(text)
        if name is None:
            name = self._names[text] = sys.intern(frame_name(text))
        return name

    def _int_id(self, value: Any) -> int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        text = str(value)
        if text.lstrip("-").isdigit():
            return int(text)
        known = self.string_ids.get(text)
        if known is None:
            # Derived from the text alone, so that chunks loaded in separate processes agree.
            known = self.string_ids[text] = -1000 - zlib.crc32(text.encode())
        return known

    def _add_flow_point(self, event: dict[str, Any]) -> None:
        ts = event.get("ts")
        flow_id = _as_int(event.get("id"))
        if ts is None or flow_id == NONE:
            return
        pid, tid = event.get("pid"), event.get("tid")
        pid = pid if pid.__class__ is int else self._int_id(pid)
        tid = tid if tid.__class__ is int else self._int_id(tid)
        self.fwdbwd_points.append((event["ph"], flow_id, pid, tid, round(ts * 1000)))


def _as_int(value: Any) -> int:
    if value is None:
        return NONE
    try:
        return int(value)
    except (TypeError, ValueError):
        return NONE
