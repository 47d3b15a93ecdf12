"""What one launch of Inductor-generated code fused: its user lines, each with its ops, and how found.

`FusedLines.find` answers from the best record the graph has (`tracer.load.torch_trace`,
`tracer.load.generated_code`): Inductor's provenance stacks (exact), the launch's source nodes
located by Dynamo's graph, else source nodes or kernel-name ops placed on the compiled function's
own source (`tracer.join.compiled_lines`). `launch_origin` turns the answer into the kernel's `Origin`.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import replace

from tracer.join.compiled_lines import align_launch, assignments_of
from tracer.join.frame_names import frame_names
from tracer.join.frames import is_user_frame, parse_frame, same_file
from tracer.join.locate import CallLocator
from tracer.join.source_lines import SourceLines, read_source_text
from tracer.model.compiled import CompiledGraph, GraphLaunch, SourceNode, StackFrame
from tracer.model.events import Trace
from tracer.model.origin import CompiledRegion, Frame, FusedLine, Origin

# How the fused lines were found (`CompiledRegion.provenance`), best first.
PROVENANCE = "Inductor's provenance"
DYNAMO_GRAPH = "source nodes + Dynamo's graph"
SOURCE_NODES = "source nodes aligned with the source"
KERNEL_NAME = "the kernel's name aligned with the source"
CONFIDENCE = {PROVENANCE: 1.0, DYNAMO_GRAPH: 0.95}
# Below 0.9: answers that were seen wrong. An op Inductor calls (``extern_kernels.mm``, an ATen
# fallback) lists the source nodes of its inputs too, and Dynamo's graph alone cannot tell which is
# its own (the transformers Llama: 81% right); provenance not checked against Dynamo's graph may be
# a cached compile's (tests/fixtures/compiled/cpu_stale).
EXTERN_BY_GRAPH = 0.8
UNCHECKED_PROVENANCE = 0.85
_EXTERN = ("extern_kernels.", "torch.ops.", "aten.")
MAX_LISTED = 8  # fused lines named in the evidence (all are in `Origin.fused`)
_SITE_PACKAGES = re.compile(r"^.*?/(?:site|dist)-packages/")
# Ops that move or reinterpret data without computing: a line of only these is not the kernel's work.
_LAYOUT_OPS = frozenset(
    {"view", "reshape", "transpose", "permute", "unsqueeze", "squeeze", "expand", "contiguous",
     "t", "flatten", "unflatten", "_unsafe_view", "clone", "size", "dim", "detach", "getattr"}
)  # fmt: skip


class FusedLines:
    """Finds the fused lines of launches of one trace's graphs (file names as the trace names them)."""

    def __init__(self, trace: Trace, source: SourceLines, locator: CallLocator) -> None:
        self.trace = trace
        self.source = source
        self.locator = locator
        self._trace_files: list[str] | None = None
        self._assigned: dict[tuple, dict[str, list[tuple[int, int]]]] = {}

    def find(self, graph: CompiledGraph, launch: GraphLaunch, function: Frame | None):
        """(fused lines, how found, confidence, notes); `function`: the compiled function's frame."""
        order = {name: i for i, name in enumerate(graph.nodes)}
        nodes = sorted(
            (graph.nodes[n] for n in launch.source_nodes if n in graph.nodes), key=lambda n: order[n.name]
        )
        notes: tuple[str, ...] = ()
        if launch.stacks:
            stale = _stale_stack(launch.stacks, graph)
            if stale is None and graph.nodes:
                return self._from_stacks(launch.stacks, nodes), PROVENANCE, CONFIDENCE[PROVENANCE], ()
            if stale is None:
                unchecked = (
                    "Inductor's provenance not checked: no Dynamo graph of this compile in the records",
                )
                return self._from_stacks(launch.stacks, nodes), PROVENANCE, UNCHECKED_PROVENANCE, unchecked
            notes = (
                (
                    f"Inductor's provenance names {stale.file}:{stale.line}, a line Dynamo's graph of this run does "
                    "not have (a cached compile of the same code elsewhere): not used"
                ),
            )
        located = [n for n in nodes if n.file is not None and n.line is not None]
        if located:
            lines = self._group([(n.file, n.line, n.op, n.function, n.code) for n in located])
            if launch.kernel.startswith(_EXTERN):
                notes = (
                    *notes,
                    f"`{launch.kernel}` is an op Inductor calls: its source nodes include its inputs'",
                )
                return lines, DYNAMO_GRAPH, EXTERN_BY_GRAPH, notes
            return lines, DYNAMO_GRAPH, CONFIDENCE[DYNAMO_GRAPH], notes
        how = SOURCE_NODES if launch.source_nodes else KERNEL_NAME
        program = self.locator.program(function) if function is not None else None
        if function is None or program is None:
            reason = (
                "the compiled function's frame is not in the trace"
                if function is None
                else (f"the source of `{function.function}` ({function.file}) was not found: give --source")
            )
            return (), how, 0.0, (reason,)  # fmt: skip
        assignments = self._assignments(function) if launch.source_nodes else {}
        placed = align_launch(program[0], graph.launches, graph.launches.index(launch), assignments)
        items = [(function.file, p.line, op, function.function, None) for op, p in placed.points]
        return self._group(items), how, placed.confidence, placed.evidence

    def display_file(self, path: str) -> str:
        """A path from the compiling machine as the trace's frames name it (``transformers/...``)."""
        if self._trace_files is None:
            names = frame_names(self.trace.events).distinct
            self._trace_files = sorted(
                {parse_frame(n).file for n in names if is_user_frame(n)}, key=len, reverse=True
            )
        match = next((f for f in self._trace_files if same_file(path, f)), None)
        if match is not None:
            return match
        return _SITE_PACKAGES.sub("", path.replace("\\", "/"))

    def _assignments(self, function: Frame) -> dict[str, list[tuple[int, int]]]:
        """The compiled function's assignments (variable -> statement lines), from its source."""
        path = self.source.find(function.file)
        text = read_source_text(path) if path is not None else None
        if text is None:
            return {}
        key = (str(path), function.def_line, function.function)
        found = self._assigned.get(key)
        if found is None:
            try:
                tree: ast.AST = ast.parse(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = ast.Module(body=[], type_ignores=[])
            found = self._assigned[key] = assignments_of(tree, function.def_line or 0, function.function)
        return found

    def _from_stacks(self, stacks, nodes: list[SourceNode]) -> tuple[FusedLine, ...]:
        """The innermost frame of each provenance stack is a fused line; nodes name its ops."""
        inner: list[StackFrame] = [stack[-1] for stack in stacks]
        ops_at: dict[tuple[str, int], list[str]] = defaultdict(list)
        first: dict[tuple[str, int], int] = {}
        for i, node in enumerate(nodes):
            for frame in inner:
                if node.line == frame.line and node.file is not None and same_file(node.file, frame.file):
                    ops_at[(frame.file, frame.line)].append(node.op)
                    first.setdefault((frame.file, frame.line), i)
                    break
        places = sorted(
            dict.fromkeys((f.file, f.line) for f in inner), key=lambda k: first.get(k, len(nodes))
        )
        by_place = {(f.file, f.line): f for f in inner}
        items: list[tuple[str, int, str | None, str, str | None]] = []
        for place in places:
            frame = by_place[place]
            ops: list[str | None] = [*ops_at.get(place, ())] or [None]
            for op in ops:
                items.append((frame.file, frame.line, op, frame.function, frame.code))
        return self._group(items)

    def _group(self, items) -> tuple[FusedLine, ...]:
        """(file, line, op, function, code) items, in order -> one FusedLine per line, ops in order."""
        lines: dict[tuple[str, int], dict] = {}
        for file, line, op, function, code in items:
            entry = lines.setdefault(
                (self.display_file(file), line), {"ops": [], "function": function, "code": code}
            )
            if op is not None:
                entry["ops"].append(op)
        return tuple(
            FusedLine(
                file, line, tuple(e["ops"]), self.source.line(file, line) or e["code"] or None, e["function"]
            )
            for (file, line), e in lines.items()
        )


def _stale_stack(stacks, graph: CompiledGraph) -> StackFrame | None:
    """A provenance line Dynamo's graph of this compile does not have, or None when all are there.

    Inductor's FX graph cache keeps the provenance of the compile that filled it: a hit for the same
    code in another file (or an edited one) replays stacks naming the old lines."""
    if not graph.nodes:
        return None
    places = {
        (node.line, node.file.replace("\\", "/").rsplit("/", 1)[-1])
        for node in graph.nodes.values()
        if node.file
    }
    for stack in stacks:
        frame = stack[-1]
        if (frame.line, frame.file.replace("\\", "/").rsplit("/", 1)[-1]) not in places:
            return frame
    return None


def launch_origin(
    base: Origin,
    graph: CompiledGraph,
    launch: GraphLaunch,
    region: CompiledRegion,
    found: tuple,
    label: str,
    notes: tuple[str, ...] = (),
    penalty: float = 1.0,
) -> Origin:
    """The Origin of one launch: its principal line, every fused line, the region (``found`` is
    `FusedLines.find`'s answer; ``label`` names the launch; ``penalty`` scales the confidence)."""
    fused, provenance, confidence, found_notes = found
    region = replace(region, provenance=provenance)
    notes = (*found_notes, *notes)
    head = f"{label} of {short_name(graph.module)}"
    if not fused:
        return replace(
            base,
            compiled=region,
            evidence=(f"{head}: no user line found ({provenance})", *notes, *region_evidence(region)),
        )
    main = principal_line(fused, launch, graph)
    shown = ", ".join(f.label for f in fused[:MAX_LISTED]) + (
        f", +{len(fused) - MAX_LISTED} more" if len(fused) > MAX_LISTED else ""
    )
    summary = (
        f"{head} fused {sum(len(f.ops) for f in fused)} op(s) from {len(fused)} user line(s) ({shown}), by "
        f"{provenance} ({short_name(graph.read_from)})"
    )
    return replace(
        base,
        file=main.file,
        line=main.line,
        source=main.source,
        confidence=round(confidence * penalty, 3),
        evidence=(summary, *notes, *region_evidence(region)),
        fused=fused,
        compiled=region,
    )  # fmt: skip


def principal_line(fused: tuple[FusedLine, ...], launch: GraphLaunch, graph: CompiledGraph) -> FusedLine:
    """The Origin's own line: for a kernel Inductor generated, the line holding most of its computing
    ops (the first such, in graph order); for an op it calls (``extern_kernels.mm``, an ATen
    fallback), the line of the value it produces (its last source node)."""
    if launch.kernel.startswith(("extern_kernels.", "torch.ops.", "aten.")):
        order = {name: i for i, name in enumerate(graph.nodes)}
        nodes = [graph.nodes[n] for n in launch.source_nodes if n in graph.nodes and graph.nodes[n].line]
        if nodes:
            last = max(nodes, key=lambda n: order[n.name])
            found = next(
                (f for f in fused if f.line == last.line and same_file(f.file, last.file or "")), None
            )
            if found is not None:
                return found
    return max(fused, key=lambda f: (sum(op not in _LAYOUT_OPS for op in f.ops), -fused.index(f)))


def region_evidence(region: CompiledRegion) -> tuple[str, ...]:
    """One line naming the compiled region and the line that called it."""
    if region.function is None:
        return ()
    where = f"{region.file}:{region.def_line}" if region.file else "?"
    dynamo = f", Dynamo {region.compile_id}" if region.compile_id else ""
    called = ""
    if region.call_line is not None:
        when = " (where Dynamo compiled it)" if region.call_at_compile else ""
        text = f": {region.call_source}" if region.call_source else ""
        called = f", called from {region.call_location}{when}{text}"
    elif region.call_file is not None:
        called = f", called from `{region.call_function}` ({region.call_file})"
    return (f"compiled region `{region.function}` ({where}{dynamo}){called}",)


def short_name(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1] if path else path


__all__ = [
    "DYNAMO_GRAPH",
    "KERNEL_NAME",
    "PROVENANCE",
    "SOURCE_NODES",
    "FusedLines",
    "launch_origin",
    "principal_line",
    "region_evidence",
    "short_name",
]
