"""Read Inductor's generated code: the kernel launches of a ``call`` function, Dynamo's graph, user stacks.

The generated module (``/tmp/torchinductor_<user>/ab/cab....py``) defines each kernel and a ``call``
(or ``Runner.call``) that launches them in order. Before each launch Inductor writes where it came
from: ``# Topologically Sorted Source Nodes: [to, y, z], Original ATen: [aten._to_copy, aten.mul]``
and, with provenance tracking on, ``# [Provenance debug handles] triton_poi_fused_mul_0:1``.
Dynamo's graph (the ``dynamo_output_graph`` of a structured trace) names every source node with the
user line it came from (``# File: /x/model.py:101 in fused, code: y = x.to(torch.float32) * w``).
Everything here is text from another machine: parsed with regular expressions and `ast` only.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from tracer.model.compiled import GraphLaunch, SourceNode, StackFrame

_SOURCE_NODES = re.compile(
    r"#\s*Topologically Sorted Source Nodes: \[(.*?)\](?:, Original ATen: \[(.*?)\])?\s*$"
)
_HANDLE = re.compile(r"#\s*\[Provenance debug handles\]\s*(\S+)")
_TRITON_DEF = re.compile(r"^(\w+) = async_compile\.triton\(")
_CPP_DEF = re.compile(r"^(\w+) = async_compile\.cpp(?:_pybinding)?\((.*)$")
_TOP_FUNCTION = re.compile(r"^def (partition_\d+|call)\(")
_CALL_METHOD = re.compile(r"^(\s+)def call\(self, args\):")
_PARTITION_CALL = re.compile(r"self\.partitions\[(\d+)\]\(")
_EXTERN = re.compile(r"\bextern_kernels\.(\w+)\(")
_OPS = re.compile(r"\btorch\.ops\.(\w+)\.(\w+)(?:\.\w+)?\(")
_ATEN_ALIAS = re.compile(r"(?<![\w.])aten\.(\w+)(?:\.\w+)?\(")
_SIGNATURE = re.compile(r"'signature': \{([^}]*)\}")
_SIGNATURE_ITEM = re.compile(r"'(\w+)': '([^']*)'")
_CPP_TYPES = re.compile(r"^\[(.*?)\]")
_FILE_COMMENT = re.compile(r"^\s*# File: (.+?):(\d+) in (.+?), code: (.*)$")
_NODE = re.compile(r"^\s+(\w+)(?:: \"[^\"]*\")? = (.*)$")
_STACK_FRAME = re.compile(r'File "(.*?)", line (\d+), in (.*?)\n(?:    (.*?)\n)?')


@dataclass(frozen=True)
class GeneratedCode:
    """The launches of one generated module, in the order its ``call`` runs them."""

    launches: tuple[GraphLaunch, ...]
    kernels: frozenset[str]  # kernels the module defines (Triton, C++)


def parse_generated_code(text: str) -> GeneratedCode:
    """The kernel launches of a generated module's ``call`` (partitions spliced in where it calls them)."""
    lines = text.splitlines()
    arguments = _kernel_arguments(lines)
    bodies = _function_bodies(lines)
    call = bodies.get("call", [])
    ordered: list[GraphLaunch] = []
    for item in _launches(call, arguments):
        if isinstance(item, int):  # self.partitions[i](...)
            ordered.extend(
                g for g in _launches(bodies.get(f"partition_{item}", []), arguments) if not isinstance(g, int)
            )
        else:
            ordered.append(item)
    return GeneratedCode(tuple(ordered), frozenset(arguments))


def _kernel_arguments(lines: list[str]) -> dict[str, tuple[tuple[str, str], ...]]:
    """Kernel name -> its signature: Triton's ``'signature': {'in_ptr0': '*bf16', ...}``, or a C++
    kernel's argument types (``const float*`` is read, ``float*`` written), named ``in``/``out``."""
    found: dict[str, tuple[tuple[str, str], ...]] = {}
    current = None
    for line in lines:
        match = _TRITON_DEF.match(line)
        if match is not None:
            current = match[1]
            found[current] = ()
            continue
        match = _CPP_DEF.match(line)
        if match is not None:
            types = _CPP_TYPES.match(match[2])
            args = []
            if types is not None:
                for i, raw in enumerate(t.strip().strip("'\"") for t in types[1].split(",") if t.strip()):
                    if raw.endswith("*"):
                        args.append((f"{'in' if raw.startswith('const ') else 'out'}_ptr{i}", raw))
            found[match[1]] = tuple(args)
            current = None
            continue
        if current is not None and not found[current]:
            signature = _SIGNATURE.search(line)
            if signature is not None:
                found[current] = tuple(_SIGNATURE_ITEM.findall(signature[1]))
    return found


def _function_bodies(lines: list[str]) -> dict[str, list[str]]:
    """The bodies of the top-level ``call``/``partition_N`` functions and of ``Runner.call``."""
    bodies: dict[str, list[str]] = {}
    name, indent = None, 0
    for line in lines:
        if name is not None:
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                name = None
            else:
                bodies[name].append(line)
                continue
        match = _TOP_FUNCTION.match(line)
        if match is not None:
            name, indent = match[1], 0
            bodies[name] = []
            continue
        match = _CALL_METHOD.match(line)
        if match is not None:
            name, indent = "call", len(match[1])
            bodies[name] = []
    return bodies


