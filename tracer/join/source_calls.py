"""Every call and tensor operator in a function's source, in the order Python evaluates them.

The static sites cover casts, copies and layout changes. For everything else a trace shows (a GEMM
from ``self.q_proj(x)``, a ``torch.rsqrt``, ``a * b``), the join finds the line by the same rule:
the k-th call of that kind in one run of the function is the k-th such call in the source. Each
call also records the ``if`` arms it sits in and whether it is in a loop, so that when a run took
some branches and not others, the branches that agree with everything else the run called can be
found (`tracer.join.branches`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from tracer.join.source_lines import SourceLines, read_source_text

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
# Ops a subscript store (``x[i] = v``) runs directly in the frame.
STORE_OPS = frozenset({"aten::index_put_", "aten::copy_", "aten::fill_", "aten::masked_fill_"})
MODULE_CALL = "<module call>"  # the source name of every ``self.x(...)`` that calls an nn.Module
# Scalar arithmetic that runs no tensor op: shapes, sizes and lengths.
_SCALAR_CALLS = frozenset({"len", "size", "dim", "numel", "int", "float", "range", "max", "min"})


@dataclass(frozen=True)
class CallPoint:
    """One call or operator in a function: its line and the name the trace shows for it."""

    line: int
    col: int
    name: str  # "to", "q_proj", "aten::mul" (operators), "__setitem__" (subscript stores)
    module_call: bool = False  # ``self.x(...)`` where x is no method of the class: an nn.Module call
    arms: tuple[int, ...] = ()  # the if-arms it sits in (each arm id belongs to one if)
    in_loop: bool = False

    @property
    def key(self) -> str:
        """The name the run's observed calls are counted under (`tracer.join.calls.source_key`)."""
        return MODULE_CALL if self.module_call else self.name


@dataclass(frozen=True)
class FunctionCalls:
    """The calls of one function, and its if-statements: ``branch_of[arm] = (if id, arm index)``."""

    points: tuple[CallPoint, ...]
    branch_of: dict[int, tuple[int, int]] = field(default_factory=dict)


class SourceCalls:
    """Parses files found under the source roots (once each) and lists the calls of a function."""

    def __init__(self, source: SourceLines) -> None:
        self.source = source
        self._functions: dict[str, dict[int, FunctionCalls] | None] = {}

    def in_function(self, file: str, def_line: int | None) -> FunctionCalls | None:
        """The calls of the function whose ``def`` (or first decorator) is at `def_line`; None if unknown."""
        if def_line is None:
            return None
        if file not in self._functions:
            self._functions[file] = self._index(file)
        functions = self._functions[file]
        return functions.get(def_line) if functions is not None else None

    def _index(self, file: str) -> dict[int, FunctionCalls] | None:
        path = self.source.find(file)
        if path is None:
            return None
        text = read_source_text(path)
        if text is None:
            return None
        try:
            return self._functions_of(ast.parse(text))
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # nested too deeply for the parser
            return None

    def _functions_of(self, tree: ast.Module) -> dict[int, FunctionCalls]:
        functions: dict[int, FunctionCalls] = {}
        for owner in ast.walk(tree):
            methods = _method_names(owner) if isinstance(owner, ast.ClassDef) else frozenset()
            body = owner.body if isinstance(owner, (ast.ClassDef, ast.Module)) else []
            for node in body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    walker = _Walker(methods)
                    points = tuple(walker.block(node.body))
                    calls = FunctionCalls(points, walker.branch_of)
                    # The profiler names a decorated function by its first decorator's line.
                    for line in {node.lineno, *(d.lineno for d in node.decorator_list[:1])}:
                        functions[line] = calls
        # Functions nested in functions: plain walk (their own frames name their def lines).
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno not in functions:
                walker = _Walker(frozenset())
                calls = FunctionCalls(tuple(walker.block(node.body)), walker.branch_of)
                for line in {node.lineno, *(d.lineno for d in node.decorator_list[:1])}:
                    functions.setdefault(line, calls)
        return functions


