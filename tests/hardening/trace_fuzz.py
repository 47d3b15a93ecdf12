"""Mutations of real profiler traces and the whole pipeline run on each: shared by the hardening tests
(hypothesis, small budget) and `bench/fuzz_traces.py` (seeded loop, 10,000+ cases).

A *seed* is a real trace (torch.profiler on CPU, or a time slice of a real H200 trace) as its parsed
document. A *mutation* changes the document (wrong types, missing args, colliding ids, order, names)
or the bytes written (truncation, corrupt gzip, flipped bytes). `run_pipeline` then runs everything a
user can reach for one file and says how it ended: a result, or a one-line `InputError`; anything else
(another exception, a multi-line error, an error that does not name the file) is a failure.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import math
import random
import re
import signal
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SHARED_GPU_TRACES = REPO.parent / "shared" / "fixtures" / "gpu-traces"
OWN_GPU_TRACES = REPO / "tests" / "fixtures" / "gpu"
OWN_CPU_TRACES = REPO / "tests" / "fixtures" / "cpu"

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
# Seeds: real traces, small enough that one pipeline run takes tens of milliseconds
# ---------------------------------------------------------------------------------------------------


def read_document(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def time_slice(document: dict[str, Any], rng: random.Random, max_events: int = 600) -> dict[str, Any]:
    """A real trace cut to a short time window: the CPU events overlapping it (their ancestors
    included), the GPU events those launched (by correlation), and every metadata event."""
    events = document["traceEvents"]
    timed = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
    cpu = sorted((e for e in timed if e.get("cat") not in gpu_cats), key=lambda e: e["ts"])
    out_doc = {k: v for k, v in document.items() if k != "traceEvents"}
    if len(cpu) <= max_events:
        out_doc["traceEvents"] = copy.deepcopy(events)
        return out_doc
    start = cpu[rng.randrange(len(cpu) - max_events // 2)]["ts"]
    width = 50.0
    chosen: list[dict[str, Any]] = []
    # Widen until the window holds about max_events / 2 CPU events (GPU events and ancestors add more).
    while width < 1e9:
        end = start + width
        chosen = [e for e in cpu if e["ts"] < end and e["ts"] + (e.get("dur") or 0) > start]
        if len(chosen) >= max_events // 2:
            break
        width *= 2
    chosen = chosen[:max_events]
    correlations = {
        e.get("args", {}).get("correlation")
        for e in chosen
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and isinstance(e.get("args"), dict)
    }
    correlations.discard(None)
    gpu = [
        e
        for e in timed
        if e.get("cat") in gpu_cats
        and isinstance(e.get("args"), dict)
        and e["args"].get("correlation") in correlations
    ][: max_events // 2]
    metadata = [e for e in events if e.get("ph") == "M"]
    flows = [e for e in events if e.get("ph") in ("s", "f") and start <= e.get("ts", -1) < start + width]
    out_doc["traceEvents"] = copy.deepcopy(metadata + chosen + gpu + flows[:50])
    return out_doc


def real_trace_files() -> list[Path]:
    """Every real trace fixture of the repository and the shared folder."""
    found = sorted(SHARED_GPU_TRACES.glob("*.json.gz")) + sorted(OWN_GPU_TRACES.glob("*.json.gz"))
    return found + sorted(OWN_CPU_TRACES.glob("*.json.gz"))


def profile_cpu_trace(path: Path, *, with_stack: bool, steps: int = 3) -> Path:
    """A real torch.profiler trace of a small model on CPU: casts, a record_function range, steps."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(16, 16)

        def forward(self, x: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
            with record_function("kv_cast"):
                keys = pool.to(torch.float32)
            return self.proj(x.to(torch.bfloat16).float()) + keys[: x.shape[0]]

    torch.manual_seed(0)
    layers = torch.nn.ModuleList(Layer() for _ in range(2))
    x, pool = torch.randn(4, 16), torch.randn(32, 16, dtype=torch.float16)
    # A schedule makes the profiler record ProfilerStep#N ranges (one warm-up step, then `steps`).
    plan = schedule(wait=0, warmup=1, active=steps, repeat=1)
    with (
        torch.no_grad(),
        profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            with_stack=with_stack,
            schedule=plan,
            on_trace_ready=lambda done: done.export_chrome_trace(str(path)),
        ) as prof,
    ):
        for _ in range(steps + 1):
            for layer in layers:
                x = layer(x, pool)
            prof.step()
    return path


def load_seeds(cpu_dir: Path, rng: random.Random, slices_per_file: int = 2) -> list[tuple[str, dict]]:
    """(name, document) of every seed: CPU traces profiled into `cpu_dir`, slices of the real files."""
    seeds = []
    for with_stack in (True, False):
        path = cpu_dir / f"cpu_{'stack' if with_stack else 'nostack'}.json"
        if not path.exists():
            profile_cpu_trace(path, with_stack=with_stack)
        seeds.append((path.name, read_document(path)))
    for path in real_trace_files():
        document = read_document(path)
        for k in range(slices_per_file):
            seeds.append((f"{path.name}#slice{k}", time_slice(document, rng)))
        del document
    return seeds


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
        return _nested(rng.choice((10, 100, 254, 300, 1000)), rng)
    return "x" * rng.choice((1000, 100_000))


def _nested(depth: int, rng: random.Random) -> Any:
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
    value = _nested(depth, rng)
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
    "one_line": one_line,
    "odd_layout": odd_layout,
}


@dataclass(frozen=True)
class Case:
    """One generated input: which seed, which mutations, how it was written, which explain options."""

    seed: str
    mutations: tuple[str, ...]
    writer: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        extra = f" | {dict(self.options)}" if self.options else ""
        return f"{self.seed} [{'+'.join(self.mutations) or 'none'} | {self.writer}{extra}]"


