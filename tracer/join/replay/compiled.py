"""CUDA-graph replays of compiled code (``mode="reduce-overhead"``) -> each replayed kernel's fused lines.

A replayed kernel has no launch of its own, and its graph was captured during warm-up, outside the
profile, so `tracer.join.graph_replay` finds no capture to align it with. But a kernel Inductor
generated keeps its name in the replay: the k-th ``triton_red_fused_..._0`` of one replay is the
k-th launch of that kernel in the generated code of the region the replay runs in (`Origin.compiled`,
set by the join). Kernels of extern launches (a GEMM library's) are placed between their named
neighbours when exactly as many extern launches sit there in the code.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tracer.join.compiled import COMPILED_GRAPH_RANGE
from tracer.join.fused_lines import FusedLines, launch_origin, short_name
from tracer.join.locate import CallLocator
from tracer.join.source_lines import SourceLines
from tracer.load.compiled_sidecars import compiled_sources
from tracer.model.compiled import CompiledGraph, GraphLaunch
from tracer.model.events import Trace
from tracer.model.origin import Attributions, Frame

_INDUCTOR_KERNELS = ("triton_", "cpp_fused", "cpp_")
BY_NEIGHBOURS = 0.8  # confidence factor for an extern kernel placed between named neighbours


def attribute_compiled_replays(
    trace: Trace, attributions: Attributions, source_roots: Sequence[str | Path] = ()
) -> int:
    """Give replayed kernels of compiled code their launch's fused lines (in place); returns how many."""
    groups: dict[int, list[int]] = defaultdict(list)
    table = trace.events
    for i, (row, origin_id) in enumerate(zip(attributions.gpu_rows, attributions.origin_ids)):
        origin = attributions.origins[origin_id]
        if origin.replay and origin.compiled is not None and origin.file is None:
            groups[table.correlation[row]].append(i)
    if not groups:
        return 0
    sources = compiled_sources(trace.meta.path)
    source = SourceLines(source_roots)
    lines = FusedLines(trace, source, CallLocator(source))
    index = {origin: i for i, origin in enumerate(attributions.origins)}
    placed = placed_ns = total_ns = 0
    for members in groups.values():
        members.sort(key=lambda i: table.ts_ns[attributions.gpu_rows[i]])
        total_ns += sum(table.dur_ns[attributions.gpu_rows[i]] for i in members)
        base = attributions.origins[attributions.origin_ids[members[0]]]
        region = base.compiled
        assert region is not None
        names = [table.name[attributions.gpu_rows[i]] for i in members]
        graph = _graph(sources, region.graph) or _graph_from_replay(region.graph, names)
        if graph is None:
            continue
        function = (
            Frame(region.file, region.function, region.def_line) if region.file and region.function else None
        )
        for i, (at, sure) in zip(members, place_replayed(names, graph.launches)):
            if at is None:
                continue
            launch = graph.launches[at]
            found = lines.find(graph, launch, function)
            label = launch.handle or launch.kernel
            how = "by its name" if sure == 1.0 else "between its named neighbours"
            base_origin = replace(attributions.origins[attributions.origin_ids[i]], evidence=())
            origin = launch_origin(base_origin, graph, launch, region, found, label, (), sure)
            note = (
                f"replayed from a CUDA graph of {short_name(graph.module)}: matched to launch {label} {how}"
            )
            origin = replace(origin, replay=True, evidence=(note, *origin.evidence))
            found_id = index.get(origin)
            if found_id is None:
                found_id = index[origin] = len(attributions.origins)
                attributions.origins.append(origin)
            attributions.origin_ids[i] = found_id
            if origin.file is not None:
                placed += 1
                placed_ns += table.dur_ns[attributions.gpu_rows[i]]
    if placed:
        trace.notes.append(
            f"CUDA graphs of compiled code: {placed} replayed kernel(s), {placed_ns / total_ns:.0%} of their time, "
            "attributed to their fused lines by kernel name (no capture needed)"
        )
    return placed


def place_replayed(names: Sequence[str], launches: Sequence[GraphLaunch]) -> list[tuple[int | None, float]]:
    """For each replayed kernel (in replay order): (index of its launch in the code, confidence factor)."""
    by_name: dict[str, list[int]] = defaultdict(list)
    for i, launch in enumerate(launches):
        if not launch.kernel.startswith(("extern_kernels.", "torch.ops.", "aten.")):
            by_name[launch.op_name].append(i)
    seen: dict[str, int] = defaultdict(int)
    out: list[tuple[int | None, float]] = []
    for name in names:
        same = by_name.get(name)
        if same and seen[name] < len(same):
            out.append((same[seen[name]], 1.0))
            seen[name] += 1
        else:
            out.append((None, 0.0))
    # Unnamed kernels between two placed ones: the extern launches between them in the code.
    k = 0
    while k < len(out):
        if out[k][0] is not None:
            k += 1
            continue
        end = k
        while end < len(out) and out[end][0] is None:
            end += 1
        before = next((at for j in range(k - 1, -1, -1) if (at := out[j][0]) is not None), -1)
        after = next((at for j in range(end, len(out)) if (at := out[j][0]) is not None), len(launches))
        extern = [
            j
            for j in range(before + 1, after)
            if launches[j].kernel.startswith(("extern_kernels.", "torch.ops.", "aten."))
        ]
        if len(extern) == 1:
            for j in range(k, end):
                out[j] = (extern[0], BY_NEIGHBOURS)
        k = end
    return out


def _graph_from_replay(module: str, names: Sequence[str]) -> CompiledGraph | None:
    """No record of the graph: the kernels Inductor generated, by their names, as the replay ran them."""
    kernels = [n for n in dict.fromkeys(names) if n.startswith(_INDUCTOR_KERNELS)]
    if not kernels:
        return None
    launches = tuple(GraphLaunch(kernel=n, op_name=n) for n in names if n.startswith(_INDUCTOR_KERNELS))
    return CompiledGraph(module=module, launches=launches, read_from="the replayed kernels' names")


def _graph(sources, name: str) -> CompiledGraph | None:
    match = COMPILED_GRAPH_RANGE.match(f"## Call {name} ##")
    if match is not None:
        return sources.by_key(match[1])
    return sources.by_module(name)


__all__ = ["attribute_compiled_replays", "place_replayed"]
