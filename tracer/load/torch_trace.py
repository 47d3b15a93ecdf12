"""Read PyTorch's structured trace (``TORCH_TRACE``): the graphs Inductor compiled, with their provenance.

Each record is one glog-prefixed line holding a JSON object (``{"inductor_output_code": {...},
"frame_id": 0, "frame_compile_id": 0, "attempt": 0, "has_payload": "..."}``), its payload on the
following tab-indented lines. Per compile (frame id, compile id, attempt, in a file) the records
kept are: ``dynamo_start`` (the user stack it was compiled from), ``dynamo_output_graph`` (each
source node's user line), ``inductor_output_code`` (the generated module: its path and code), the
provenance artifacts ``inductor_provenance_tracking_node_mappings`` (kernel -> post-grad nodes ->
source nodes) and ``inductor_provenance_tracking_kernel_stack_traces`` (kernel -> user stacks),
``fx_graph_cache_*`` (the FX graph key the trace's ``## Call CompiledFxGraph <key> ##`` names) and
``compilation_metrics`` (the compiled function). Everything else is skipped without decoding.
`keep_records` writes the same format back with only those records: a small sidecar for a trace.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracer.load.generated_code import parse_dynamo_graph, parse_generated_code, parse_stack
from tracer.model.compiled import CompiledGraph, GraphLaunch, StackFrame

MAX_LOG_BYTES = 4 << 30  # decompressed; a structured trace of a big model's compiles is a few hundred MB
KEPT = (
    "dynamo_start",
    "dynamo_output_graph",
    "inductor_output_code",
    "compilation_metrics",
    "str",
)
KEPT_ARTIFACTS = (
    "inductor_provenance_tracking_node_mappings",
    "inductor_provenance_tracking_kernel_stack_traces",
)
_CACHE_ARTIFACT = "fx_graph_cache_"  # fx_graph_cache_miss / _hit / _bypass: {"key": ...}


def is_structured_log(path: Path) -> bool:
    """Whether `path` is a regular file that starts like a structured trace (plain or gzip)."""
    try:
        with _open(path) as handle:
            head = handle.readline(4096)
    except (OSError, EOFError, ValueError, gzip.BadGzipFile):
        return False
    return "] {" in head


def read_compiled_graphs(paths: Iterable[Path], problems: list[str] | None = None) -> list[CompiledGraph]:
    """Every graph Inductor compiled, from the structured trace files `paths`; a damaged file gives
    the graphs read before the damage, and a line in `problems` (a sidecar never stops the explain)."""
    graphs: list[CompiledGraph] = []
    for path in paths:
        reader = _Reader(path)
        try:
            reader.read()
        except (OSError, EOFError, ValueError, gzip.BadGzipFile, UnicodeError) as err:
            if problems is not None:
                problems.append(
                    f"{path.name} is damaged ({type(err).__name__}: {str(err)[:80]}): read up to there"
                )
        graphs.extend(reader.finish())
    return graphs


def keep_records(source: Path, out: Path) -> int:
    """Write the records the join reads (`KEPT`, `KEPT_ARTIFACTS`, FX cache keys) of `source` to `out`
    (gzip); returns how many. The rest of a structured trace (guards, graphs, timings) is dropped."""
    kept = 0
    with gzip.open(out, "wt", encoding="utf-8") as sink:
        for header, payload in _records(_open(source)):
            if _wanted(header):
                sink.write(header)
                sink.writelines(payload)
                kept += 1
    return kept


# -- reading ----------------------------------------------------------------------------------------
def _open(path: Path) -> io.TextIOBase:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path}: not a regular file")
        raw = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    if raw.peek(2)[:2] == b"\x1f\x8b" if hasattr(raw, "peek") else False:
        return io.TextIOWrapper(
            io.BufferedReader(_Bounded(gzip.GzipFile(fileobj=raw))), encoding="utf-8", errors="replace"
        )
    return io.TextIOWrapper(io.BufferedReader(_Bounded(raw)), encoding="utf-8", errors="replace")


class _Bounded(io.RawIOBase):
    """A readable that stops with ValueError past `MAX_LOG_BYTES` (a gzip bomb named torch_trace)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.inner.read(len(buffer))
        self.count += len(data)
        if self.count > MAX_LOG_BYTES:
            raise ValueError("structured trace larger than its limit")
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.inner.close()
        super().close()


def _records(handle: io.TextIOBase) -> Iterator[tuple[str, list[str]]]:
    """(header line, payload lines) of each record, payloads unread unless the caller keeps them."""
    with handle:
        header: str | None = None
        payload: list[str] = []
        for line in handle:
            if line.startswith("\t"):
                if header is not None:
                    payload.append(line)
                continue
            if header is not None:
                yield header, payload
            header, payload = (line, []) if "] {" in line else (None, [])
        if header is not None:
            yield header, payload


def _wanted(header: str) -> bool:
    head = header[header.find("] {") + 3 : header.find("] {") + 60]
    if any(head.startswith(f'"{key}"') for key in KEPT):
        return True
    if head.startswith('"artifact"'):
        name = header[header.find('"name": "') + 9 :].split('"', 1)[0]
        return name in KEPT_ARTIFACTS or name.startswith(_CACHE_ARTIFACT)
    return False