def explain_options(rng: random.Random) -> tuple[tuple[str, Any], ...]:
    """Options a user may pass: source roots (the join reads and scans the files the trace names),
    a layer count, a step range name."""
    choice = rng.random()
    if choice < 0.5:
        return ()
    if choice < 0.8:
        return (("source", (str(REPO),)),)
    if choice < 0.9:
        return (("layers", rng.choice((1, 3, 78, 10**6))),)
    return (("step_range", rng.choice(("ProfilerStep", "forward", "", rng.choice(HOSTILE_TEXT)))),)


def make_case(
    seeds: list[tuple[str, dict]], rng: random.Random, directory: Path, number: int
) -> tuple[Case, Path]:
    """Pick a seed, apply 0-3 document mutations and one writer; write the file; return it."""
    name, document = seeds[rng.randrange(len(seeds))]
    doc = copy.deepcopy(document)
    mutations = tuple(rng.sample(sorted(DOCUMENT_MUTATIONS), rng.choice((0, 1, 1, 2, 2, 3))))
    for mutation in mutations:
        DOCUMENT_MUTATIONS[mutation](doc, rng)
    writer = rng.choices(list(WRITERS), weights=(4, 3, 1, 1, 1, 1, 1, 1))[0]
    data = WRITERS[writer](kineto_json(doc), rng)
    suffix = (
        ".json.gz" if writer in ("gzip", "truncated_gzip", "corrupt_gzip") or rng.random() < 0.05 else ".json"
    )
    path = directory / f"case{number}{suffix}"
    path.write_bytes(data)
    return Case(name, mutations, writer, explain_options(rng)), path


# ---------------------------------------------------------------------------------------------------
# The pipeline, end to end, on one file
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """How one case ended: "result", "input_error" (with its kind) or "failure" (with the detail)."""

    kind: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.kind in ("result", "input_error")


def error_kind(problem: str) -> str:
    """A short class of an InputError's problem, for the outcome table (the words before any detail)."""
    head = problem.split(":")[0].split("(")[0].strip()
    words = head.split()
    return " ".join(words[:6]) if words else "(empty)"


def run_pipeline(path: Path, options: tuple[tuple[str, Any], ...] = ()) -> Outcome:
    """explain_trace, then every renderer (graph, DOT source, HTML, markdown, rich table, JSON)."""
    import traceback

    from tracer.errors import InputError

    try:
        render_all(path, dict(options))
    except InputError as err:
        line = str(err)
        if "\n" in line or "\r" in line:
            return Outcome("failure", f"multi-line InputError: {line[:300]!r}")
        if not line.startswith(str(path)):
            return Outcome("failure", f"InputError does not name the file: {line[:300]!r}")
        return Outcome("input_error", error_kind(err.problem))
    except RecursionError:
        return Outcome("failure", "RecursionError\n" + traceback.format_exc(limit=-8))
    except Exception:  # noqa: BLE001  (anything else is what the fuzzing looks for)
        return Outcome("failure", traceback.format_exc(limit=-8))
    return Outcome("result")


def render_all(path: Path, options: dict[str, Any] | None = None) -> None:
    import orjson
    from rich.console import Console

    from tracer.api import explain_trace
    from tracer.graph import build_graph
    from tracer.render.dot import to_dot
    from tracer.render.html import render_report
    from tracer.render.markdown import render_markdown
    from tracer.render.table import print_table

    options = options or {}
    analysis = explain_trace(path, **options)
    graph = build_graph(analysis)
    console = Console(file=io.StringIO(), width=200, force_terminal=False)
    print_table(analysis, console)
    texts = {
        "dot": to_dot(graph).source,
        "html": render_report(analysis, source_roots=options.get("source", ())),
        "markdown": render_markdown(analysis),
        "terminal": console.file.getvalue(),
    }
    for renderer, text in texts.items():
        assert_no_raw_controls(renderer, text)
    # JSON is data, not display: names keep their characters (JSON escapes the C0 controls itself).
    document = orjson.dumps(analysis.to_dict(), option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    orjson.loads(document)


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 180, text: bool = False
) -> subprocess.CompletedProcess:
    """`kerneltrace ARGS...` in a fresh interpreter, as a user runs it (any exit code is returned)."""
    command = [sys.executable, "-c", "from tracer.cli import main; main()", *args]
    return subprocess.run(command, capture_output=True, timeout=timeout, cwd=cwd, text=text, check=False)


def write_trace(document: dict[str, Any], path: Path) -> Path:
    """Write an edited trace the way Kineto lays it out (so the chunked loader reads it); gzip for .gz."""
    data = kineto_json(document)
    path.write_bytes(gzip.compress(data, compresslevel=1) if path.suffix == ".gz" else data)
    return path


@contextlib.contextmanager
def time_bound(seconds: float) -> Iterator[None]:
    """Raise TimeoutError instead of hanging when the body runs longer than `seconds` (main thread)."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class UnsafeOutput(AssertionError):
    """A renderer emitted a control character it was given (terminal escape, bidi override)."""


# Tabs and line breaks are layout; every other C0/C1 control, DEL and bidi control must never appear.
_FORBIDDEN = (
    {chr(c) for c in range(0x20) if chr(c) not in "\t\n\r"}
    | {"\x7f"}
    | {chr(c) for c in range(0x80, 0xA0)}
    | set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
)


def assert_no_raw_controls(renderer: str, text: str) -> None:
    bad = _FORBIDDEN.intersection(text)
    if bad:
        raise UnsafeOutput(f"{renderer} output has control characters {sorted(map(hex, map(ord, bad)))}")
