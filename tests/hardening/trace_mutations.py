"""Ways to damage a real profiler trace: document mutations (wrong types in every field, missing args,
colliding ids, events out of order, kernels without launches, hostile and huge names, deep nesting)
and writers (plain, gzip, truncated, corrupt gzip, flipped bytes, one-line JSON, odd layouts).

Each mutation takes the parsed document and a `random.Random` and changes the document in place;
each writer takes the JSON bytes and returns the bytes to put in the file. `trace_fuzz` combines them.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import random
import re
import zlib
from collections.abc import Callable
from typing import Any

# Text a hostile trace may put in a name: terminal escapes, markup of every renderer, bidi overrides.
HOSTILE_TEXT = (
    "\x1b[31mred\x1b[0m",
    "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07",
    "\x1b]0;title\x1b\\",
    "\x07bell\x08\x08back",
    "\u202eevil\u202c",
    "\u2066isolate\u2069",
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "[bold red]markup[/]",
    "| md | `tick` ``` *em* [link](javascript:alert(1))",
    '\\N \\G \\L " dot escapes',
    "line1\nline2\r\nline3\ttab",
    "\x00nul\x7fdel\x85nel\x9bcsi",
    "日本語 😀 \u0301combining \ufeffbom",
    "&amp; &lt; &#x27; <!-- comment -->",
    "{brace} <angle> 'quote'",
    "\uffff\ufffe noncharacters \U0010ffff \U0001fffe",
)

# Values of the wrong type (or out of range) for any field.
WRONG_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    -(10**12),
    10**30,
    -(10**30),
    2**63,
    2**64 - 1,
    1e30,
    1.5,
    -0.0,
    1e308,
    -1e308,
    math.nan,
    math.inf,
    -math.inf,
    "",
    "12.5",
    "abc",
    "1e400",
    "-5",
    "0x10",
    [],
    [1, 2],
    ["a"],
    {},
    {"a": 1},
    {"ts": 1},
)

EVENT_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "s", "bp")
ARG_FIELDS = (
    "External id",
    "correlation",
    "Python id",
    "Python parent id",
    "Python module id",
    "Record function id",
    "Input Dims",
    "Input type",
    "Input Strides",
    "Concrete Inputs",
    "Sequence number",
    "CallFrom",
    "grid",
    "block",
    "stream",
    "device",
    "bytes",
    "cbid",
    "graph id",
    "graph node id",
)
TOP_FIELDS = (
    "schemaVersion",
    "deviceProperties",
    "distributedInfo",
    "baseTimeNanoseconds",
    "with_stack",
    "record_shapes",
    "traceName",
    "cuda_runtime_version",
)


# ---------------------------------------------------------------------------------------------------
# Mutations of the document
# ---------------------------------------------------------------------------------------------------

Mutation = Callable[[dict[str, Any], random.Random], None]


def _events(doc: dict[str, Any]) -> list[Any]:
    events = doc.get("traceEvents")
    return events if isinstance(events, list) else []


def _some_events(doc: dict[str, Any], rng: random.Random, most: int = 8) -> list[dict[str, Any]]:
    events = [e for e in _events(doc) if isinstance(e, dict)]
    if not events:
        return []
    return rng.sample(events, min(len(events), rng.randint(1, most)))


def _hostile_value(rng: random.Random) -> Any:
    choice = rng.random()
    if choice < 0.7:
        return copy.deepcopy(rng.choice(WRONG_VALUES))
    if choice < 0.8:
        return rng.choice(HOSTILE_TEXT)
    if choice < 0.9:
        return nested_value(rng.choice((10, 100, 254, 300, 1000)), rng)
    return "x" * rng.choice((1000, 100_000))


def nested_value(depth: int, rng: random.Random) -> Any:
    """A value nested `depth` deep, as a marker string that `kineto_json` writes out as the nested JSON
    (Python's own json and deepcopy would recurse past the interpreter's limit on the real thing)."""
    return f"{DEEP_MARKER}{depth}:{rng.choice(('list', 'dict'))}@@"


DEEP_MARKER = "@@deep:"


def deep_json(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "1" + "]" * depth
    return '{"k":' * depth + "1" + "}" * depth


def wrong_event_field(doc: dict[str, Any], rng: random.Random) -> None:
    """An event field of the wrong type: `ts` as a string, `dur` NaN, pid an object, ..."""
    for event in _some_events(doc, rng):
        event[rng.choice(EVENT_FIELDS)] = _hostile_value(rng)


def wrong_arg_field(doc: dict[str, Any], rng: random.Random) -> None:
    """An args field of the wrong type: External id a list, Input Dims a string, ..."""
    for event in _some_events(doc, rng):
        args = event.get("args")
        if not isinstance(args, dict):
            args = event["args"] = {}
        args[rng.choice(ARG_FIELDS)] = _hostile_value(rng)


def bad_durations(doc: dict[str, Any], rng: random.Random) -> None:
    """Durations negative, NaN, infinite, huge, or times far in the past/future."""
    # NaN/inf are not JSON: the whole file is refused, so only one call in ten writes them.
    values: tuple[Any, ...] = (-1, -1000.5, 1e18, -1e18, 1e300, 0, 2**62, 2**64 - 1, -(2**63), 1e-9)
    if rng.random() < 0.1:
        values = (math.nan, math.inf, -math.inf)
    for event in _some_events(doc, rng, most=30):
        event[rng.choice(("dur", "dur", "ts"))] = rng.choice(values)


def wrong_container(doc: dict[str, Any], rng: random.Random) -> None:
    """`args` as a list, string or number; an event that is not an object."""
    events = _events(doc)
    for event in _some_events(doc, rng):
        choice = rng.random()
        if choice < 0.6:
            event["args"] = rng.choice(([], [1, 2], "args", 7, None, True))
        elif events:
            events[rng.randrange(len(events))] = rng.choice((None, 1, "event", [], [event]))


def missing_args(doc: dict[str, Any], rng: random.Random) -> None:
    """Events without `args`, or without one key the join needs."""
    for event in _some_events(doc, rng, most=50):
        if rng.random() < 0.5:
            event.pop("args", None)
        elif isinstance(event.get("args"), dict) and event["args"]:
            event["args"].pop(rng.choice(list(event["args"])), None)


def missing_field(doc: dict[str, Any], rng: random.Random) -> None:
    for event in _some_events(doc, rng, most=20):
        event.pop(rng.choice(EVENT_FIELDS), None)


def colliding_ids(doc: dict[str, Any], rng: random.Random) -> None:
    """Duplicate External ids, correlations and Python ids; a Python frame its own parent; cycles."""
    events = [e for e in _events(doc) if isinstance(e, dict) and isinstance(e.get("args"), dict)]
    if not events:
        return
    key = rng.choice(("External id", "correlation", "Python id", "Python parent id"))
    chosen = rng.sample(events, min(len(events), rng.randint(2, 40)))
    values = [e["args"].get(key) for e in chosen if e["args"].get(key) is not None] or [1]
    shared = rng.choice(values)
    for event in chosen:
        event["args"][key] = shared
    frames = [e for e in events if "Python id" in e["args"]]
    if frames and rng.random() < 0.5:
        a, b = rng.choice(frames), rng.choice(frames)
        a["args"]["Python parent id"] = b["args"]["Python id"]
        b["args"]["Python parent id"] = a["args"]["Python id"]  # a cycle (or a self-loop when a is b)


def shuffle_events(doc: dict[str, Any], rng: random.Random) -> None:
    """Events out of order: shuffled, reversed, or children before parents."""
    events = _events(doc)
    choice = rng.random()
    if choice < 0.4:
        rng.shuffle(events)
    elif choice < 0.7:
        events.reverse()
    else:
        events.sort(
            key=lambda e: -(e.get("dur") or 0) if isinstance(e, dict) and _number(e.get("dur")) else 0
        )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def drop_launches(doc: dict[str, Any], rng: random.Random) -> None:
    """Kernels whose launch is missing: drop some or all runtime/driver events (or all CPU ops)."""
    events = _events(doc)
    cats = rng.choice(
        (("cuda_runtime", "cuda_driver"), ("cpu_op",), ("python_function",), ("user_annotation",))
    )
    keep_fraction = rng.choice((0.0, 0.5))
    doc["traceEvents"] = [
        e
        for e in events
        if not (isinstance(e, dict) and e.get("cat") in cats) or rng.random() < keep_fraction
    ]


def duplicate_events(doc: dict[str, Any], rng: random.Random) -> None:
    """The same events twice (a trace concatenated with itself), or a metadata event repeated."""
    events = _events(doc)
    if events:
        extra = copy.deepcopy(rng.sample(events, min(len(events), rng.randint(1, 100))))
        events.extend(extra)


def hostile_names(doc: dict[str, Any], rng: random.Random) -> None:
    """Names with escapes, markup, control characters, unicode; huge names."""
    for event in _some_events(doc, rng, most=20):
        name = event.get("name")
        base = name if isinstance(name, str) else ""
        text = rng.choice(HOSTILE_TEXT)
        if rng.random() < 0.1:
            text = text * rng.choice((100, 10_000))
        elif rng.random() < 0.02:
            text = "K" * 5_000_000  # regexes over every name must not make this a hang
        event["name"] = rng.choice((text + base, base + text, text))


def hostile_call_from(doc: dict[str, Any], rng: random.Random) -> None:
    """CallFrom / file names that are paths out of the tree, hostile text, or not file:line."""
    frames = [e for e in _events(doc) if isinstance(e, dict) and e.get("cat") == "python_function"]
    for event in rng.sample(frames, min(len(frames), 10)):
        args = event.setdefault("args", {}) if isinstance(event.get("args", {}), dict) else {}
        args["CallFrom"] = rng.choice(
            (
                "../../../../etc/passwd:1",
                "/etc/shadow:99999999",
                "x.py:-5",
                "x.py:abc",
                ":",
                "",
                "a.py:1:2",
                rng.choice(HOSTILE_TEXT) + ".py:3",
                "x.py:" + "9" * 400,
            )
        )
        if rng.random() < 0.5:
            event["name"] = rng.choice(
                (
                    "../../../etc/passwd(1): f",
                    "/dev/zero(1): read",
                    "x.py(-3): f",
                    "x.py(99999999999999999999): f",
                    "(1): ",
                    "no_paren",
                    "a.py(1): " + rng.choice(HOSTILE_TEXT),
                )
            )


def wrong_top_level(doc: dict[str, Any], rng: random.Random) -> None:
    """Top-level keys of the wrong type (deviceProperties a string, distributedInfo a list, ...)."""
    for _ in range(rng.randint(1, 3)):
        doc[rng.choice(TOP_FIELDS)] = _hostile_value(rng)
    if rng.random() < 0.3:
        doc["deviceProperties"] = [{"name": rng.choice(HOSTILE_TEXT), "totalGlobalMem": _hostile_value(rng)}]


def odd_phases(doc: dict[str, Any], rng: random.Random) -> None:
    """Begin/end pairs, instants, counters, flows with odd ids, string pids."""
    events = _events(doc)
    for event in _some_events(doc, rng):
        event["ph"] = rng.choice(("B", "E", "i", "C", "s", "f", "M", "b", "e", "x", "", "XX"))
        if rng.random() < 0.3:
            event["cat"] = "fwdbwd"
            event["id"] = _hostile_value(rng)
    if rng.random() < 0.3:
        events.append(
            {"ph": "X", "cat": "kernel", "name": "k", "pid": "Spans", "tid": "Traces", "ts": 1, "dur": 1}
        )


def wrong_document(doc: dict[str, Any], rng: random.Random) -> None:
    """traceEvents of the wrong type, or absent; extra keys in odd places."""
    choice = rng.random()
    if choice < 0.3:
        doc["traceEvents"] = _hostile_value(rng)
    elif choice < 0.5:
        doc.pop("traceEvents", None)
    elif choice < 0.7:
        doc["traceEvents"] = []
    else:
        doc["traceEvents"] = [e for e in _events(doc) if not (isinstance(e, dict) and e.get("ph") == "X")]


def deep_nesting(doc: dict[str, Any], rng: random.Random) -> None:
    """A deeply nested value in args or at the top level (deeper than any JSON parser's limit)."""
    depth = rng.choice((200, 254, 255, 256, 600, 1023, 1024, 1025, 5000, 100_000))
    target = rng.random()
    value = nested_value(depth, rng)
    if target < 0.6:
        for event in _some_events(doc, rng, most=2):
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            args[rng.choice(ARG_FIELDS)] = value
            event["args"] = args
    else:
        doc[rng.choice(("deviceProperties", "extra", "distributedInfo"))] = value


def shift_times(doc: dict[str, Any], rng: random.Random) -> None:
    """Intervals that no longer nest: starts moved, durations stretched or zeroed, equal timestamps."""
    events = [e for e in _events(doc) if isinstance(e, dict) and _number(e.get("ts"))]
    if not events:
        return
    anchor = rng.choice(events)["ts"]
    for event in rng.sample(events, min(len(events), rng.randint(1, 60))):
        dur = event.get("dur") if _number(event.get("dur")) else 1.0
        choice = rng.random()
        if choice < 0.4:
            event["ts"] = event["ts"] + rng.uniform(-2, 2) * max(dur, 1.0)
        elif choice < 0.6:
            event["dur"] = dur * rng.choice((0, 0.5, 3, 1000))
        else:
            event["ts"] = anchor  # many events starting at the same instant


def odd_steps(doc: dict[str, Any], rng: random.Random) -> None:
    """ProfilerStep ranges renamed, repeated, overlapping or numbered oddly."""
    events = [e for e in _events(doc) if isinstance(e, dict) and e.get("ph") == "X"]
    for event in rng.sample(events, min(len(events), rng.randint(1, 4))):
        event["name"] = rng.choice(
            (
                "ProfilerStep#1",
                "ProfilerStep#1",
                "ProfilerStep#-1",
                "ProfilerStep#abc",
                "ProfilerStep#",
                "ProfilerStep#" + "9" * 30,
                "ProfilerStep#2\x1b[2J",
            )
        )
        event["cat"] = rng.choice(("user_annotation", "gpu_user_annotation", event.get("cat")))


def odd_frames(doc: dict[str, Any], rng: random.Random) -> None:
    """Python frame names in every odd spelling: builtins, nn.Module markers, no line, huge lines."""
    frames = [e for e in _events(doc) if isinstance(e, dict) and e.get("cat") == "python_function"]
    for event in rng.sample(frames, min(len(frames), rng.randint(1, 10))):
        event["name"] = rng.choice(
            (
                "<built-in method to of Tensor object at 0xdeadbeef>",
                "<built-in method>",
                "<built-in",
                "nn.Module: ",
                "nn.Module: " + rng.choice(HOSTILE_TEXT),
                "x.py(0): f",
                "x.py(1): ",
                "x.py(" + "1" * 5000 + "): f",
                "(((((((((((((((((((((((((((((((((((((((1): f",
                "x.py(²): f",
                "torch/nn/modules/module.py(1): _call_impl",
                "",
            )
        )


DOCUMENT_MUTATIONS: dict[str, Mutation] = {
    "wrong_event_field": wrong_event_field,
    "wrong_arg_field": wrong_arg_field,
    "bad_durations": bad_durations,
    "wrong_container": wrong_container,
    "missing_args": missing_args,
    "missing_field": missing_field,
    "colliding_ids": colliding_ids,
    "shuffle_events": shuffle_events,
    "drop_launches": drop_launches,
    "duplicate_events": duplicate_events,
    "hostile_names": hostile_names,
    "hostile_call_from": hostile_call_from,
    "wrong_top_level": wrong_top_level,
    "odd_phases": odd_phases,
    "wrong_document": wrong_document,
    "deep_nesting": deep_nesting,
    "shift_times": shift_times,
    "odd_steps": odd_steps,
    "odd_frames": odd_frames,
}


# ---------------------------------------------------------------------------------------------------
# Writing: layouts and byte-level damage
# ---------------------------------------------------------------------------------------------------


def kineto_json(doc: dict[str, Any]) -> bytes:
    """The document laid out as Kineto writes it (one event per line group), so the chunked parser
    runs. NaN/inf are written as Python's json writes them (NaN, Infinity: not JSON), deep-nesting
    markers as the nested JSON itself."""
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        text = json.dumps(doc)
    else:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        parts = ["{\n"]
        for key, value in head.items():
            parts.append(f"  {json.dumps(key)}: {json.dumps(value)},\n")
        parts.append('  "traceEvents": [\n')
        parts.append(",\n".join("  " + json.dumps(e) for e in events))
        parts.append("\n  ]\n}")
        text = "".join(parts)
    if DEEP_MARKER in text:
        text = re.sub(r'"@@deep:(\d+):(list|dict)@@"', lambda m: deep_json(int(m[1]), m[2]), text)
    return text.encode("utf-8", "surrogatepass")


Writer = Callable[[bytes, random.Random], bytes]


def plain(data: bytes, rng: random.Random) -> bytes:
    return data


def gzipped(data: bytes, rng: random.Random) -> bytes:
    return gzip.compress(data, compresslevel=1, mtime=0)


def truncated(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data))] if data else data


