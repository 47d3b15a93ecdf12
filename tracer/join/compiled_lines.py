"""Place an Inductor kernel's source nodes (or the ops its name spells) on the compiled function's lines.

Used when no structured trace says where each node came from: only the generated module (its
``Topologically Sorted Source Nodes: [to, y, z, to_1]``) or only the kernel's name
(``triton_poi_fused__to_copy_mul_silu_0``). Dynamo names a graph node after the variable it is
assigned to (``y``, ``hidden_states_1``) or else after what it calls (``to``, ``pow_1``, ``mul_2``),
numbering repeats; so a name is a variable's k-th tensor assignment, or the k-th call of that op,
in the function's evaluation order (`tracer.join.program`). A kernel name only lists its ATen ops:
the function's call points are dealt out in evaluation order to the graph's launches, each point to
the next launch whose ops include it. Only the compiled function's own lines can be found this way
(code Dynamo inlined from other functions has no frame in the trace).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass

from tracer.join.program import (
    BY_SELF_ATTRIBUTE,
    BY_SUBSCRIPT,
    CALL,
    GETITEM,
    OPERATOR,
    SETITEM,
    CallPoint,
    Program,
)
from tracer.model.compiled import GraphLaunch

_SUFFIX = re.compile(r"^(.*?)_(\d+)$")
# Names FX never gives bare (builtins): their first node is already "pow_1".
_SHADOWING = frozenset(
    {"pow", "abs", "min", "max", "sum", "round", "float", "int", "bool", "all", "any", "len", "type"}
)
# ATen ops with underscores in their names, read whole from a kernel name (longest first).
_MULTI_WORD = sorted(
    ("_to_copy", "_unsafe_view", "_softmax", "_log_softmax", "prepare_softmax_online", "native_layer_norm",
     "native_batch_norm", "index_put", "index_select", "scalar_tensor", "masked_fill", "constant_pad_nd",
     "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
     "_scaled_dot_product_cudnn_attention", "scaled_dot_product_attention", "embedding_dense_backward",
     "native_dropout", "copy_", "new_zeros", "full_like", "zeros_like", "ones_like", "slice_scatter",
     "select_scatter", "as_strided", "logical_not", "logical_and", "bitwise_and", "bitwise_or", "where_self",
     "rsub", "fill_"),
    key=len,
    reverse=True,
)  # fmt: skip
# ATen op -> the point names that run it (calls, methods, operators), besides its own name.
_RUNS = {
    "_to_copy": ("to", "float", "half", "bfloat16", "double", "type", "int", "long", "bool", "type_as"),
    "mul": ("mul", "__mul__", "mul_"),
    "add": ("add", "add_", "__add__"),
    "sub": ("sub", "rsub", "__sub__"),
    "rsub": ("sub", "rsub"),
    "div": ("div", "truediv", "true_divide"),
    "mm": ("linear", "matmul", "mm", "__matmul__"),
    "addmm": ("linear", "add", "addmm"),
    "bmm": ("matmul", "bmm", "einsum"),
    "_softmax": ("softmax",),
    "prepare_softmax_online": ("softmax",),
    "amax": ("softmax", "max", "amax"),
    "exp": ("softmax", "exp"),
    "index": ("getitem", "index_select", "gather"),
    "embedding": ("embedding",),
    "_unsafe_view": ("view", "reshape", "flatten"),
    "clone": ("clone", "contiguous", "reshape"),
    "neg": ("neg", "sub"),
}
_MODULE_OPS = frozenset({"mm", "addmm", "bmm", "embedding", "native_layer_norm", "convolution"})


@dataclass(frozen=True)
class Placed:
    """The points a launch's nodes were placed on, as (op, point), how sure, and what did not fit."""

    points: tuple[tuple[str, CallPoint], ...]
    confidence: float
    evidence: tuple[str, ...]


def kernel_ops(kernel: str) -> tuple[str, ...]:
    """The ATen ops a kernel's name spells: ``triton_poi_fused__to_copy_mul_silu_0`` -> ``_to_copy,
    mul, silu``; ``extern_kernels.mm`` -> ``mm``; ``torch.ops.aten._foo.default`` -> ``_foo``."""
    if kernel.startswith("extern_kernels."):
        return (kernel.split(".", 1)[1],)
    if kernel.startswith(("torch.ops.", "aten.")):
        parts = kernel.split(".")
        return (
            parts[-2]
            if parts[-1] in ("default", "Tensor", "Scalar", "int", "dim") or len(parts) > 3
            else parts[-1],
        )
    _, _, fused = kernel.partition("fused_")
    fused = re.sub(r"_\d+$", "", fused)
    ops: list[str] = []
    while fused:
        fused = fused.lstrip("_") if not any(fused.startswith(w) for w in _MULTI_WORD) else fused
        word = next((w for w in _MULTI_WORD if fused.startswith(w + "_") or fused == w), None)
        if word is None:
            word, _, _ = fused.partition("_")
        ops.append(word)
        fused = fused[len(word) :].removeprefix("_")
    return tuple(op for op in ops if op)