class _Reader:
    """One structured trace file -> its compiled graphs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.strings: dict[int, str] = {}  # the "str" records intern file names for dynamo_start
        self.compiles: dict[tuple, dict[str, Any]] = {}  # (frame id, compile id, attempt) -> state
        self.done: list[CompiledGraph] = []

    def read(self) -> None:
        for header, payload in _records(_open(self.path)):
            if not _wanted(header):
                continue
            try:
                record = json.loads(header[header.find("] {") + 2 :])
            except ValueError:
                continue
            if isinstance(record, dict):
                self._record(record, "".join(line[1:] for line in payload))

    def finish(self) -> list[CompiledGraph]:
        for state in self.compiles.values():
            self._finish(state)
        return self.done

    def _record(self, record: dict[str, Any], payload: str) -> None:
        if "str" in record:
            pair = record["str"]
            if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], int):
                self.strings[pair[1]] = str(pair[0])
            return
        key = (record.get("frame_id"), record.get("frame_compile_id"), record.get("attempt"))
        if "dynamo_start" in record:
            if key in self.compiles:  # ids restart after torch._dynamo.reset(): a new compile
                self._finish(self.compiles.pop(key))
            stack = record["dynamo_start"].get("stack") if isinstance(record["dynamo_start"], dict) else None
            self.compiles[key] = {"stack": self._stack(stack), "graphs": [], "nodes": {}, "pending": {}}
            return
        state = self.compiles.setdefault(key, {"stack": (), "graphs": [], "nodes": {}, "pending": {}})
        if "dynamo_output_graph" in record:
            state["nodes"].update(parse_dynamo_graph(payload))
        elif "inductor_output_code" in record:
            info = record["inductor_output_code"]
            module = str(info.get("filename") or "") if isinstance(info, dict) else ""
            code = parse_generated_code(payload)
            graph = CompiledGraph(module=module, launches=code.launches, read_from=str(self.path))
            state["graphs"].append(graph)
            state.setdefault("seen", []).append(set(state["pending"]))
            for name, value in state["pending"].items():  # provenance logged before its code
                self._attach(graph, name, value)
            state["pending"] = {}
        elif "compilation_metrics" in record:
            metrics = record["compilation_metrics"]
            if isinstance(metrics, dict):
                state["metrics"] = metrics
            self._finish(self.compiles.pop(key))
        elif "artifact" in record:
            name = str(record["artifact"].get("name", "")) if isinstance(record["artifact"], dict) else ""
            try:
                value = json.loads(payload) if payload else None
            except ValueError:
                return
            if name.startswith(_CACHE_ARTIFACT):
                fx_key = value.get("key") if isinstance(value, dict) else None
                unkeyed = next((g for g in reversed(state["graphs"]) if g.fx_key is None), None)
                if unkeyed is not None and isinstance(fx_key, str):
                    unkeyed.fx_key = fx_key
                return
            # Each artifact once per graph: it belongs to the latest graph that lacks it.
            seen = state.setdefault("seen", [])
            at = next((i for i in reversed(range(len(state["graphs"]))) if name not in seen[i]), None)
            if at is None:
                state["pending"][name] = value
            else:
                seen[at].add(name)
                self._attach(state["graphs"][at], name, value)

    def _stack(self, stack: Any) -> tuple[StackFrame, ...]:
        frames = []
        for item in stack if isinstance(stack, list) else ():
            if not isinstance(item, dict) or not isinstance(item.get("line"), int):
                continue
            file = item.get("filename")
            file = self.strings.get(file, str(file)) if isinstance(file, int) else str(file)
            frames.append(
                StackFrame(file, item["line"], str(item.get("name", "")), str(item.get("loc") or ""))
            )
        return tuple(frames)

    def _attach(self, graph: CompiledGraph, name: str, value: Any) -> None:
        """Provenance artifacts onto the graph whose code came just before them."""
        if not isinstance(value, dict):
            return
        graph.has_provenance = True
        launches = list(graph.launches)
        by_handle = {launch.handle: i for i, launch in enumerate(launches) if launch.handle}
        if name == "inductor_provenance_tracking_kernel_stack_traces":
            for handle, stacks in value.items():
                if isinstance(stacks, list) and handle in by_handle:
                    i = by_handle[handle]
                    parsed = tuple(parse_stack(s) for s in stacks if isinstance(s, str))
                    launches[i] = replace(launches[i], stacks=tuple(s for s in parsed if s))
        elif name == "inductor_provenance_tracking_node_mappings":
            to_post, post_to_pre = value.get("cppCodeToPost"), value.get("postToPre")
            if isinstance(to_post, dict) and isinstance(post_to_pre, dict):
                for handle, posts in to_post.items():
                    if handle not in by_handle or not isinstance(posts, list):
                        continue
                    names = [n for p in posts for n in post_to_pre.get(p, ()) if isinstance(n, str)]
                    i = by_handle[handle]
                    launches[i] = replace(launches[i], source_nodes=tuple(dict.fromkeys(names)))
        graph.launches = tuple(launches)

    def _finish(self, state: dict[str, Any]) -> None:
        metrics = state.get("metrics") or {}
        for graph in state["graphs"]:
            graph.nodes = dict(state["nodes"])
            graph.compiled_from = state["stack"]
            graph.compile_id = str(metrics["compile_id"]) if metrics.get("compile_id") else None
            graph.function = str(metrics["co_name"]) if metrics.get("co_name") else None
            graph.file = str(metrics["co_filename"]) if metrics.get("co_filename") else None
            line = metrics.get("co_firstlineno")
            graph.def_line = line if isinstance(line, int) else None
            self.done.append(graph)
        state["graphs"], state["seen"] = [], []


__all__ = ["GraphLaunch", "is_structured_log", "keep_records", "read_compiled_graphs"]