def truncated_gzip(data: bytes, rng: random.Random) -> bytes:
    packed = gzipped(data, rng)
    return packed[: rng.randrange(len(packed))]


def corrupt_gzip(data: bytes, rng: random.Random) -> bytes:
    """Flipped bytes in the deflate stream or its CRC, or garbage appended after the member."""
    packed = bytearray(gzipped(data, rng))
    choice = rng.random()
    if choice < 0.6:
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(10, len(packed))
            packed[at] ^= 1 << rng.randrange(8)
    elif choice < 0.8:
        packed[-8:-4] = bytes(4)  # CRC32 wrong
    else:
        packed += rng.choice((b"garbage", b"\x1f\x8bgarbage", gzipped(data[:100], rng)))
    return bytes(packed)


def flipped_bytes(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 20)):
        if out:
            out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


# A lone continuation byte, bytes that never start UTF-8, an encoded surrogate, a cut sequence.
NOT_UTF8 = (b"\x80", b"\xbf", b"\xc0", b"\xff", b"\xed\xa0\x80", b"\xe2\x82")


def not_utf8(data: bytes, rng: random.Random) -> bytes:
    """A few letters (nearly all inside strings: names, categories, args) replaced by bytes that are
    not UTF-8, the JSON around them intact: a file copied through a lossy channel."""
    letters = [m.start() for m in re.finditer(rb"[A-Za-z]", data[:2_000_000])]
    out = bytearray(data)
    for at in sorted(rng.sample(letters, min(len(letters), rng.randint(1, 5))), reverse=True):
        out[at : at + 1] = rng.choice(NOT_UTF8)
    return bytes(out)