def _launches(body: list[str], arguments: dict[str, tuple[tuple[str, str], ...]]):
    """Launches (and partition indexes) of one function body, in order, with the comments before each."""
    nodes: tuple[str, ...] = ()
    aten: tuple[str, ...] = ()
    handle = ""
    for line in body:
        stripped = line.strip()
        if stripped.startswith("#"):
            match = _SOURCE_NODES.search(stripped)
            if match is not None:
                nodes = tuple(n.strip() for n in match[1].split(","))
                aten = tuple(a.strip() for a in (match[2] or "").split(",") if a.strip())
            match = _HANDLE.search(stripped)
            if match is not None:
                handle = match[1]
            continue
        partition = _PARTITION_CALL.search(stripped)
        if partition is not None:
            yield int(partition[1])
            continue
        launched = _launched(stripped, arguments)
        if launched is None:
            continue
        kernel, op_name = launched
        if kernel not in arguments and nodes:
            # An extern or fallback op: its comment also names the nodes that made its inputs; the
            # op itself is the last (the value it writes).
            nodes = tuple(n for n in nodes if n)[-1:]
        yield GraphLaunch(
            kernel=kernel,
            op_name=op_name,
            handle=handle,
            source_nodes=nodes,
            aten=aten,
            arguments=arguments.get(kernel, ()),
        )
        nodes, aten, handle = (), (), ""


def _launched(statement: str, arguments: dict) -> tuple[str, str] | None:
    """(kernel as the code names it, the profiler's name for its op) for a launching statement."""
    head = statement.split("(", 1)[0]
    target = head.rsplit("=", 1)[-1].strip()
    if target.endswith(".run") and target[:-4] in arguments:
        return target[:-4], target[:-4]
    if target in arguments:  # a C++ kernel, called directly
        return target, target
    match = _EXTERN.search(statement)
    if match is not None and statement.index(match[0]) == statement.find("extern_kernels."):
        return f"extern_kernels.{match[1]}", f"aten::{match[1]}"
    match = _OPS.search(statement)
    if match is not None:
        return match[0].rstrip("("), f"{match[1]}::{match[2]}"
    match = _ATEN_ALIAS.search(statement)
    if match is not None and target.startswith("aten."):
        return match[0].rstrip("("), f"aten::{match[1]}"
    return None


def parse_dynamo_graph(text: str) -> dict[str, SourceNode]:
    """Dynamo's readable graph -> each node with its op and the user line above it (``# File: ...``)."""
    nodes: dict[str, SourceNode] = {}
    where: tuple[str, int, str, str] | None = None
    for line in text.splitlines():
        match = _FILE_COMMENT.match(line)
        if match is not None:
            where = (match[1], int(match[2]), match[3], match[4].strip())
            continue
        if line.strip().startswith(("return", "class ", "def ")) or not line.strip():
            if not line.strip():
                where = None
            continue
        match = _NODE.match(line)
        if match is None or where is None:
            continue
        name, expression = match[1], match[2].split(";  ", 1)[0]
        file, number, function, code = where
        nodes[name] = SourceNode(name, node_op(expression), file, number, function, code)
    return nodes


def node_op(expression: str) -> str:
    """What a graph node computes, from its right-hand side: ``l_x_.to(torch.float32)`` -> ``to``,
    ``to * l_w_`` -> ``mul``, ``torch.nn.functional.silu(y)`` -> ``silu``, ``x[idx]`` -> ``getitem``."""
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "?"
    if isinstance(tree, ast.Call):
        func = tree.func
        if isinstance(func, ast.Attribute):
            return func.attr
        if isinstance(func, ast.Name):
            return func.id
        return "call"
    if isinstance(tree, ast.BinOp):
        return _OPERATORS.get(type(tree.op), type(tree.op).__name__.lower())
    if isinstance(tree, ast.UnaryOp):
        return "neg" if isinstance(tree.op, ast.USub) else type(tree.op).__name__.lower()
    if isinstance(tree, ast.Subscript):
        return "getitem"
    if isinstance(tree, ast.Compare):
        return type(tree.ops[0]).__name__.lower()
    if isinstance(tree, ast.Attribute):
        return tree.attr
    return "?"


_OPERATORS = {
    ast.Mult: "mul",
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Div: "truediv",
    ast.MatMult: "matmul",
    ast.Pow: "pow",
    ast.FloorDiv: "floordiv",
    ast.Mod: "mod",
    ast.BitAnd: "and_",
    ast.BitOr: "or_",
}


def parse_stack(text: str) -> tuple[StackFrame, ...]:
    """A formatted Python stack (``File "x.py", line 5, in f\\n    code``), outermost first."""
    return tuple(
        StackFrame(file, int(line), function.strip(), (code or "").strip())
        for file, line, function, code in _STACK_FRAME.findall(text if text.endswith("\n") else text + "\n")
    )


__all__ = ["GeneratedCode", "node_op", "parse_dynamo_graph", "parse_generated_code", "parse_stack"]
