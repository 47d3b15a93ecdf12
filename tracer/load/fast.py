"""The loader's fast path: one chunk of events decoded by msgspec into typed records, then columns.

orjson builds a dict for every event and every args object; most of that is thrown away. Here
msgspec decodes each event into a small struct of the fields we read, leaves ``args`` as raw JSON
bytes, then decodes the args of each kind of event in one batch into the few fields we keep (the
kept shape and dtype values stay raw bytes until a distinct one is seen). The columns are built
by C-level map/zip and numpy, not a Python loop per event.

It takes only *clean* chunks: every event an object, fields of the types torch writes, times in
range, no backward-pass flows, no load window. Anything else (`NotClean`) goes to the general path
(`EventTableBuilder.add_events`), which reads odd values as absent and counts them; the two paths
give identical tables on clean input (tests/load/test_load_fast.py checks it on real traces).
"""

from __future__ import annotations

import itertools
import operator
from array import array
from collections.abc import Callable
from types import GenericAlias
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import orjson

from tracer.load.chunks import parse_array
from tracer.load.columns import CATEGORIES, KEPT_ARGS, TIME_LIMIT_NS
from tracer.model.events import NONE, Cat

if TYPE_CHECKING:
    from tracer.load.columns import EventTableBuilder


class NotClean(Exception):
    """This chunk needs the general path."""


_ID = int  # an id as torch writes it (anything else: the general path)
_NO_RAW = msgspec.Raw()


class _Event(msgspec.Struct):
    ph: Any = None
    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | None = None
    dur: int | float | None = None
    args: msgspec.Raw = _NO_RAW


_PYTHON_RENAME = {
    "py_id": "Python id",
    "py_parent": "Python parent id",
    "call_from": "CallFrom",
    "module_id": "Python module id",
}


class _PythonArgs(msgspec.Struct, rename=_PYTHON_RENAME):
    py_id: _ID = NONE
    py_parent: _ID | None = NONE  # null at a thread's root frame
    call_from: msgspec.Raw = _NO_RAW
    module_id: msgspec.Raw = _NO_RAW


# Every key a non-Python category keeps, in one struct. Scalars and flat lists arrive typed (hashable);
# nested lists (shapes, strides) and torch's per-input strings stay raw JSON until a new one is seen.
_RAW_KEYS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")
_PYTHON_KEYS = ("CallFrom", "Python module id")  # also kept raw
_TUPLE_KEYS = ("grid", "block")
_KEPT_KEYS = tuple(
    dict.fromkeys(key for cat, keys in KEPT_ARGS.items() if cat != Cat.PYTHON_FUNCTION for key in keys)
)
_FIELD = {key: f"k{i}" for i, key in enumerate(_KEPT_KEYS)}
_Absent = msgspec.UnsetType
_ABSENT = msgspec.UNSET


def _field_type(key: str) -> tuple[Any, Any]:
    if key in _RAW_KEYS:
        return msgspec.Raw, _NO_RAW
    if key in _TUPLE_KEYS:
        return tuple[int, ...] | None | _Absent, _ABSENT
    return int | None | _Absent, _ABSENT


_OpArgs = msgspec.defstruct(
    "_OpArgs",
    [("ext", _ID, NONE), ("corr", _ID, NONE)] + [(_FIELD[key], *_field_type(key)) for key in _KEPT_KEYS],
    rename={"ext": "External id", "corr": "correlation", **{field: key for key, field in _FIELD.items()}},
)


