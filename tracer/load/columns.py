"""Fill an `EventTable` from parsed trace events: one pass, trimmed args, interned names."""

from __future__ import annotations

import re
import sys
import zlib
from array import array
from typing import Any

import orjson

from tracer.load.args import INT64_MAX, INT64_MIN, clean_args
from tracer.load.window import WindowBounds
from tracer.model.events import CATEGORY_NAMES, NONE, Cat, EventTable
from tracer.model.ranges import is_kerneltrace_range

# Real kernel names reach ~1,300 characters (CUTLASS templates a few thousand); longer is not a name.
MAX_NAME_CHARS = 16_384
# |ts| and dur beyond this (about 36 years in ns) are corrupt; the bound keeps ts + dur in int64.
TIME_LIMIT_NS = 1 << 60

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

# Args already cleaned, by their JSON (`EventTableBuilder.trimmed`'s key): a worker's builders, one per
# chunk, share one, so that each distinct args is checked once per worker rather than once per chunk.
CleanedArgs = dict[bytes, tuple[dict[str, Any], bool]]
MAX_CLEANED = 100_000  # entries, then it starts again: a bound for a hostile trace's millions of args

_BUILTIN_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>$")


def frame_name(raw: str) -> str:
    """A python_function name without the object address: ``<built-in method to of Tensor object>``."""
    if raw.startswith("<built-in"):
        return _BUILTIN_ADDRESS.sub(">", raw)
    return raw


