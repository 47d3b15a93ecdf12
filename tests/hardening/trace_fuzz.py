"""Fuzz cases from real traces and the whole pipeline run on each: shared by the hardening tests
(hypothesis, small budget) and `bench/fuzz_traces.py` (seeded loop, 10,000+ cases).

A *seed* is a real trace (torch.profiler on CPU, or a time slice of a real H200 trace) as its parsed
document; a case applies mutations and a writer from `trace_mutations` to one. `run_pipeline` then
runs everything a user can reach for one file and says how it ended: a result, or a one-line
`InputError`; anything else (another exception, a multi-line error, an error that does not name the
file, a renderer passing control characters through) is a failure.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_mutations import (  # noqa: F401  (re-exported: the tests and the bench use them from here)
    ARG_FIELDS,
    DOCUMENT_MUTATIONS,
    EVENT_FIELDS,
    HOSTILE_TEXT,
    WRITERS,
    kineto_json,
    nested_value,
)

REPO = Path(__file__).resolve().parents[2]
SHARED_GPU_TRACES = REPO / "tests" / "fixtures" / "transformers"  # copied from ../shared
OWN_GPU_TRACES = REPO / "tests" / "fixtures" / "gpu"
OWN_CPU_TRACES = REPO / "tests" / "fixtures" / "cpu"
LOAD_WORKERS_ENV = "KERNELTRACE_LOAD_WORKERS"


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
    a layer count, a step range name; and, in 4 of 10 cases, read blocks of a few KB: seeds are
    smaller than the loader's 8 MB block, and only a file of several blocks goes through the chunked
    loader (msgspec's fast path, worker processes) rather than one whole-document parse."""
    small_blocks = (("block_bytes", rng.choice((1024, 4096, 65536))),) if rng.random() < 0.4 else ()
    choice = rng.random()
    if choice < 0.1:
        return (("load_workers", 2), *small_blocks)  # the loader's worker processes
    if choice < 0.5:
        return small_blocks
    if choice < 0.8:
        return (("source", (str(REPO),)), *small_blocks)
    if choice < 0.9:
        return (("layers", rng.choice((1, 3, 78, 10**6))), *small_blocks)
    step_range = rng.choice(("ProfilerStep", "forward", "", rng.choice(HOSTILE_TEXT)))
    return (("step_range", step_range), *small_blocks)


def make_case(
    seeds: list[tuple[str, dict]], rng: random.Random, directory: Path, number: int
) -> tuple[Case, Path]:
    """Pick a seed, apply 0-3 document mutations and one writer; write the file; return it."""
    name, document = seeds[rng.randrange(len(seeds))]
    doc = copy.deepcopy(document)
    mutations = tuple(rng.sample(sorted(DOCUMENT_MUTATIONS), rng.choice((0, 1, 1, 2, 2, 3))))
    for mutation in mutations:
        DOCUMENT_MUTATIONS[mutation](doc, rng)
    writer = rng.choices(list(WRITERS), weights=(4, 3, 1, 1, 1, 1, 1, 1, 1))[0]
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
    """A short class of an InputError's problem, for the outcome table (the words before any detail,
    quoted value or parenthesis)."""
    head = re.split(r"[:(\'\"]", problem, maxsplit=1)[0].strip()
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
    from tracer.load import source as load_source
    from tracer.render.dot import to_dot
    from tracer.render.html import render_report
    from tracer.render.markdown import render_markdown
    from tracer.render.table import print_table

    options = dict(options or {})
    workers = options.pop("load_workers", None)
    previous_workers, previous_blocks = os.environ.get(LOAD_WORKERS_ENV), load_source.BLOCK_BYTES
    if workers is not None:
        os.environ[LOAD_WORKERS_ENV] = str(workers)
    load_source.BLOCK_BYTES = options.pop("block_bytes", previous_blocks)
    try:
        analysis = explain_trace(path, **options)
    finally:
        load_source.BLOCK_BYTES = previous_blocks
        if workers is not None:
            if previous_workers is None:
                del os.environ[LOAD_WORKERS_ENV]
            else:
                os.environ[LOAD_WORKERS_ENV] = previous_workers
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
        text.encode("utf-8")  # every output can be written (no lone surrogates)
    # JSON is data, not display: names keep their characters (JSON escapes the C0 controls itself).
    from tracer.output_files import json_ready

    document = orjson.dumps(
        json_ready(analysis.to_dict()), option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    )
    orjson.loads(document)
    # GraphML is XML: it must parse whatever the names hold; node-link JSON likewise.
    import xml.etree.ElementTree as ET

    import networkx as nx

    from tracer.graph import node_link
    from tracer.graph.export import to_graphml_ready

    ET.fromstring("\n".join(nx.generate_graphml(to_graphml_ready(graph))))
    orjson.loads(orjson.dumps(json_ready(node_link(graph)), option=orjson.OPT_NON_STR_KEYS))


def run_cli(
    *args: str,
    cwd: Path | None = None,
    timeout: float = 180,
    text: bool = False,
    memory_limit: int | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """`kerneltrace ARGS...` in a fresh interpreter, as a user runs it (any exit code is returned);
    `memory_limit`: its address space in bytes (`ulimit -v`), as a user with a capped shell has."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    command = [sys.executable, "-c", "from tracer.cli import main; main()", *args]
    return subprocess.run(
        command,
        capture_output=True,
        timeout=timeout,
        cwd=cwd,
        text=text,
        check=False,
        preexec_fn=cap if memory_limit else None,
        env={**os.environ, **env} if env else None,
    )


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