class _KeptArgs:
    """How one category's kept args are read off its decoded struct: a hashable key, then the dict."""

    def __init__(self, fields: tuple[tuple[str, str], ...]) -> None:
        self.keys = tuple(key for _, key in fields)
        self.get: Callable[[Any], tuple[Any, ...]] = operator.attrgetter(*(field for field, _ in fields))
        self.is_raw = tuple(key in _RAW_KEYS or key in _PYTHON_KEYS for key in self.keys)
        self.raw = any(self.is_raw)
        if len(fields) == 1:  # attrgetter of one name returns the value, not a 1-tuple
            one = self.get
            self.get = lambda args: (one(args),)

    def keys_of(self, structs: list) -> list[tuple]:
        """Each struct's kept values as a hashable tuple (raw JSON as bytes), in C."""
        keys = list(map(self.get, structs))
        if not self.raw:
            return keys
        columns = [map(bytes, column) if raw else column for column, raw in zip(zip(*keys), self.is_raw)]
        return list(zip(*columns))

    def value(self, key: tuple) -> dict[str, Any]:
        kept = {}
        for name, value, raw in zip(self.keys, key, self.is_raw, strict=True):
            if raw:
                if value:  # empty: absent
                    kept[name] = orjson.loads(value)  # as the general path reads it
            elif value is not _ABSENT:
                kept[name] = list(value) if value.__class__ is tuple else value
        return kept


_KEPT_OF: dict[int, _KeptArgs] = {
    int(cat): _KeptArgs(tuple((_FIELD[key], key) for key in keys))
    for cat, keys in KEPT_ARGS.items()
    if cat != Cat.PYTHON_FUNCTION
}
_PYTHON_KEPT = _KeptArgs((("call_from", "CallFrom"), ("module_id", "Python module id")))

_events = msgspec.json.Decoder(list[_Event])
_python_args = msgspec.json.Decoder(list[_PythonArgs])
# list[_OpArgs], spelled so: _OpArgs is made by defstruct, a value rather than a type to mypy
_op_args = msgspec.json.Decoder(GenericAlias(list, (_OpArgs,)))

_PYTHON, _CPU_OP, _RANGE = int(Cat.PYTHON_FUNCTION), int(Cat.CPU_OP), int(Cat.USER_ANNOTATION)
_CODES = {name: int(cat) for name, cat in CATEGORIES.items()}


def add_chunk(builder: EventTableBuilder, raw: bytes, first_index: int) -> int:
    """Append the duration events of the JSON array `raw` (its first event is number `first_index`):
    by the fast path when the chunk is clean, else by the general one. Returns the number of events.
    Raises `Unchunkable` when `raw` is not valid JSON."""
    try:
        return add_clean_chunk(builder, raw, first_index)
    except NotClean:
        pass
    events = parse_array(raw)
    builder.add_events(events, first_index)
    return len(events)


def add_clean_chunk(builder: EventTableBuilder, raw: bytes, first_index: int) -> int:
    """Append the duration events of the JSON array `raw` to `builder`; returns the number of events.

    Raises `NotClean` (having appended nothing) when the chunk needs the general path.
    """
    if builder.bounds is not None:
        raise NotClean("a load window")
    try:
        if not raw.isascii():  # msgspec skips unread strings unchecked; orjson refuses bad UTF-8 anywhere
            raw.decode()
        events = _events.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError) as err:
        raise NotClean(str(err)) from None  # deeper than it reads, or bytes that are not UTF-8
    if not events:
        return 0
    # One column per field, each read by attrgetter in C: the category and phase of every event, the
    # rest of the rows kept only (a transpose of all fields of all events cost twice as much).
    n = len(events)
    cat = list(map(_CAT, events))
    code = np.fromiter(map(_CODES.get, cat, itertools.repeat(-1)), dtype=np.int8, count=n)
    # `ph` may be any JSON value: compare each to "X" (an object array of lists would broadcast).
    duration = np.fromiter(map(operator.eq, map(_PH, events), itertools.repeat("X")), dtype=bool, count=n)
    if "fwdbwd" in cat:
        flows = np.fromiter(map(operator.eq, cat, itertools.repeat("fwdbwd")), dtype=bool, count=n)
        if np.any(flows & ~duration):
            raise NotClean("backward-pass flows")
    keep = np.flatnonzero(duration & (code >= 0))
    if not len(keep):
        return n
    rows = events if len(keep) == n else _take(events, keep)
    del cat, events
    cats = code[keep]
    names = _names(builder, list(map(_NAME, rows)))
    if builder.range_names:  # our cheap ranges are cpu_ops by category: make them ranges
        ours = np.fromiter(map(builder.range_names.__contains__, names), dtype=bool, count=len(names))
        cats[ours & (cats == _CPU_OP)] = _RANGE
    durations = list(map(_DUR, rows))
    if None in durations:
        raise NotClean("a duration event without dur")  # the general path counts them for a note
    ts_ns, dur_ns = _times(list(map(_TS, rows)), durations)
    pids = _ids(builder, list(map(_PID, rows)))
    tids = _ids(builder, list(map(_TID, rows)))
    ext, corr, py_id, py_parent, kept = _args(builder, cats, list(map(_ARGS, rows)))
    table = builder.table
    table.cat.frombytes(cats.tobytes())
    table.name.extend(names)
    for column, values in (
        (table.pid, pids), (table.tid, tids), (table.ts_ns, ts_ns), (table.dur_ns, dur_ns),
        (table.ext_id, ext), (table.correlation, corr), (table.py_id, py_id), (table.py_parent, py_parent),
        (table.raw_index, keep.astype(np.int64) + first_index),
    ):  # fmt: skip
        column.frombytes(values.astype(np.int64, copy=False).tobytes())
    table.args.extend(kept)
    return n


