"""Kernels of torch.compile'd code -> the user lines each fused, the compiled region and the line calling it.

A kernel Inductor generated is launched from its generated module's ``call``
(``/tmp/torchinductor_u/ti/ctif....py(106): call``), or, without stacks, inside a
``## Call CompiledFxGraph <key> ##`` range: no user line is on the way. `CompiledKernels` is the
join's hook for them (`OriginBuilder._build` asks `launched_by`, then `origin`):
- the graph: the structured trace or generated module that `CompiledSources` finds for the ``call``
  frame's module (or the range's FX graph key), beside the trace or on this machine;
- the launch: the kernel's launching op (the Triton kernel's own op, ``aten::mm`` of
  ``extern_kernels.mm``, ``graph_0_cpp_...`` of a C++ kernel) is the k-th of its name in this run of
  ``call``, so it is the k-th launch of that name in the generated code;
- what it fused: `tracer.join.fused_lines` (Inductor's provenance first);
- the region: the compiled function's frame (the user frame the generated code runs under) and the
  line that called it (the user frame above Dynamo's: CallFrom, else the alignment of its run).
A CUDA-graph replay of compiled code gets the region here and its lines in `attribute_compiled_replays`
(`tracer.join.replay.compiled`), by kernel name, after the join.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from tracer.join.calls import CallOrder, call_from_line
from tracer.join.frame_names import frame_names
from tracer.join.frames import is_library_file, is_user_frame, parse_frame
from tracer.join.fused_lines import FusedLines, launch_origin, region_evidence, short_name
from tracer.join.locate import CallLocator
from tracer.join.source_lines import SourceLines
from tracer.join.tokens import PYTHON, Token
from tracer.load.compiled_sidecars import CompiledSources, compiled_sources, is_generated_module
from tracer.model.compiled import CompiledGraph, GraphLaunch
from tracer.model.events import NONE, Cat, Trace
from tracer.model.origin import CompiledRegion, Frame, Origin

COMPILED_GRAPH_RANGE = re.compile(r"^## Call CompiledFxGraph (\w+) ##$")
_REGION_OP = re.compile(r"^Torch-Compiled Region: (\S+)")
_OWN_PACKAGE = str(Path(__file__).resolve().parents[1]).replace("\\", "/") + "/"
_PLUMBING_OPS = ("Torch-Compiled Region", "CompiledFunction", "TorchDynamo", "AOTDispatcher", "Pregraph")
_CPP_OP = re.compile(r"^graph_\d+_(cpp_\w+)$")  # C++ kernels, with cpp.enable_kernel_profile
INPUT_COPY = 0.9  # a CUDA-graph input copy, put on the line that called the region
MISCOUNTED = 0.7
CALL_LINE_CONFIDENCE = 0.9  # the region's call line is named only when its alignment is exact  # confidence factor when a run launched a kernel a different number of times than its code


class CompiledKernels:
    """Origins of kernels launched by Inductor-generated code (one per trace, owned by the join)."""

    def __init__(self, trace: Trace, source: SourceLines, locator: CallLocator) -> None:
        self.trace = trace
        self.source = source
        self.locator = locator
        self.lines = FusedLines(trace, source, locator)
        self._sources: CompiledSources | None = None
        self._ran: bool | None = None
        self._calls: CallOrder | None = None
        self._ops_by_name: dict[str, list[int]] | None = None
        self._spans: dict[tuple[int, str], list[int]] = {}
        self._from_trace: dict[str, CompiledGraph | None] = {}

    @property
    def sources(self) -> CompiledSources:
        if self._sources is None:
            self._sources = compiled_sources(self.trace.meta.path)
        return self._sources

    def ran_compiled_code(self) -> bool:
        """Whether the trace ran Inductor-generated code (its frames or its ranges name it)."""
        if self._ran is None:
            from tracer.join.columns import column, rows_where

            table = self.trace.events
            files = (parse_frame(name).file for name in frame_names(table).distinct)
            ranges = {table.name[r] for r in rows_where(column(table.cat), (Cat.USER_ANNOTATION,)).tolist()}
            self._ran = any(is_generated_module(f) for f in files) or any(
                COMPILED_GRAPH_RANGE.match(name) for name in ranges
            )
        return self._ran

    def launched_by(self, join, anchor: int, user: int, ranges: tuple[str, ...], replay: bool) -> bool:
        """Whether a launch context is compiled code: its innermost user frame is a generated
        module, or (no user frame) it ran inside a ``## Call CompiledFxGraph ##`` range."""
        if not self.ran_compiled_code():
            return False
        if replay:
            user = self._replay_user(join, anchor)
        if user != NONE:
            return is_generated_module(parse_frame(join.table.name[user]).file)
        return any(COMPILED_GRAPH_RANGE.match(name) for name in ranges)

    # -- the origin -----------------------------------------------------------------------------------
    def origin(self, join, anchor: int, base: Origin, user: int, replay: bool = False) -> Origin:
        """The Origin of a kernel whose launching op `anchor` ran in generated code (frame `user`,
        or NONE without frames); for a CUDA-graph replay (`anchor` the graph launch), the region only."""
        table = join.table
        if replay:
            user = self._replay_user(join, anchor)
        graph, span = self._graph_of(join, anchor, user, base.ranges)
        region = self._region(join, user, graph, base)
        where = f"Inductor-generated code ({short_name(region.graph)})"
        if replay:
            return replace(
                base,
                replay=True,
                compiled=region,
                evidence=(f"replayed from a CUDA graph of {where} ({table.name[anchor]})", *region_evidence(region)),
            )  # fmt: skip
        if _copies_graph_inputs(base) and region.call_line is not None:
            return replace(
                base,
                file=region.call_file,
                line=region.call_line,
                source=region.call_source,
                confidence=INPUT_COPY,
                compiled=region,
                evidence=(
                    (
                        "CUDA graph trees copied the inputs of the compiled region into its graph's static "
                        "buffers: the inputs come from the line that called the region"
                    ),
                    *region_evidence(region),
                ),
            )
        problems = tuple(self.sources.problems)
        launch_op = self._launch_op(join, anchor, graph) if graph is not None else NONE
        if graph is not None and launch_op == NONE:  # a stale module, or another compile's
            problems += (
                f"{short_name(graph.read_from)} makes no launch of this kernel (stale, or another compile's): not used",
            )
            graph = None
        if graph is None:
            graph = self._graph_from_trace(join, span, region.graph)
            launch_op = self._launch_op(join, anchor, graph) if graph is not None else NONE
        if graph is None or launch_op == NONE:
            why = f"launched by {where}, by none of the launches its code makes"
            return replace(base, compiled=region, evidence=(why, *problems, *region_evidence(region)))
        name = op_launch_name(table.name[launch_op])
        rows = self._same_launches(join, span, name)
        same = [launch for launch in graph.launches if launch.op_name == name]
        k = min(rows.index(launch_op) if launch_op in rows else 0, len(same) - 1)
        notes: tuple[str, ...] = problems
        penalty = 1.0
        if len(rows) != len(same):
            notes += (
                f"this run launched {name} {len(rows)} time(s), the generated code {len(same)}: took the {k + 1}th",
            )
            penalty = MISCOUNTED
        launch = same[k]
        found = self.lines.find(graph, launch, self._compiled_frame(join, user))
        label = launch.handle or (
            f"{launch.kernel} (launch {k + 1} of {len(same)})" if len(same) > 1 else launch.kernel
        )
        return launch_origin(base, graph, launch, region, found, label, notes, penalty)

    # -- which graph, which launch --------------------------------------------------------------------
    @staticmethod
    def _replay_user(join, anchor: int) -> int:
        """The user frame around a graph launch (the join asks for none: replays name no line)."""
        frame = join.innermost_frame[anchor] if anchor != NONE else NONE
        return join.user_call(anchor, frame)[0] if frame != NONE else NONE

    def _graph_of(self, join, anchor: int, user: int, ranges) -> tuple[CompiledGraph | None, int]:
        """(the graph, the row whose span is one run of it: the ``call`` frame or the range)."""
        table = join.table
        if user != NONE:
            return self.sources.by_module(parse_frame(table.name[user]).file), user
        cur = join.op_parents[anchor] if anchor != NONE else NONE
        while cur != NONE:
            if table.cat[cur] == Cat.USER_ANNOTATION:
                match = COMPILED_GRAPH_RANGE.match(table.name[cur])
                if match is not None:
                    return self.sources.by_key(match[1]), cur
            cur = join.op_parents[cur]
        return None, NONE

    def _graph_from_trace(self, join, span: int, module: str) -> CompiledGraph | None:
        """No record of the graph: its launches as one run of ``call`` shows them (the ops run directly
        in it, in order), named by their kernels (a Triton kernel's own op, ``aten::mm``)."""
        if module in self._from_trace or span == NONE:
            return self._from_trace.get(module)
        table = join.table
        launches = []
        for row in self._ops_in(join, span):
            parent = join.op_parents[row]
            while parent != NONE and table.cat[parent] != Cat.CPU_OP:
                parent = join.op_parents[parent]
            if parent != NONE and not table.name[parent].startswith(_PLUMBING_OPS):
                continue  # inside another launch
            name = op_launch_name(table.name[row])
            if name.startswith(_PLUMBING_OPS):
                continue
            kernel = f"extern_kernels.{name[6:]}" if name.startswith("aten::") else name
            launches.append(GraphLaunch(kernel=kernel, op_name=name))
        graph = CompiledGraph(module=module, launches=tuple(launches), read_from="this trace's run of `call`")
        self._from_trace[module] = graph if launches else None
        return self._from_trace[module]

    def _ops_in(self, join, span: int) -> list[int]:
        """The CPU ops on the span row's thread inside its span, by start."""
        table = join.table
        thread = (table.pid[span], table.tid[span])
        start, end = table.ts_ns[span], table.end_ns(span)
        rows = [r for rows in self._ops().values() for r in rows
                if (table.pid[r], table.tid[r]) == thread and start <= table.ts_ns[r] <= end]  # fmt: skip
        return sorted(rows, key=lambda r: table.ts_ns[r])

    def _launch_op(self, join, anchor: int, graph: CompiledGraph) -> int:
        """The op at or above `anchor` that is one of the graph's launches (NONE if none)."""
        names = graph.kernel_names()
        table = join.table
        cur = anchor
        while cur != NONE:
            if table.cat[cur] == Cat.CPU_OP and op_launch_name(table.name[cur]) in names:
                return cur
            cur = join.op_parents[cur]
        return NONE

    def _same_launches(self, join, span: int, name: str) -> list[int]:
        """Ops launching `name` on the span row's thread inside its span, by start."""
        key = (span, name)
        found = self._spans.get(key)
        if found is not None:
            return found
        table = join.table
        found = []
        if span != NONE:
            thread = (table.pid[span], table.tid[span])
            rows = [r for r in self._ops().get(name, ()) if (table.pid[r], table.tid[r]) == thread]
            rows.sort(key=lambda r: table.ts_ns[r])
            starts = [table.ts_ns[r] for r in rows]
            found = rows[bisect_left(starts, table.ts_ns[span]) : bisect_right(starts, table.end_ns(span))]
        self._spans[key] = found
        return found

    def _ops(self) -> dict[str, list[int]]:
        """CPU op rows by the launch their name stands for (built once)."""
        if self._ops_by_name is None:
            from tracer.join.columns import column, rows_where

            table = self.trace.events
            by_name: dict[str, list[int]] = defaultdict(list)
            for row in rows_where(column(table.cat), (Cat.CPU_OP,)).tolist():
                by_name[op_launch_name(table.name[row])].append(row)
            self._ops_by_name = by_name
        return self._ops_by_name

    # -- the region -----------------------------------------------------------------------------------
    def _compiled_row(self, join, user: int) -> int:
        """The compiled function's frame: the nearest user frame above the generated ``call``."""
        if user == NONE:
            return NONE
        names, parents = join.table.name, join.frame_parents
        cur = parents[user]
        while cur != NONE and not (
            is_user_frame(names[cur]) and not is_generated_module(parse_frame(names[cur]).file)
        ):
            cur = parents[cur]
        return cur

    def _compiled_frame(self, join, user: int) -> Frame | None:
        row = self._compiled_row(join, user)
        return parse_frame(join.table.name[row]) if row != NONE else None

    def _region(self, join, user: int, graph: CompiledGraph | None, base: Origin) -> CompiledRegion:
        table = join.table
        compile_id = next((m[1] for m in map(_REGION_OP.match, base.ops) if m is not None), None)
        module = parse_frame(table.name[user]).file if user != NONE else (graph.module if graph else "")
        if not module:
            module = next((r.removeprefix("## Call ").removesuffix(" ##") for r in base.ranges
                           if COMPILED_GRAPH_RANGE.match(r)), "compiled graph")  # fmt: skip
        region = CompiledRegion(graph=module, compile_id=compile_id or (graph.compile_id if graph else None))
        compiled = self._compiled_row(join, user)
        if compiled == NONE:  # no frames: what Dynamo recorded when it compiled the function
            return self._recorded_region(region, graph)
        frame = parse_frame(table.name[compiled])
        region = replace(region, function=frame.function, file=frame.file, def_line=frame.def_line)
        caller, child = self._caller(join, compiled)
        if caller == NONE:
            return region
        caller_frame = parse_frame(table.name[caller])
        line = self._call_line(join, caller, child, caller_frame, frame.function)
        if line is None and graph is not None:  # where Dynamo compiled it from, if the same function
            line = next((f.line for f in graph.compiled_from[:-1] if f.function == caller_frame.function
                         and self.lines.display_file(f.file) == caller_frame.file), None)  # fmt: skip
        text = self.source.line(caller_frame.file, line) if line is not None else None
        return replace(
            region,
            call_file=caller_frame.file,
            call_function=caller_frame.function,
            call_line=line,
            call_source=text,
        )

    def _recorded_region(self, region: CompiledRegion, graph: CompiledGraph | None) -> CompiledRegion:
        if graph is None or not graph.function:
            return region
        callers = [
            f for f in graph.compiled_from[:-1] if not is_library_file(f.file) and not _is_ours(f.file)
        ]
        caller = callers[-1] if callers else None
        return replace(
            region,
            function=graph.function,
            file=self.lines.display_file(graph.file) if graph.file else None,
            def_line=graph.def_line,
            call_file=self.lines.display_file(caller.file) if caller else None,
            call_function=caller.function if caller else None,
            call_line=caller.line if caller else None,
            call_source=(caller.code or None) if caller else None,
            call_at_compile=caller is not None,
        )

    def _caller(self, join, compiled: int) -> tuple[int, int]:
        """(the user frame that called the compiled function or module, its child on the way down)."""
        names, parents = join.table.name, join.frame_parents
        child, cur = compiled, parents[compiled]
        while cur != NONE and not is_user_frame(names[cur]):
            child, cur = cur, parents[cur]
        return cur, child

    def _call_line(self, join, caller: int, child: int, frame: Frame, compiled: str) -> int | None:
        """The line in `caller` that made call `child`: CallFrom, else the alignment of its run.

        Dynamo's wrapper (``eval_frame.py: _fn``) is torch's own frame, which the alignment may leave
        unexplained; here it stands for the compiled function `compiled`, a call of user code."""
        if join.use_call_from:
            line = call_from_line(join.table, child, caller)
            if line is not None:
                return line
        if self._calls is None:
            self._calls = CallOrder(join)
        sequence, place = self._calls.run_of(caller, child)
        if place < 0:
            return None
        tokens = self._calls.tokens[sequence]
        wrapper = tokens[place]
        if wrapper.kind == PYTHON and wrapper.noise:  # every call of the wrapper in the run
            tokens = tuple(Token(PYTHON, compiled, user=True) if t == wrapper else t for t in tokens)
        choice = self.locator.locate(frame, tokens, place)
        if choice is None or choice.point is None or choice.confidence < CALL_LINE_CONFIDENCE:
            return None  # a frame already running when profiling began often aligns only loosely
        return choice.point.line


def _copies_graph_inputs(base: Origin) -> bool:
    """A copy CUDA graph trees make of a region's inputs before a replay (not a launch of the graph)."""
    return (
        bool(base.ops)
        and "copy" in base.ops[-1]
        and any(f.file.endswith("cudagraph_trees.py") and "copy_inputs" in f.function for f in base.frames)
    )


def _is_ours(file: str) -> bool:
    """kerneltrace's own frames (the step-function wrapper of `kerneltrace profile`)."""
    return file.replace("\\", "/").startswith(_OWN_PACKAGE)


def op_launch_name(name: str) -> str:
    """The launch a profiler op name stands for (C++ kernels are recorded as ``graph_0_cpp_...``)."""
    match = _CPP_OP.match(name)
    return match[1] if match is not None else name


__all__ = ["COMPILED_GRAPH_RANGE", "CompiledKernels", "GraphLaunch", "op_launch_name"]