def one_line(data: bytes, rng: random.Random) -> bytes:
    """The same JSON on one line (the loader must parse it whole instead of in chunks)."""
    try:
        return json.dumps(json.loads(data)).encode()
    except (ValueError, RecursionError):  # not JSON (or nested past Python's limit): join the lines
        return data.replace(b"\n", b" ")


def odd_layout(data: bytes, rng: random.Random) -> bytes:
    """CRLF line endings, a BOM, tabs for indentation, NUL bytes, or a raw deflate stream."""
    choice = rng.random()
    if choice < 0.25:
        return data.replace(b"\n", b"\r\n")
    if choice < 0.45:
        return b"\xef\xbb\xbf" + data
    if choice < 0.65:
        return data.replace(b"\n  ", b"\n\t")
    if choice < 0.85:
        at = rng.randrange(len(data)) if data else 0
        return data[:at] + b"\x00" * rng.randint(1, 8) + data[at:]
    return zlib.compress(data)


WRITERS: dict[str, Writer] = {
    "plain": plain,
    "gzip": gzipped,
    "truncated": truncated,
    "truncated_gzip": truncated_gzip,
    "corrupt_gzip": corrupt_gzip,
    "flipped_bytes": flipped_bytes,
    "not_utf8": not_utf8,
    "one_line": one_line,
    "odd_layout": odd_layout,
}