_PH, _CAT, _NAME = operator.attrgetter("ph"), operator.attrgetter("cat"), operator.attrgetter("name")
_PID, _TID = operator.attrgetter("pid"), operator.attrgetter("tid")
_TS, _DUR, _ARGS = operator.attrgetter("ts"), operator.attrgetter("dur"), operator.attrgetter("args")


def _take(values: tuple | list, rows: np.ndarray) -> list:
    """`values[i] for i in rows`, in C."""
    return list(map(values.__getitem__, rows.tolist()))


def _names(builder: EventTableBuilder, raw_names: list[str]) -> list[str]:
    known = builder.names
    for name in set(raw_names).difference(known):
        builder.intern_name(name)
    return list(map(known.__getitem__, raw_names))


# Below this, a float holds ts * 1000 exactly for integer ts, so numpy's float rounding gives what the
# general path's `round(ts * 1000)` gives (round half to even of the same double for float ts).
_EXACT_LIMIT = 2**53 / 1000


def _times(ts: list, dur: list) -> tuple[np.ndarray, np.ndarray]:
    """ns columns exactly as the general path rounds them (`round(x * 1000)`), or `NotClean`."""
    try:
        ts_us = np.array(ts, dtype=np.float64)  # a missing ts becomes NaN
        dur_us = np.array(dur, dtype=np.float64)
    except OverflowError:  # an integer beyond a double
        raise NotClean("a time out of range") from None
    dur_us[np.isnan(dur_us)] = 0.0  # no dur: an instant, as in the general path
    if np.isnan(ts_us).any():
        raise NotClean("an event without a timestamp")
    if max(np.abs(ts_us).max(), np.abs(dur_us).max()) < _EXACT_LIMIT:
        ts_ns = np.rint(ts_us * 1000).astype(np.int64)
        dur_ns = np.rint(dur_us * 1000).astype(np.int64)
    else:  # far from the trace's origin: exact integer arithmetic, row by row
        try:
            ts_ns = np.array([round(t * 1000) for t in ts], dtype=np.int64)
            dur_ns = np.array([0 if d is None else round(d * 1000) for d in dur], dtype=np.int64)
        except OverflowError:
            raise NotClean("a time out of range") from None
    limit = TIME_LIMIT_NS
    if ts_ns.max() >= limit or ts_ns.min() <= -limit or dur_ns.max() >= limit or dur_ns.min() < 0:
        raise NotClean("a time out of range")
    return ts_ns, dur_ns