def _method_names(node: ast.ClassDef) -> frozenset[str]:
    return frozenset(n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


class _Walker:
    """Yields `CallPoint`s in evaluation order, tracking the if-arms and loops around them."""

    def __init__(self, methods: frozenset[str]) -> None:
        self.methods = methods
        self.arms: tuple[int, ...] = ()
        self.loops = 0
        self.branch_of: dict[int, tuple[int, int]] = {}
        self._arms_of_if: dict[int, tuple[int, int]] = {}

    def _branch(self) -> tuple[int, int]:
        if_id = len(self.branch_of)
        body, orelse = 2 * if_id, 2 * if_id + 1
        self.branch_of[body] = (if_id, 0)
        self.branch_of[orelse] = (if_id, 1)
        return body, orelse

    def _point(self, node: ast.AST, name: str, module_call: bool = False) -> CallPoint:
        return CallPoint(node.lineno, node.col_offset, name, module_call, self.arms, self.loops > 0)

    def _under(self, arm: int, nodes: Sequence[ast.AST]) -> Iterator[CallPoint]:
        saved = self.arms
        self.arms = (*saved, arm)
        for node in nodes:
            yield from self.visit(node)
        self.arms = saved

    def block(self, statements: Sequence[ast.stmt]) -> Iterator[CallPoint]:
        saved = self.arms
        for statement in statements:
            yield from self.visit(statement)
            if isinstance(statement, ast.If):
                # `if c: return` leaves the rest of the block to the runs that took the other arm.
                body, orelse = self._arms_of_if[id(statement)]
                if _ends(statement.body) and not _ends(statement.orelse):
                    self.arms = (*self.arms, orelse)
                elif _ends(statement.orelse) and not _ends(statement.body):
                    self.arms = (*self.arms, body)
        self.arms = saved

    def visit(self, node: ast.AST) -> Iterator[CallPoint]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return  # a nested function runs in its own frame
        if isinstance(node, ast.If):
            yield from self.visit(node.test)
            body, orelse = self._arms_of_if[id(node)] = self._branch()
            saved = self.arms
            self.arms = (*saved, body)
            yield from self.block(node.body)
            self.arms = (*saved, orelse)
            yield from self.block(node.orelse)
            self.arms = saved
            return
        if isinstance(node, ast.IfExp):
            yield from self.visit(node.test)
            body, orelse = self._branch()
            yield from self._under(body, [node.body])
            yield from self._under(orelse, [node.orelse])
            return
        if isinstance(node, ast.BoolOp):  # `a and b`: b runs only sometimes
            yield from self.visit(node.values[0])
            for value in node.values[1:]:
                taken, _ = self._branch()
                yield from self._under(taken, [value])
            return
        if isinstance(node, ast.Try):
            yield from self.block(node.body)
            for handler in node.handlers:
                taken, _ = self._branch()
                saved = self.arms
                self.arms = (*saved, taken)
                yield from self.block(handler.body)
                self.arms = saved
            yield from self.block(node.orelse)
            yield from self.block(node.finalbody)
            return
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            if not isinstance(node, ast.While):
                yield from self.visit(node.iter)  # evaluated once, before the loop
            self.loops += 1
            if isinstance(node, ast.While):
                yield from self.visit(node.test)
            yield from self.block(node.body)
            self.loops -= 1
            yield from self.block(node.orelse)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            self.loops += 1
            for child in ast.iter_child_nodes(node):
                yield from self.visit(child)
            self.loops -= 1
            return
        if isinstance(node, ast.Call):
            yield from self._call(node)
            return
        if isinstance(node, ast.BinOp):
            yield from self.visit(node.left)
            yield from self.visit(node.right)
            op = BINARY_OPS.get(type(node.op))
            scalar = _is_scalar(node.left) and _is_scalar(node.right)
            if (
                op is not None
                and not scalar
                and not (_is_shape_math(node.left) or _is_shape_math(node.right))
            ):
                yield self._point(node, op)
            return
        if isinstance(node, ast.UnaryOp):
            yield from self.visit(node.operand)
            op = UNARY_OPS.get(type(node.op))
            if op is not None and not _is_scalar(node.operand) and not _is_shape_math(node.operand):
                yield self._point(node, op)
            return
        if isinstance(node, ast.AugAssign):
            yield from self.visit(node.target)
            yield from self.visit(node.value)
            op = BINARY_OPS.get(type(node.op))
            if op is not None and not _is_shape_math(node.value):
                yield self._point(node, op + "_")
            return
        if isinstance(node, ast.Assign):
            yield from self.visit(node.value)
            for target in node.targets:
                yield from self._store(target)
            return
        if isinstance(node, ast.Compare):
            yield from self.visit(node.left)
            for op, right in zip(node.ops, node.comparators):
                yield from self.visit(right)
                name = COMPARE_OPS.get(type(op))
                if name is not None and not _is_scalar(right) and not _is_shape_math(node.left):
                    yield self._point(node, name)
            return
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            yield from self.visit(node.value)
            yield from self.visit(node.slice)
            if _is_tensor_index(node.slice):
                yield self._point(node, "__getitem__")
            return
        for child in ast.iter_child_nodes(node):
            yield from self.visit(child)

    def _call(self, node: ast.Call) -> Iterator[CallPoint]:
        func = node.func
        if isinstance(func, ast.Attribute):
            yield from self.visit(func.value)
        elif not isinstance(func, ast.Name):
            yield from self.visit(func)
        for argument in (*node.args, *node.keywords):
            yield from self.visit(argument)
        name = _callee_name(func)
        if name is not None:
            yield self._point(node, name, _is_self_call(func) and name not in self.methods)

    def _store(self, target: ast.AST) -> Iterator[CallPoint]:
        if isinstance(target, ast.Subscript):
            yield from self.visit(target.value)
            yield from self.visit(target.slice)
            yield self._point(target, "__setitem__")
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                yield from self._store(element)
        elif isinstance(target, ast.Attribute):
            yield from self.visit(target.value)


def _ends(body: Sequence[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def _callee_name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Subscript):  # self.layers[i](x)
        return _callee_name(func.value)
    return None


def _is_self_call(func: ast.AST) -> bool:
    if isinstance(func, ast.Subscript):
        func = func.value
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"


def _is_tensor_index(index: ast.AST) -> bool:
    """``x[idx]`` with a tensor-like index (a name, call, attribute) runs aten::index; slices do not."""
    if isinstance(index, ast.Tuple):
        return any(_is_tensor_index(e) for e in index.elts)
    return isinstance(index, (ast.Name, ast.Call, ast.Attribute, ast.Subscript)) and not _is_shape_math(index)


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