def point_op(point: CallPoint) -> str:
    """What a call point runs, as a name: ``to``, ``mul`` (``a * b``), ``getitem``, a module's attribute."""
    if point.kind == OPERATOR:
        return point.name.removeprefix("aten::").replace("matmul", "matmul")
    if point.kind == GETITEM:
        return "getitem"
    if point.kind == SETITEM:
        return "setitem"
    return point.name


def _is_module_call(point: CallPoint) -> bool:
    return point.kind == CALL and point.callee in (BY_SELF_ATTRIBUTE, BY_SUBSCRIPT)


def runs(op: str, point: CallPoint) -> bool:
    """Whether `point` can have run ATen op `op` (a kernel name's word)."""
    name = point_op(point)
    if name == op or name in _RUNS.get(op, ()):
        return True
    return op in _MODULE_OPS and _is_module_call(point)


def align_launch(
    program: Program,
    launches: Sequence[GraphLaunch],
    index: int,
    assignments: dict[str, list[tuple[int, int]]],
) -> Placed:
    """Place launch `index` of a graph on `program`'s points: by its source-node names when it has
    them (`assignments`: variable -> the (first, last) lines of each statement assigning it), else
    by the ops of every launch's kernel name, dealt out in order."""
    launch = launches[index]
    if launch.source_nodes:
        return _by_names(program, launch.source_nodes, assignments)
    return _by_kernel_names(program, launches, index)


def _by_names(
    program: Program, names: Sequence[str], assignments: dict[str, list[tuple[int, int]]]
) -> Placed:
    points = program.points
    placed: list[tuple[str, CallPoint]] = []
    missing = []
    for name in names:
        if not name:
            continue
        match = _SUFFIX.match(name)
        base, number = (match[1], int(match[2])) if match else (name, 0)
        statements = assignments.get(base, [])
        if statements:
            first, last = statements[min(number, len(statements) - 1)]
            inside = [p for p in points if first <= p.line <= last]
            if inside:
                point = inside[-1]  # the value assigned is the statement's last call
                placed.append((point_op(point), point))
                continue
        same = [p for p in points if point_op(p) == base or (base == "linear" and _is_module_call(p))]
        if same:
            k = number - 1 if base in _SHADOWING else number
            placed.append((base, same[max(0, min(k, len(same) - 1))]))
        else:
            missing.append(name)
    total = sum(1 for n in names if n)
    found = total - len(missing)
    confidence = 0.8 * found / total if total else 0.0
    evidence: tuple[str, ...] = (f"{found} of {total} source node(s) placed by name in `{program.name}`",)
    if missing:
        evidence += (f"not in `{program.name}` (inlined from elsewhere?): {', '.join(missing)}",)
    return Placed(tuple(placed), confidence, evidence)


def _by_kernel_names(program: Program, launches: Sequence[GraphLaunch], index: int) -> Placed:
    ops = [kernel_ops(launch.kernel) for launch in launches]
    mine: list[tuple[str, CallPoint]] = []
    at = 0
    for point in program.points:
        for j in range(at, len(launches)):
            op = next((o for o in ops[j] if runs(o, point)), None)
            if op is not None:
                at = j
                if j == index:
                    mine.append((op, point))
                break
    wanted = set(ops[index])
    covered = {op for op, _ in mine}
    confidence = 0.5 * len(covered) / len(wanted) if wanted else 0.0
    evidence = (
        (
            f"the kernel's name spells {', '.join(ops[index])}; {len(covered)} of them placed on calls of "
            f"`{program.name}`, the graph's launches dealt out in order"
        ),
    )
    return Placed(tuple(mine), confidence, evidence)


def assignments_of(tree: ast.AST, def_line: int, name: str) -> dict[str, list[tuple[int, int]]]:
    """Variable -> (first, last) line of each statement assigning it, in the function at `def_line`."""
    function = next(
        (
            node
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name == name
            and def_line in (node.lineno, *(d.lineno for d in node.decorator_list[:1]))
        ),
        None,
    )
    found: dict[str, list[tuple[int, int]]] = {}
    if function is None:
        return found
    for node in ast.walk(function):
        if not isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            continue
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                found.setdefault(target.id, []).append((node.lineno, node.end_lineno or node.lineno))
    for spans in found.values():
        spans.sort()
    return found


__all__ = ["Placed", "align_launch", "assignments_of", "kernel_ops", "point_op", "runs"]