def _ids(builder: EventTableBuilder, values: list) -> np.ndarray:
    try:
        return np.frombuffer(array("q", values), dtype=np.int64)
    except TypeError:  # string ("Spans") or missing pids/tids: the general path's ids for them
        pass
    except OverflowError:
        raise NotClean("an id beyond 64 bits") from None
    mapped = {v: builder.int_id(v) for v in set(values) if v.__class__ is not int}
    try:
        return np.frombuffer(
            array("q", [mapped.get(v, v) if v.__class__ is not int else v for v in values]), np.int64
        )
    except OverflowError:
        raise NotClean("an id beyond 64 bits") from None


def _args(builder: EventTableBuilder, cats: np.ndarray, raws: list[msgspec.Raw]):
    """Id columns and kept args per row, from each kind's args decoded in one batch."""
    n = len(cats)
    python_rows = np.flatnonzero(cats == _PYTHON)
    op_rows = np.flatnonzero(cats != _PYTHON)
    try:
        python = _python_args.decode(_array_of(raws, python_rows)) if len(python_rows) else []
        ops = _op_args.decode(_array_of(raws, op_rows)) if len(op_rows) else []
        ext, corr, py_id, py_parent = (np.full(n, NONE, dtype=np.int64) for _ in range(4))
        if ops:
            ext[op_rows], corr[op_rows] = zip(*map(_OP_IDS, ops), strict=True)
        if python:
            ids, parents = zip(*map(_PYTHON_IDS, python), strict=True)
            py_id[python_rows] = ids
            py_parent[python_rows] = [NONE if parent is None else parent for parent in parents]
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as err:  # args not an object...
        raise NotClean(str(err)) from None
    except OverflowError:
        raise NotClean("an id beyond 64 bits") from None
    try:
        kept = _kept_args(builder, cats, python_rows, python, op_rows, ops)
    except orjson.JSONDecodeError as err:  # a value nested deeper than orjson reads
        raise NotClean(str(err)) from None
    return ext, corr, py_id, py_parent, kept


def _kept_args(builder: EventTableBuilder, cats, python_rows, python, op_rows, ops) -> list:
    kept = np.full(len(cats), None, dtype=object)
    if python:
        # Which frames carry CallFrom or a module id (torch >= 2.14 only): `any` of the two raw values.
        has_kept = np.fromiter(map(any, map(_PYTHON_KEPT.get, python)), dtype=bool, count=len(python))
        with_kept = np.flatnonzero(has_kept)
        if len(with_kept):
            values = _kept(builder, _PYTHON_KEPT, _take(python, with_kept))
            kept[python_rows[with_kept]] = values
            builder.call_from = builder.call_from or any(v is not None and "CallFrom" in v for v in values)
    if ops:
        op_cats = cats[op_rows]
        for code, reader in _KEPT_OF.items():
            positions = np.flatnonzero(op_cats == code)
            if len(positions):
                kept[op_rows[positions]] = _kept(builder, reader, _take(ops, positions))
    return kept.tolist()


_OP_IDS = operator.attrgetter("ext", "corr")
_PYTHON_IDS = operator.attrgetter("py_id", "py_parent")


def _kept(builder: EventTableBuilder, reader: _KeptArgs, structs: list) -> list[dict[str, Any] | None]:
    """The shared dicts of the kept args (the general path's `trimmed`), found by their values."""
    keys = reader.keys_of(structs)
    cache: dict[tuple, dict[str, Any] | None] = {}
    for key in set(keys):
        kept = reader.value(key)
        cache[key] = builder.trimmed(kept, tuple(kept)) if kept else None
    return list(map(cache.__getitem__, keys))


def _array_of(raws: list[msgspec.Raw], rows: np.ndarray) -> bytes:
    """The args of `rows` as one JSON array (no args: read as {})."""
    picked = _take(raws, rows)
    if not all(picked):
        picked = [raw or b"{}" for raw in picked]
    return b"[" + b",".join(picked) + b"]"
