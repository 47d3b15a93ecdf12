"""Every call and tensor operator in a function's source, in the order Python evaluates them.

The static sites cover casts, copies and layout changes. For everything else a trace shows (a GEMM
from ``self.q_proj(x)``, a ``torch.rsqrt``, ``a * b``), the join finds the line by the same rule:
the k-th call of that kind in one run of the function is the k-th such call in the source.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from tracer.join.source_lines import SourceLines

# Python operators and the aten op each runs on tensors (the profiler's name for it).
BINARY_OPS: dict[type, str] = {
    ast.Mult: "aten::mul",
    ast.Add: "aten::add",
    ast.Sub: "aten::sub",
    ast.Div: "aten::div",
    ast.MatMult: "aten::matmul",
    ast.Pow: "aten::pow",
    ast.FloorDiv: "aten::floor_divide",
    ast.Mod: "aten::remainder",
    ast.BitAnd: "aten::bitwise_and",
    ast.BitOr: "aten::bitwise_or",
    ast.BitXor: "aten::bitwise_xor",
}
UNARY_OPS: dict[type, str] = {ast.USub: "aten::neg", ast.Invert: "aten::bitwise_not"}
COMPARE_OPS: dict[type, str] = {
    ast.Eq: "aten::eq",
    ast.NotEq: "aten::ne",
    ast.Lt: "aten::lt",
    ast.LtE: "aten::le",
    ast.Gt: "aten::gt",
    ast.GtE: "aten::ge",
}
# Other names the profiler gives the op of an operator (``a | b`` runs ``aten::__or__``).
OPERATOR_ALIASES: dict[str, str] = {
    "aten::__or__": "aten::bitwise_or",
    "aten::__and__": "aten::bitwise_and",
    "aten::__xor__": "aten::bitwise_xor",
    "aten::__ior__": "aten::bitwise_or_",
    "aten::__iand__": "aten::bitwise_and_",
    "aten::rsub": "aten::sub",
    "aten::true_divide": "aten::div",
    "aten::bmm": "aten::matmul",
    "aten::mm": "aten::matmul",
}
# Scalar arithmetic that runs no tensor op: shapes, sizes and lengths.
_SCALAR_CALLS = frozenset({"len", "size", "dim", "numel", "int", "float", "range", "max", "min"})


@dataclass(frozen=True)
class CallPoint:
    """One call or operator in a function: its line and the name the trace shows for it."""

    line: int
    col: int
    name: str  # "to", "q_proj", "aten::mul" (operators), "__setitem__" (subscript stores)
    module_call: bool = False  # ``self.x(...)``: maybe an nn.Module call (``nn.Module: Linear_0``)


class SourceCalls:
    """Parses files found under the source roots (once each) and lists the calls of a function."""

    def __init__(self, source: SourceLines) -> None:
        self.source = source
        self._functions: dict[str, dict[int, tuple[CallPoint, ...]] | None] = {}

    def in_function(self, file: str, def_line: int | None) -> tuple[CallPoint, ...] | None:
        """The calls of the function whose ``def`` (or first decorator) is at `def_line`; None if unknown."""
        if def_line is None:
            return None
        if file not in self._functions:
            self._functions[file] = self._index(file)
        functions = self._functions[file]
        return functions.get(def_line) if functions is not None else None

    def _index(self, file: str) -> dict[int, tuple[CallPoint, ...]] | None:
        path = self.source.find(file)
        if path is None:
            return None
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError, OSError):
            return None
        functions: dict[int, tuple[CallPoint, ...]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                calls = tuple(_calls_in(node.body))
                # The profiler names a decorated function by its first decorator's line.
                for line in {node.lineno, *(d.lineno for d in node.decorator_list[:1])}:
                    functions[line] = calls
        return functions


def _calls_in(body: list[ast.stmt]) -> Iterator[CallPoint]:
    for statement in body:
        yield from _evaluate(statement)


def _evaluate(node: ast.AST) -> Iterator[CallPoint]:
    """Yield call points in evaluation order: operands and arguments first, then the call itself."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
        return  # a nested function runs in its own frame
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            yield from _evaluate(func.value)
        elif not isinstance(func, ast.Name):
            yield from _evaluate(func)
        for argument in (*node.args, *node.keywords):
            yield from _evaluate(argument)
        name = _callee_name(func)
        if name is not None:
            yield CallPoint(node.lineno, node.col_offset, name, _is_module_call(func))
        return
    if isinstance(node, ast.BinOp):
        yield from _evaluate(node.left)
        yield from _evaluate(node.right)
        op = BINARY_OPS.get(type(node.op))
        if op is not None and not (_is_scalar(node.left) and _is_scalar(node.right)):
            if not (_is_shape_math(node.left) or _is_shape_math(node.right)):
                yield CallPoint(node.lineno, node.col_offset, op)
        return
    if isinstance(node, ast.UnaryOp):
        yield from _evaluate(node.operand)
        op = UNARY_OPS.get(type(node.op))
        if op is not None and not _is_scalar(node.operand) and not _is_shape_math(node.operand):
            yield CallPoint(node.lineno, node.col_offset, op)
        return
    if isinstance(node, ast.AugAssign):
        yield from _evaluate(node.target)
        yield from _evaluate(node.value)
        op = BINARY_OPS.get(type(node.op))
        if op is not None and not _is_shape_math(node.value):
            yield CallPoint(node.lineno, node.col_offset, op + "_")
        return
    if isinstance(node, ast.Assign):
        yield from _evaluate(node.value)
        for target in node.targets:
            yield from _store(target)
        return
    if isinstance(node, ast.Compare):
        yield from _evaluate(node.left)
        for op, right in zip(node.ops, node.comparators):
            yield from _evaluate(right)
            name = COMPARE_OPS.get(type(op))
            if name is not None and not _is_scalar(right) and not _is_shape_math(node.left):
                yield CallPoint(node.lineno, node.col_offset, name)
        return
    for child in ast.iter_child_nodes(node):
        yield from _evaluate(child)


def _store(target: ast.AST) -> Iterator[CallPoint]:
    if isinstance(target, ast.Subscript):
        yield from _evaluate(target.value)
        yield from _evaluate(target.slice)
        yield CallPoint(target.lineno, target.col_offset, "__setitem__")
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _store(element)
    elif isinstance(target, ast.Attribute):
        yield from _evaluate(target.value)


def _callee_name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Subscript):  # self.layers[i](x)
        return _callee_name(func.value)
    return None


def _is_module_call(func: ast.AST) -> bool:
    if isinstance(func, ast.Subscript):
        func = func.value
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"


def _is_scalar(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float, complex))


def _is_shape_math(node: ast.AST) -> bool:
    """Arithmetic on sizes (``x.shape[-1] // 2``, ``len(xs) * 2``) runs in Python, not as a tensor op."""
    for child in ast.walk(node):
        if isinstance(child, ast.Attribute) and child.attr in ("shape", "ndim"):
            return True
        if isinstance(child, ast.Call) and _callee_name(child.func) in _SCALAR_CALLS:
            return True
    return False