class EventTableBuilder:
    """Accumulates rows chunk by chunk; flows and odd ids are kept aside for `finish`."""

    def __init__(self, bounds: WindowBounds | None = None, cleaned: CleanedArgs | None = None) -> None:
        self.table = EventTable()
        self.bounds = bounds  # load only this window (tracer.load.window); None: everything
        self.outside_window = 0
        self.fwdbwd_points: list[tuple[str, int, int, int, int]] = []  # (ph, id, pid, tid, ts_ns)
        self.string_ids: dict[str, int] = {}  # string pids/tids ("Spans") -> negative ints
        self.skipped_no_ts = 0  # duration events without a usable ts (missing, not a number, out of range)
        self.malformed = 0  # events with a field of the wrong type, read as absent
        self.missing_dur = 0  # duration events without a usable dur, read as instants
        self.call_from = False
        self.names: dict[str, str] = {}
        self.range_names: set[str] = set()  # our ranges, which cheap ones file as cpu_ops
        self._args: dict[bytes, dict[str, Any]] = {}
        self._cleaned = cleaned  # args cleaned by earlier builders of this process (a worker's chunks)

    def add_events(self, events: list[Any], first_index: int) -> None:
        """Append the duration events of `events` (whose first is event number `first_index`)."""
        # Rows are gathered as tuples, then each column is extended once per chunk: one C-level
        # extend per column instead of a Python-level append per cell.
        rows: list[tuple] = []
        add_row = rows.append
        categories, names, kept_args = CATEGORIES, self.names, KEPT_ARGS
        python, cpu_op, user_range = Cat.PYTHON_FUNCTION, Cat.CPU_OP, Cat.USER_ANNOTATION
        range_names = self.range_names
        trimmed = self.trimmed
        bounds = self.bounds
        for index, event in enumerate(events, first_index):
            if event.__class__ is not dict:
                continue
            phase = event.get("ph")
            if phase != "X":
                if (phase == "s" or phase == "f") and event.get("cat") == "fwdbwd":
                    self._add_flow_point(event)
                continue
            cat_name = event.get("cat")
            cat = categories.get(cat_name) if cat_name.__class__ is str else None
            if cat is None:
                continue
            ts = event.get("ts")
            dur = event.get("dur")
            if ts.__class__ is not float and ts.__class__ is not int:
                self.skipped_no_ts += 1  # no ts, or not a number: nothing to place in time
                continue
            try:
                ts_ns = round(ts * 1000)
                if dur.__class__ is float or dur.__class__ is int:
                    dur_ns = round(dur * 1000)
                else:
                    dur_ns = 0
                    self.missing_dur += 1
            except (OverflowError, ValueError):  # inf or NaN (orjson rejects both; other parsers may not)
                self.skipped_no_ts += 1
                continue
            if not (-TIME_LIMIT_NS < ts_ns < TIME_LIMIT_NS and 0 <= dur_ns < TIME_LIMIT_NS):
                if dur_ns < 0 and -TIME_LIMIT_NS < ts_ns < TIME_LIMIT_NS:
                    dur_ns = 0  # an end before the start: keep the event as an instant
                    self.malformed += 1
                else:
                    self.skipped_no_ts += 1
                    continue
            if bounds is not None and not _in_window(bounds, cat, ts_ns, dur_ns):
                self.outside_window += 1
                continue
            pid = event.get("pid")
            tid = event.get("tid")
            if pid.__class__ is not int:
                pid = self.int_id(pid)
            if tid.__class__ is not int:
                tid = self.int_id(tid)
            raw_name = event.get("name", "")
            name = names.get(raw_name) if raw_name.__class__ is str else None
            if name is None:
                name = self.intern_name(raw_name)
            if cat is cpu_op and name in range_names:
                cat = user_range  # a `_RecordFunctionFast` range of ours: a range, not an op
            ext = corr = py_id = py_parent = NONE
            kept = None
            args = event.get("args")
            if args.__class__ is not dict:
                if args is not None:
                    self.malformed += 1  # args as a list, string or number: read as no args
                args = None
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
        columns: tuple[array | list, ...] = (
            table.cat, table.name, table.pid, table.tid, table.ts_ns, table.dur_ns,
            table.ext_id, table.correlation, table.py_id, table.py_parent, table.raw_index, table.args,
        )  # fmt: skip
        try:
            # Built apart first so that an id beyond 64 bits fails before any column has grown.
            built = [
                array(column.typecode, values) if isinstance(column, array) else values
                for column, values in zip(columns, zip(*rows))
            ]
        except OverflowError:
            rows = [self._in_range(row) for row in rows]
            built = [
                array(column.typecode, values) if isinstance(column, array) else values
                for column, values in zip(columns, zip(*rows))
            ]
        for column, values in zip(columns, built):
            column.extend(values)

    def _in_range(self, row: tuple) -> tuple:
        """A row whose ids fit the int64 columns: pids/tids beyond 64 bits become string-like ids,
        other ids beyond 64 bits become unknown."""
        cat, name, pid, tid, ts_ns, dur_ns, ext, corr, py_id, py_parent, index, kept = row
        ids = [ext, corr, py_id, py_parent]
        if any(not INT64_MIN <= value <= INT64_MAX for value in ids):
            self.malformed += 1
            ext, corr, py_id, py_parent = (v if INT64_MIN <= v <= INT64_MAX else NONE for v in ids)
        pid, tid = (v if INT64_MIN <= v <= INT64_MAX else self.int_id(str(v)) for v in (pid, tid))
        return (cat, name, pid, tid, ts_ns, dur_ns, ext, corr, py_id, py_parent, index, kept)

    def trimmed(self, args: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any] | None:
        kept = {key: args[key] for key in keys if key in args}
        if not kept:
            return None
        try:
            key = orjson.dumps(kept)
        except orjson.JSONEncodeError:  # nested deeper than orjson writes, or an int beyond 64 bits
            self.malformed += 1
            kept = clean_args(kept)
            key = orjson.dumps(kept)
        shared = self._args.get(key)
        if shared is None:
            # Checked once per distinct args: later stages may rely on the types (see tracer.load.args).
            cleaned, changed = self._clean(key, kept)
            if changed:
                self.malformed += 1
            shared = self._args[key] = cleaned
        return shared or None

    def _clean(self, key: bytes, kept: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """`clean_args(kept)` and whether it changed anything; from the process's earlier builders
        when they cleaned the same args (the dicts are read-only: sharing them is safe)."""
        memo = self._cleaned
        found = memo.get(key) if memo is not None else None
        if found is None:
            cleaned = clean_args(kept)
            found = (cleaned, cleaned != kept)
            if memo is not None:
                if len(memo) >= MAX_CLEANED:
                    memo.clear()
                memo[key] = found
        return found

    def shared_args(self) -> list[dict[str, Any]]:
        """Every args dict the rows hold, each once (rows hold these or None): what a worker sends."""
        return [args for args in self._args.values() if args]

    def intern_args(self, kept: dict[str, Any], key: bytes) -> dict[str, Any]:
        """Identical args (same shapes in every layer and step) share one dict: read-only."""
        shared = self._args.get(key)
        if shared is None:
            shared = self._args[key] = kept
        return shared

    def intern_args_json(self, key: bytes) -> dict[str, Any]:
        """`intern_args` of args that arrive as their JSON `key` (from a worker): parsed only when new."""
        shared = self._args.get(key)
        if shared is None:
            shared = self._args[key] = orjson.loads(key)
        return shared

    def intern_name(self, raw_name: Any) -> str:
        # A name that is not a string (a number, or a nested list whose str() could recurse without
        # bound) is shown as text only when it is a plain scalar.
        if raw_name.__class__ is str:
            text = raw_name
        elif raw_name.__class__ in (int, float, bool):
            text = str(raw_name)
        else:
            text = ""
        name = self.names.get(text)
        if name is None:
            shown = text
            if len(shown) > MAX_NAME_CHARS:  # every later regex and label would pay for the rest
                keep = MAX_NAME_CHARS - 40  # room for the marker: a cut name is not cut again
                shown = f"{shown[:keep]}…[{len(text) - keep} more characters]"
                self.malformed += 1
            name = self.names[text] = sys.intern(frame_name(shown))
            if is_kerneltrace_range(name):
                self.range_names.add(name)
        return name

    def int_id(self, value: Any) -> int:
        if value.__class__ is float and value.is_integer() and abs(value) < 2**62:
            return int(value)
        if value.__class__ is str or value.__class__ is int:
            text = str(value)
        elif value is None or value.__class__ in (float, bool):
            text = repr(value)
        else:  # an object or list as a pid: one id per type (its text could be huge or recurse)
            text = f"<{type(value).__name__}>"
        digits = text.removeprefix("-")
        if digits.isascii() and digits.isdigit() and len(digits) < 19:
            return int(text)
        known = self.string_ids.get(text)
        if known is None:
            # Derived from the text alone, so that chunks loaded in separate processes agree.
            known = self.string_ids[text] = -1000 - zlib.crc32(text.encode("utf-8", "surrogatepass"))
        return known

    def _add_flow_point(self, event: dict[str, Any]) -> None:
        ts = event.get("ts")
        flow_id = _as_int(event.get("id"))
        if (ts.__class__ is not int and ts.__class__ is not float) or flow_id == NONE:
            return
        if not -TIME_LIMIT_NS < ts * 1000 < TIME_LIMIT_NS:  # also false for NaN
            return
        if self.bounds is not None and not self.bounds.keeps_cpu(round(ts * 1000), 0):
            return
        pid, tid = event.get("pid"), event.get("tid")
        pid = pid if pid.__class__ is int else self.int_id(pid)
        tid = tid if tid.__class__ is int else self.int_id(tid)
        self.fwdbwd_points.append((event["ph"], flow_id, pid, tid, round(ts * 1000)))


_GPU_WORK = (Cat.KERNEL, Cat.MEMCPY, Cat.MEMSET)


def _in_window(bounds: WindowBounds, cat: Cat, ts_ns: int, dur_ns: int) -> bool:
    """CPU events overlapping the window; GPU work starting in it or its tail (kept for now: the
    loader drops those whose launch fell outside); GPU annotations starting in the window."""
    if cat in _GPU_WORK:
        return bounds.keeps_gpu(ts_ns)
    if cat is Cat.GPU_ANNOTATION:
        return bounds.start_ns <= ts_ns < bounds.end_ns
    return bounds.keeps_cpu(ts_ns, dur_ns)


def _as_int(value: Any) -> int:
    """An id as an int: numbers and digit strings; anything else (or beyond 64 bits) is NONE."""
    if value is None or value.__class__ is bool:
        return NONE
    if value.__class__ is str and not (len(value) < 24 and value.strip().lstrip("-").isdigit()):
        return NONE
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return NONE
    return number if INT64_MIN <= number <= INT64_MAX else NONE
