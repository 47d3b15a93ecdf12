"""What Inductor says about a torch.compile'd graph: its kernel launches, their source nodes and lines.

Read by `tracer.load.inductor` from Inductor's structured trace (``TORCH_TRACE``) or from the
generated module itself; joined to a trace's kernels by `tracer.join.compiled`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StackFrame:
    """One frame of a user stack trace Inductor recorded for an FX node: ``File "x.py", line 5, in f``."""

    file: str
    line: int
    function: str
    code: str = ""


@dataclass(frozen=True)
class SourceNode:
    """A node of Dynamo's graph (a "source node" in Inductor's comments): its name, op and user line."""

    name: str  # "to", "y", "hidden_states_1"
    op: str  # what it computes: "to", "mul", "silu", "linear"
    file: str | None = None
    line: int | None = None
    function: str | None = None
    code: str | None = None  # the user line's text, as Dynamo recorded it


@dataclass(frozen=True)
class GraphLaunch:
    """One kernel launch in the generated ``call`` function, in launch order."""

    kernel: str  # as the generated code names it: "triton_poi_fused_mul_0", "extern_kernels.mm", "cpp_fused_add_0"
    op_name: str  # the profiler's name for its launching op: the kernel's own name, "aten::mm", ...
    handle: str = ""  # Inductor's provenance handle "triton_poi_fused_mul_0:3" (provenance tracking on)
    source_nodes: tuple[str, ...] = ()  # "Topologically Sorted Source Nodes", or from the node mappings
    aten: tuple[str, ...] = ()  # "Original ATen: [aten._to_copy, aten.mul]"
    stacks: tuple[tuple[StackFrame, ...], ...] = ()  # provenance: the user stacks of its fused nodes
    arguments: tuple[tuple[str, str], ...] = ()  # the kernel's signature: ("in_ptr0", "*bf16"), ...


@dataclass
class CompiledGraph:
    """One graph Inductor compiled: its generated module and every kernel its ``call`` launches."""

    module: str  # the generated module's path (the file of the ``call`` frame in a trace)
    launches: tuple[GraphLaunch, ...] = ()
    nodes: dict[str, SourceNode] = field(default_factory=dict)  # Dynamo's graph, by node name
    fx_key: str | None = None  # FX graph cache key: the trace's "## Call CompiledFxGraph <key> ##"
    compile_id: str | None = None  # "0/0"
    function: str | None = None  # the compiled function (Dynamo's co_name, co_filename, co_firstlineno)
    file: str | None = None
    def_line: int | None = None
    compiled_from: tuple[StackFrame, ...] = ()  # where Dynamo first compiled it (the user stack)
    read_from: str = ""  # the file this was read from
    has_provenance: bool = False  # Inductor's provenance artifacts (kernel stacks, node mappings)

    def kernel_names(self) -> frozenset[str]:
        return frozenset(launch.op_name for launch in self.launches)


__all__ = ["CompiledGraph", "GraphLaunch", "SourceNode", "StackFrame"]
