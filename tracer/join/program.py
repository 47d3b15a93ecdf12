"""A function's calls as a small automaton: call points in evaluation order, wired by control flow.

`Program` is what the alignment (`tracer.join.align`) runs an observed run of a frame through.
Every call, operator, subscript and ``with`` in a function body becomes a `CallPoint`, in the order
Python evaluates them (receiver, then arguments, then the call; left operand, right operand, then
the operator). Each point is a *consuming* edge between two states: it explains one observed call of
the run, or is skipped (it ran but showed nothing: a scalar ``a * b``, ``int(x)``). Free edges say
how control flows: an ``if`` takes exactly one arm, ``a and b`` may skip ``b``, a loop runs zero or
more times, ``break``/``continue``/``return``/``raise`` jump, a ``try`` body may stop early at any
call and enter a handler, a ``yield`` ends a run of the frame and a later run resumes after it.

Comprehensions, generator expressions and lambdas run in frames of their own (Python 3.11 names
them ``<listcomp>``, ``<genexpr>``, ``<lambda>``); 3.12 inlines list/set/dict comprehensions into
the enclosing frame. A comprehension is therefore either one frame call or its loop inline, and
each such node also gets a program of its own (the run of its own frame).

Point lines follow CPython's ``f_lineno`` (what ``CallFrom`` and tracebacks report): a method call
whose attribute sits on a later line than its receiver is located on the attribute's line.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, cast, overload

from tracer.join.dtypes import METHOD_DTYPES, canonical_dtype

if TYPE_CHECKING:
    import numpy as np

# Point kinds.
CALL, OPERATOR, GETITEM, SETITEM, VIEWS, FRAME, ENTER, EXIT, PROPERTY = (  # noqa: RUF100
    "call",
    "operator",
    "getitem",
    "setitem",
    "views",  # the views a subscript takes before it loads or stores (slice, select, ...): any number
    "frame",
    "enter",
    "exit",
    "property",
)
ITER = "iter"  # iterating or unpacking a value: a tensor's __iter__ (unbind); nothing for a tuple
# How a call names its callee (`CallPoint.callee`).
BY_NAME = "name"  # foo(...): a function, class or alias from the module scope
BY_LOCAL = "local"  # fn(...) where fn is a parameter or local variable: any callable
BY_ATTRIBUTE = "attribute"  # obj.foo(...), torch.cat(...)
BY_SELF_ATTRIBUTE = "self_attribute"  # self.proj(...): a submodule or callable attribute
BY_SELF_METHOD = "self_method"  # self.helper(...): a method of the class
BY_SUBSCRIPT = "subscript"  # self.layers[i](...)
BY_TYPE = "type"  # int(x), range(n), super(), math.sqrt(d): a call on Python values, no op
OPAQUE = "opaque"  # partial(...)(x), getattr(x, "to")(d): a callee only known at run time

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
    ast.LShift: "aten::bitwise_left_shift",
    ast.RShift: "aten::bitwise_right_shift",
}
# ``2.0 / x``: ``Tensor.__rtruediv__`` runs ``x.reciprocal() * 2.0`` (`_Builder.divide`)
RECIPROCAL = "aten::reciprocal"
UNARY_OPS: dict[type, str] = {ast.USub: "aten::neg", ast.Invert: "aten::bitwise_not"}
COMPARE_OPS: dict[type, str] = {
    ast.Eq: "aten::eq",
    ast.NotEq: "aten::ne",
    ast.Lt: "aten::lt",
    ast.LtE: "aten::le",
    ast.Gt: "aten::gt",
    ast.GtE: "aten::ge",
}
# Builtins and library names that are types: calling them records no Python frame.
TYPE_NAMES = frozenset(
    {
        "super",
        "range",
        "int",
        "float",
        "bool",
        "complex",
        "str",
        "bytes",
        "list",
        "tuple",
        "dict",
        "set",
        "frozenset",
        "slice",
        "enumerate",
        "zip",
        "map",
        "filter",
        "reversed",
        "object",
        "type",
        "property",
        "partial",
        "memoryview",
        "bytearray",
    }
)
# Python's exceptions: raising one runs no tensor op (``raise ValueError(f"...")``; a tensor in its
# message runs its ops in the argument, as any argument does)
EXCEPTION_NAMES = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)
# Python's builtins that read what they are given and run no tensor op (``isinstance(x, str)``,
# ``hasattr(m, "bias")``, ``len(x)``: a tensor's length is its size, no op).
NO_OP_BUILTINS = frozenset(
    {"isinstance", "issubclass", "hasattr", "getattr", "setattr", "delattr", "callable", "id", "hash"}
    | {"repr", "print", "vars", "locals", "globals", "dir", "len", "format", "chr", "ord"}
)
# Calls that convert a tensor to a Python scalar run aten::item (or is_nonzero) directly.
SCALAR_CONVERSIONS = frozenset({"int", "float", "bool", "complex"})
_COMPREHENSION_FRAMES = {
    ast.ListComp: "<listcomp>",
    ast.SetComp: "<setcomp>",
    ast.DictComp: "<dictcomp>",
    ast.GeneratorExp: "<genexpr>",
}


@dataclass(frozen=True)
class CallPoint:
    """One call, operator, subscript or ``with`` in a function, where Python evaluates it."""

    line: int
    col: int
    kind: str  # CALL, OPERATOR, GETITEM, SETITEM, FRAME, ENTER, EXIT, PROPERTY
    name: str  # the callee's name ("to", "q_proj"), the aten op of an operator, a frame name
    callee: str = ""  # for calls: how the callee is named (BY_NAME, BY_SELF_ATTRIBUTE, ...)
    aliases: tuple[str, ...] = ()  # other names the callee's frame may carry (import aliases)
    tensor_index: bool = False  # a subscript whose index may be a tensor (aten::index)
    scalar_like: bool = False  # an operator on what look like sizes or numbers: often no op at all
    views: frozenset[str] | None = None  # VIEWS: the view ops its index spells (None: any)
    dtype: str | None = None  # a cast's literal target: "torch.bfloat16" (`.to(torch.bfloat16)`, `.half()`)
    device_only: bool = False  # `.to(device)`, `.cuda()`: a move that cannot change the dtype
    bias: bool | None = None  # a call of a layer the source built with (True) or without a bias
    bias_default: bool = False  # ... unknown (a config decides), but the config's default builds one
    runs: frozenset[str] | None = None  # a call of a helper not spliced in: the ops it (and its callees) name
    # a method call's receiver, where its type may be known: ``cache.update`` "cache",
    # ``self.cache.update`` "self.cache", ``self.layers[i].update`` "self.layers[]"; else ""
    receiver: str = ""
    # a call of a local name (a parameter, a loop's item): its positional arguments' names where
    # every one is a name and there are at least two (``mask(batch_idx, head_idx, q_idx, kv_idx)``),
    # to find what a callable given as a value may be by its parameters (`callback_arguments`)
    arguments: tuple[str, ...] = ()

    @property
    def location(self) -> str:
        return f"{self.line}:{self.col}"


@dataclass
class Program:
    """States 0..n-1; ``entry`` starts a run, ``exit`` ends it. ``eps`` are free (u, v, cost) edges,
    ``consume`` are (u, v, point index) edges; ``resumes`` are states a run may also start from
    (after a ``yield``). ``free_start``: a run may start at any point (a frame that was already
    running when profiling began)."""

    name: str
    def_line: int
    points: tuple[CallPoint, ...]
    n_states: int
    entry: int
    exit: int
    eps: tuple[tuple[int, int, float], ...]
    consume: tuple[tuple[int, int, int], ...]
    resumes: tuple[int, ...] = ()
    point_end: tuple[int, ...] = field(default=())  # the state each point's edge ends in
    repeats: tuple[tuple[int, int], ...] = ()  # (state, point): the point may explain more calls there
    # states between the two ops of one operator (``2.0 / x``: its reciprocal and its mul): no part of
    # a window (a local alignment) starts or stops there, inside the window
    bound: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.points)

    @cached_property
    def flow(self) -> Flow:
        """The free edges as arrays, in the order the alignment relaxes them (built once)."""
        forward = sorted(((u, v, c) for u, v, c in self.eps if u < v), key=lambda e: e[0])
        loops = [(u, v, c) for u, v, c in self.eps if u >= v]
        return Flow(*edge_arrays(forward), *edge_arrays(loops))

    @cached_property
    def fresh(self) -> np.ndarray:
        """Per state, whether a window's part may start or stop there: not between an operator's two
        ops (`bound`); built once, as `flow` is."""
        import numpy as np

        fresh = np.ones(self.n_states, dtype=np.bool_)
        fresh[list(self.bound)] = False
        return fresh


def edge_arrays(edges: Sequence[tuple]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (u, v, cost, ...) of `edges` as three arrays: u and v as int64, cost as float64."""
    import numpy as np

    return (
        np.fromiter((e[0] for e in edges), dtype=np.int64, count=len(edges)),
        np.fromiter((e[1] for e in edges), dtype=np.int64, count=len(edges)),
        np.fromiter((e[2] for e in edges), dtype=np.float64, count=len(edges)),
    )


@dataclass(frozen=True)
class Flow:
    """A program's free edges as arrays: those that go forward (u < v), by u (a pass in this order
    settles them), and those that loop back (u >= v: loops, a ``continue``), which may need another."""

    forward_u: np.ndarray
    forward_v: np.ndarray
    forward_cost: np.ndarray
    loop_u: np.ndarray
    loop_v: np.ndarray
    loop_cost: np.ndarray


# -- building -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """What a function's body can tell about its names: the class's methods and properties, the
    module's import aliases, and the function's own locals and parameters."""

    methods: frozenset[str] = frozenset()
    properties: frozenset[str] = frozenset()
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    local_names: frozenset[str] = frozenset()
    # locals only ever holding Python numbers, and ``self.<attr>`` for attributes its class (and
    # bases of the module) only ever sets to numbers
    scalar_names: frozenset[str] = frozenset()
    # parameters that are numbers by their annotation alone (``q_idx: int``): a hint, not a proof
    # (transformers' mask functions, annotated ``int``, are called with tensors)
    hinted_names: frozenset[str] = frozenset()


class _Builder:
    """Thompson-style construction: each visitor takes the state before a node, returns the one after
    it (None when control cannot continue: after return, raise, break, continue)."""

    def __init__(self, scope: Scope, skip_cost) -> None:
        self.scope = scope
        self.skip_cost = skip_cost
        self.points: list[CallPoint] = []
        self.point_end: list[int] = []
        self.eps: list[tuple[int, int, float]] = []
        self.consume: list[tuple[int, int, int]] = []
        self.n = 0
        self.to_exit: list[int] = []
        self.loops: list[tuple[int, int]] = []  # (head, exit) of the loops around
        self.resumes: list[int] = []
        self.bound: list[int] = []  # (`Program.bound`)
        self.repeats: list[tuple[int, int]] = []
        self.raise_to: list[list[int]] = []  # per enclosing try: states an exception may leave from
        self.sizes = 0  # > 0 inside the arguments of a call taking sizes (`_SIZE_ARGUMENTS`)

    def state(self) -> int:
        self.n += 1
        return self.n - 1

    def scalar(self, node: ast.AST) -> bool:
        """Whether `node` is a Python number here (arithmetic on numbers runs no op)."""
        return _is_scalar_expression(node, self.scope.scalar_names)

    def hinted(self, *operands: ast.AST) -> bool:
        """Whether an operator on `operands`, all numbers by `scalar`, is so only by the annotations of
        the parameters it combines, and nothing else (``kv_idx <= q_idx`` of ``q_idx: int``): it may
        run an op (then a cheap one to skip, as an operator on sizes is). A literal, an attribute or
        a call among them (``layer_id - self.start_layer``, ``q_length == 1``) says a Python number."""
        hinted = self.scope.hinted_names
        return bool(hinted) and all(_only_names(operand, hinted) for operand in operands)

    def python_items(self, node: ast.AST) -> bool:
        """Whether `node` holds Python values whose subscript runs no op: a size (``x.shape[-1]``) or a
        config's value (``self.config.layer_types[i]``: `_is_config`)."""
        return is_size_value(node) or (isinstance(node, ast.Attribute) and _is_config(node.value))

    def on_sizes(self, *operands: ast.AST) -> bool:
        """Whether an operator on `operands` likely works on sizes: inside the arguments of a call
        that takes sizes or a slice's bounds (`sizes`), or on a shape (`_is_shape_math`)."""
        return self.sizes > 0 or any(_is_shape_math(operand) for operand in operands)

    def edge(self, u: int, v: int, cost: float = 0.0) -> None:
        self.eps.append((u, v, cost))

    def point(self, s: int, point: CallPoint, skippable: bool = True) -> int:
        t = self.state()
        index = len(self.points)
        self.points.append(point)
        self.point_end.append(t)
        self.consume.append((s, t, index))
        if (point.kind == VIEWS and point.views is None) or point.kind == CALL:
            self.repeats.append((t, index))  # a store's extra views, a call's ops: the costs decide
        if skippable:
            self.edge(s, t, self.skip_cost(point))
        for handler_sources in self.raise_to:
            handler_sources.append(t)  # the call ran (its frame was recorded), then raised
        return t

    def finish(self, name: str, def_line: int, entry: int, end: int | None) -> Program:
        exit_state = self.state()
        if end is not None:
            self.edge(end, exit_state)
        for s in self.to_exit:
            self.edge(s, exit_state)
        return Program(
            name=name,
            def_line=def_line,
            points=tuple(self.points),
            n_states=self.n,
            entry=entry,
            exit=exit_state,
            eps=tuple(self.eps),
            consume=tuple(self.consume),
            resumes=tuple(self.resumes),
            point_end=tuple(self.point_end),
            repeats=tuple(self.repeats),
            bound=tuple(self.bound),
        )

    # -- statements ---------------------------------------------------------------------------------
    def block(self, statements: Iterable[ast.stmt], s: int | None) -> int | None:
        for statement in statements:
            if s is None:
                return None  # unreachable after return/raise/break/continue
            s = self.statement(statement, s)
        return s

    def statement(self, node: ast.stmt, s: int) -> int | None:
        if isinstance(node, ast.Expr):
            return self.expr(node.value, s)
        if isinstance(node, ast.Assign):
            s = self.expr(node.value, s)
            for target in node.targets:
                s = self.store(target, s)
            return s
        if isinstance(node, ast.AnnAssign):
            if node.value is None:
                return s
            return self.store(node.target, self.expr(node.value, s))
        if isinstance(node, ast.AugAssign):
            return self.augmented(node, s)
        if isinstance(node, ast.Return):
            if node.value is not None:
                s = self.expr(node.value, s)
            self.to_exit.append(s)
            return None
        if isinstance(node, ast.Raise):
            for part in (node.exc, node.cause):
                if part is not None:
                    s = self.expr(part, s)
            self.to_exit.append(s)
            return None
        if isinstance(node, ast.If):
            s = self.test(node.test, s)
            return self.join(self.block(node.body, s), self.block(node.orelse, s))
        if isinstance(node, (ast.For, ast.AsyncFor)):
            return self.for_loop(node, s)
        if isinstance(node, ast.While):
            return self.while_loop(node, s)
        if isinstance(node, (ast.With, ast.AsyncWith)):
            return self.with_block(node, s)
        if isinstance(node, (ast.Try, ast.TryStar)):
            return self.try_block(node, s)
        if isinstance(node, ast.Break):
            if self.loops:
                self.edge(s, self.loops[-1][1])
            return None
        if isinstance(node, ast.Continue):
            if self.loops:
                self.edge(s, self.loops[-1][0])
            return None
        if isinstance(node, ast.Assert):
            return self.test(node.test, s)  # the message runs only when it fails
        if isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Subscript):
                    s = self.expr(target.slice, self.expr(target.value, s))
            return s
        if isinstance(node, ast.Match):
            s = self.expr(node.subject, s)
            ends = []
            for case in node.cases:
                t = self.expr(case.guard, s) if case.guard is not None else s
                ends.append(self.block(case.body, t))
            ends.append(s)  # no case matched
            return self.join(*ends)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for decorator in node.decorator_list:  # evaluated now; the body runs in its own frame
                s = self.expr(decorator, s)
            return s
        return s  # pass, import, global, nonlocal, type aliases: no calls of interest

    def divide(self, s: int, point: CallPoint) -> int:
        """``a / x`` of a tensor `x`: ``aten::div``, or, where `a` is a Python number
        (``fp_max / amax``, which the source may not show), ``Tensor.__rtruediv__``: ``x.reciprocal()
        * a``, two ops. The second path needs its ``reciprocal`` (no edge skips it), so that a
        division does not explain a lone ``mul``; the skip of the whole stays the first path's."""
        reciprocal = replace(point, name=RECIPROCAL)
        after = self.point(s, reciprocal, skippable=False)
        self.bound.append(after)  # the mul follows its reciprocal: no window's part starts between
        return self.join(self.point(s, point), self.point(after, replace(point, name=BINARY_OPS[ast.Mult])))

    @overload
    def join(self, *ends: int) -> int: ...
    @overload
    def join(self, *ends: int | None) -> int | None: ...
    def join(self, *ends: int | None) -> int | None:
        live = [e for e in ends if e is not None]
        if not live:
            return None
        if len(live) == 1:
            return live[0]
        j = self.state()
        for e in live:
            self.edge(e, j)
        return j

    def augmented(self, node: ast.AugAssign, s: int) -> int:
        target = node.target
        if isinstance(target, ast.Subscript):
            s = self.expr(target.slice, self.expr(target.value, s))
            s = self.subscript(target, GETITEM, s)
        elif isinstance(target, ast.Attribute):
            s = self.expr(target.value, s)
        s = self.expr(node.value, s)
        op = BINARY_OPS.get(type(node.op))
        if op is not None and not (self.scalar(target) and self.scalar(node.value)):
            point = CallPoint(
                node.lineno, node.col_offset, OPERATOR, op + "_", scalar_like=self.scalar(node.value)
            )
            s = self.point(s, point)
        if isinstance(target, ast.Subscript):
            s = self.subscript(target, SETITEM, s)
        return s

    def for_loop(self, node: ast.For | ast.AsyncFor, s: int) -> int | None:
        s = self.expr(node.iter, s)
        s = self.point(s, CallPoint(node.iter.lineno, node.iter.col_offset, ITER, "__iter__"))
        head, after = self.state(), self.state()
        self.edge(s, head)
        loop_exit = self.state()
        self.edge(head, loop_exit)
        return self.loop_body(node, head, self.store(node.target, head), loop_exit, after)

    def while_loop(self, node: ast.While, s: int) -> int | None:
        head, after = self.state(), self.state()
        self.edge(s, head)
        tested = self.test(node.test, head)
        loop_exit = self.state()
        self.edge(tested, loop_exit)
        return self.loop_body(node, head, tested, loop_exit, after)

    def loop_body(
        self, node: ast.For | ast.AsyncFor | ast.While, head: int, start: int, loop_exit: int, after: int
    ) -> int:
        """The body from `start` back to `head` (break -> `after`, continue -> `head`), then the
        `else:` block from `loop_exit` (the loop ending without a break) to `after`."""
        self.loops.append((head, after))
        body_end = self.block(node.body, start)
        self.loops.pop()
        if body_end is not None:
            self.edge(body_end, head)
        else_end = self.block(node.orelse, loop_exit)
        if else_end is not None:
            self.edge(else_end, after)
        return after

    def with_block(self, node: ast.With | ast.AsyncWith, s: int) -> int | None:
        for item in node.items:
            s = self.expr(item.context_expr, s)
            s = self.point(
                s, CallPoint(item.context_expr.lineno, item.context_expr.col_offset, ENTER, "__enter__")
            )
            if item.optional_vars is not None:
                s = self.store(item.optional_vars, s)
        end = self.block(node.body, s)
        if end is None:
            return None
        for _item in reversed(node.items):
            end = self.point(end, CallPoint(node.lineno, node.col_offset, EXIT, "__exit__"))
        return end

    def try_block(self, node: ast.Try | ast.TryStar, s: int) -> int | None:
        sources = [s]
        self.raise_to.append(sources)
        body_end = self.block(node.body, s)
        self.raise_to.pop()
        if body_end is not None:
            sources.append(body_end)
        ends = [self.block(node.orelse, body_end) if body_end is not None else None]
        if node.handlers:
            enter = self.state()
            for source in dict.fromkeys(sources):
                self.edge(source, enter, 0.5)  # an exception: rare, so not free
            for handler in node.handlers:
                t = self.expr(handler.type, enter) if handler.type is not None else enter
                ends.append(self.block(handler.body, t))
        end = self.join(*ends)
        if node.finalbody:
            if end is None:
                end = self.state()  # a finally runs on the way out too; keep its calls reachable
                self.edge(s, end, 1.0)
            end = self.block(node.finalbody, end)
        return end

    # -- stores -------------------------------------------------------------------------------------------
    def store(self, target: ast.AST, s: int) -> int:
        if isinstance(target, ast.Subscript):
            s = self.expr(target.slice, self.expr(target.value, s))
            return s if self.python_items(target.value) else self.subscript(target, SETITEM, s)
        if isinstance(target, (ast.Tuple, ast.List)):
            s = self.point(s, CallPoint(target.lineno, target.col_offset, ITER, "__iter__"))
            for element in target.elts:
                s = self.store(element, s)
            return s
        if isinstance(target, ast.Starred):
            return self.store(target.value, s)
        if isinstance(target, ast.Attribute):
            return self.expr(target.value, s)
        return s

    # -- expressions --------------------------------------------------------------------------------------
    def exprs(self, nodes: Sequence[ast.AST | None], s: int) -> int:
        for node in nodes:
            if node is not None:
                s = self.expr(node, s)
        return s

    def expr(self, node: ast.AST | None, s: int) -> int:
        if node is None or isinstance(node, (ast.Constant, ast.Name)):
            return s
        if isinstance(node, ast.Call):
            return self.call(node, s)
        if isinstance(node, ast.Attribute):
            s = self.expr(node.value, s)
            if _is_self(node.value) and node.attr in self.scope.properties and isinstance(node.ctx, ast.Load):
                s = self.point(
                    s, CallPoint(node.end_lineno or node.lineno, node.col_offset, PROPERTY, node.attr)
                )
            return s
        if isinstance(node, ast.BinOp):
            s = self.expr(node.right, self.expr(node.left, s))
            op = BINARY_OPS.get(type(node.op))
            if op is None:
                return s
            if self.scalar(node.left) and self.scalar(node.right):
                if not self.hinted(node.left, node.right):
                    return s
                scalar = True
            else:
                scalar = self.on_sizes(node.left, node.right)
            point = CallPoint(node.lineno, node.col_offset, OPERATOR, op, scalar_like=scalar)
            if isinstance(node.op, ast.Div) and not scalar and not self.scalar(node.right):
                return self.divide(s, point)
            return self.point(s, point)
        if isinstance(node, ast.UnaryOp):
            s = self.expr(node.operand, s)
            op = UNARY_OPS.get(type(node.op))
            if op is None or self.scalar(node.operand):
                return s
            return self.point(
                s,
                CallPoint(
                    node.lineno,
                    node.col_offset,
                    OPERATOR,
                    op,
                    scalar_like=self.on_sizes(node.operand),
                ),
            )
        if isinstance(node, ast.Compare):
            s = self.expr(node.left, s)
            ends = []
            for comparison, right in zip(node.ops, node.comparators):
                s = self.expr(right, s)
                name = COMPARE_OPS.get(type(comparison))
                numbers = self.scalar(right) and self.scalar(node.left)
                if (
                    name is not None
                    and (not numbers or self.hinted(node.left, right))
                    and not (_is_text(right) or _is_text(node.left))  # ``x.device.type != "mps"``
                ):
                    scalar = numbers or self.on_sizes(node.left, right) or _is_none(right)
                    s = self.point(
                        s, CallPoint(node.lineno, node.col_offset, OPERATOR, name, scalar_like=scalar)
                    )
                ends.append(s)  # a chained comparison stops at the first false one
            return self.join(*ends) if len(ends) > 1 else s
        if isinstance(node, ast.BoolOp):
            s = self.expr(node.values[0], s)
            ends = [s]
            for value in node.values[1:]:
                s = self.expr(value, s)
                ends.append(s)
            return self.join(*ends)
        if isinstance(node, ast.IfExp):
            s = self.test(node.test, s)
            return self.join(self.expr(node.body, s), self.expr(node.orelse, s))
        if isinstance(node, ast.Subscript):
            s = self.expr(node.slice, self.expr(node.value, s))
            if isinstance(node.ctx, ast.Load) and not self.python_items(node.value):
                s = self.subscript(node, GETITEM, s)
            return s
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp)):
            return self.comprehension(node, s)
        if isinstance(node, ast.GeneratorExp):
            s = self.expr(node.generators[0].iter, s)
            # Its frame runs whenever the consumer pulls an item: zero or more times, here or below.
            head = self.state()
            self.edge(s, head)
            end = self.point(head, CallPoint(node.lineno, node.col_offset, FRAME, "<genexpr>"))
            self.edge(end, head)
            return head
        if isinstance(node, ast.Lambda):
            return self.exprs(node.args.defaults, s)
        if isinstance(node, ast.NamedExpr):
            return self.expr(node.value, s)
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            s = self.expr(node.value, s)
            if isinstance(node, (ast.Yield, ast.YieldFrom)):
                self.to_exit.append(s)  # the frame's run ends at the yield ...
                resume = self.state()
                self.resumes.append(resume)  # ... and a later run starts here
                return resume
            return s
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                s = self.expr(value, self.expr(key, s))
            return s
        if isinstance(node, ast.Slice):  # its bounds are ints: ``x[j * block : (j + 1) * block]``
            self.sizes += 1
            s = self.exprs((node.lower, node.upper, node.step), s)
            self.sizes -= 1
            return s
        for child in ast.iter_child_nodes(node):
            s = self.expr(child, s)
        return s

    def call(self, node: ast.Call, s: int) -> int:
        func = node.func
        callee, name = _callee(func, self.scope)
        if isinstance(func, ast.Attribute):
            s = self.expr(func.value, s)
        elif isinstance(func, ast.Subscript):
            s = self.expr(func.slice, self.expr(func.value, s))
        elif not isinstance(func, ast.Name):
            s = self.expr(func, s)
        sizes = name in _SIZE_ARGUMENTS and callee != BY_NAME  # ``q.reshape(-1, h * d)``: ints
        self.sizes += sizes
        for argument in node.args:
            s = self.expr(argument, s)
        for keyword in node.keywords:
            s = self.expr(keyword.value, s)
        self.sizes -= sizes
        line = node.lineno
        if isinstance(func, ast.Attribute) and func.end_lineno is not None:
            line = func.end_lineno  # CPython places a method call on its attribute's line
        aliases = self.scope.aliases.get(name, ()) if callee == BY_NAME else ()
        dtype, device_only = _cast_target(node, name)
        receiver = (
            receiver_path(func.value) if callee == BY_ATTRIBUTE and isinstance(func, ast.Attribute) else ""
        )
        point = CallPoint(
            line,
            node.col_offset,
            CALL,
            name,
            callee,
            aliases,
            dtype=dtype,
            device_only=device_only,
            receiver=receiver,
            arguments=callback_arguments(node) if callee == BY_LOCAL else (),
        )
        return self.point(s, point)

    def comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp, s: int) -> int:
        s = self.expr(node.generators[0].iter, s)
        # Python 3.11: one call of the comprehension's own frame. 3.12: its loop runs inline.
        as_frame = self.point(
            s, CallPoint(node.lineno, node.col_offset, FRAME, _COMPREHENSION_FRAMES[type(node)])
        )
        inline = self.comprehension_loop(node, node.generators, 0, s)
        return self.join(as_frame, inline)

    def comprehension_loop(self, node, generators: Sequence[ast.comprehension], i: int, s: int) -> int:
        if i == len(generators):
            if isinstance(node, ast.DictComp):
                return self.expr(node.value, self.expr(node.key, s))
            return self.expr(node.elt, s)
        generator = generators[i]
        if i > 0:
            s = self.expr(generator.iter, s)
        head, done = self.state(), self.state()
        self.edge(s, head)
        self.edge(head, done)
        t = self.store(generator.target, head)
        for condition in generator.ifs:
            t = self.expr(condition, t)
            self.edge(t, head)  # the condition was false: the next item
        self.edge(self.comprehension_loop(node, generators, i + 1, t), head)
        return done

    def subscript(self, node: ast.Subscript, kind: str, s: int) -> int:
        """``x[i]`` (load or store): the views it takes on the way, then the load or the store."""
        name = "__getitem__" if kind == GETITEM else "__setitem__"
        for views in _view_ops(node.slice, self.scope.scalar_names):  # one view per index element
            s = self.point(s, CallPoint(node.lineno, node.col_offset, VIEWS, name, views=views))
        if kind == SETITEM:  # what a store does on the way (lift a scalar, expand, ...): any of them
            s = self.point(s, CallPoint(node.lineno, node.col_offset, VIEWS, name))
        point = CallPoint(node.lineno, node.col_offset, kind, name, tensor_index=_is_tensor_index(node.slice))
        return self.point(s, point)

    def test(self, node: ast.expr, s: int) -> int:
        """A condition: its calls, then its truth value (``if t:`` on a tensor reads it: is_nonzero)."""
        s = self.expr(node, s)
        return self.point(s, CallPoint(node.lineno, node.col_offset, VIEWS, "__bool__", views=_TRUTH_OPS))


# -- the programs of a module -------------------------------------------------------------------------


@dataclass(eq=False)
class _Entry:
    """A function (or comprehension, lambda, module body) of a module, and what its scope needs."""

    node: ast.AST
    class_node: ast.ClassDef | None = None  # the class a method is defined in
    parent: _Entry | None = None  # the function it is nested in (its locals are the closure's)


class ModulePrograms:
    """The programs of every function, comprehension and lambda of one parsed module, built on demand.

    Keyed as the profiler names frames: (first line, name), where a decorated function's first
    line is its first decorator's (Python >= 3.8) and also its ``def`` line. Functions are found
    by walking statements only; comprehensions and lambdas (frames of their own on Python 3.11)
    by a walk of the expressions too, the first time one is asked for. Scopes (locals, numbers)
    are worked out for the functions whose programs are built.
    """

    def __init__(
        self, tree: ast.Module, skip_cost, class_scalars: Callable[[str], frozenset[str]] | None = None
    ) -> None:
        self.tree = tree
        self.skip_cost = skip_cost
        self._nodes: dict[tuple[int, str], list[_Entry]] = {}
        self._built: dict[tuple[int, str], Program | None] = {}
        self._owners: dict[int, str] = {}  # id(function node) -> its class's name
        self._scopes: dict[int, Scope] = {}
        self._locals: dict[int, frozenset[str]] = {}
        self._aliases: dict[str, tuple[str, ...]] | None = None
        self._class_scalars: dict[str, frozenset[str]] = {}
        self._classes: dict[str, ast.ClassDef] | None = None
        # another module's class's scalar attributes, by the class's name (`scalar_attributes`),
        # from whoever can find other modules' classes
        self.class_scalars = class_scalars
        self._expressions_indexed = False
        self._add(1, "<module>", _Entry(tree))
        self._index(tree.body, None, None)

    def _index(
        self, statements: Sequence[ast.stmt], class_node: ast.ClassDef | None, parent: _Entry | None
    ) -> None:
        for node in statements:
            if isinstance(node, ast.ClassDef):
                self._index(node.body, node, parent)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                entry = _Entry(node, class_node, parent)
                for line in {node.lineno, *(d.lineno for d in node.decorator_list[:1])}:
                    self._add(line, node.name, entry)
                if class_node is not None:
                    self._owners[id(node)] = class_node.name
                self._index(node.body, None, entry)
            else:
                for field_name in ("body", "orelse", "finalbody", "handlers", "cases"):
                    inner = getattr(node, field_name, None)
                    if (
                        isinstance(inner, list)
                        and inner
                        and isinstance(inner[0], (ast.stmt, ast.excepthandler, ast.match_case))
                    ):
                        for item in inner:
                            if isinstance(item, (ast.ExceptHandler, ast.match_case)):
                                self._index(item.body, class_node, parent)
                        self._index([i for i in inner if isinstance(i, ast.stmt)], class_node, parent)

    def _index_expressions(self) -> None:
        """Comprehensions and lambdas, each with the innermost function around it as its parent."""
        self._expressions_indexed = True
        functions = [e for entries in list(self._nodes.values()) for e in entries[:1]]
        for node in ast.walk(self.tree):
            frame = _COMPREHENSION_FRAMES.get(type(node)) or (
                "<lambda>" if isinstance(node, ast.Lambda) else None
            )
            if frame is None or not isinstance(node, ast.expr):
                continue
            around = [
                e
                for e in functions
                if isinstance(e.node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and e.node.lineno <= node.lineno <= (e.node.end_lineno or e.node.lineno)
            ]
            # each of `around` is a function (filtered just above)
            parent = max(around, key=lambda e: cast(ast.FunctionDef, e.node).lineno, default=None)
            self._add(node.lineno, frame, _Entry(node, None, parent))

    def _add(self, line: int, name: str, entry: _Entry) -> None:
        found = self._nodes.setdefault((line, name), [])
        if entry not in found:
            found.append(entry)

    def _scope(self, entry: _Entry) -> Scope:
        found = self._scopes.get(id(entry.node))
        if found is None:
            if self._aliases is None:
                self._aliases = _import_aliases(self.tree)
            node = entry.node
            methods, properties = _class_names(entry.class_node) if entry.class_node is not None else ((), ())
            scalars = (
                _scalar_names(node, self.class_scalars)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                else frozenset()
            )
            if entry.class_node is not None:
                scalars |= self.scalar_attributes(entry.class_node.name)
            hinted = (
                frozenset(
                    a.arg
                    for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)
                    if _is_scalar_annotation(a.annotation)
                )
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                else frozenset()
            )
            found = Scope(
                frozenset(methods),
                frozenset(properties),
                self._aliases,
                self._local_names(entry),
                scalars,
                hinted & scalars,
            )
            self._scopes[id(node)] = found
        return found

    def scalar_attributes(self, name: str) -> frozenset[str]:
        """``self.<attr>`` for each attribute that class `name` and its bases of this module only
        ever set to Python numbers (``self.start_layer = start_layer or 0`` with ``start_layer:
        int | None``): arithmetic on it runs no op."""
        found = self._class_scalars.get(name)
        if found is None:
            self._class_scalars[name] = frozenset()  # (a class its own base: nothing)
            if self._classes is None:
                self._classes = {n.name: n for n in ast.walk(self.tree) if isinstance(n, ast.ClassDef)}
            classes = self._classes
            lineage: list[ast.ClassDef] = []
            queue = [name]
            while queue and len(lineage) < 8:
                current = classes.get(queue.pop(0))
                if current is not None and current not in lineage:
                    lineage.append(current)
                    queue.extend(base for b in current.bases if (base := last_name(b)))
            found = self._class_scalars[name] = _scalar_attributes(lineage)
        return found

    def _local_names(self, entry: _Entry | None) -> frozenset[str]:
        """Its own locals and those of the functions around it (a closure's variables)."""
        if entry is None or not isinstance(
            entry.node,
            (
                ast.FunctionDef,
                ast.AsyncFunctionDef,
                ast.Lambda,
                ast.ListComp,
                ast.SetComp,
                ast.DictComp,
                ast.GeneratorExp,
            ),
        ):
            return frozenset()
        found = self._locals.get(id(entry.node))
        if found is None:
            own = (
                _local_names(entry.node)
                if isinstance(entry.node, (ast.FunctionDef, ast.AsyncFunctionDef))
                else frozenset()
            )
            found = self._locals[id(entry.node)] = own | self._local_names(entry.parent)
        return found

    def program(self, line: int, name: str) -> Program | None:
        """The program of the frame named ``file(line): name``; None when none (or several) fit."""
        key = (line, name)
        if key not in self._built:
            if name.startswith("<") and name != "<module>" and not self._expressions_indexed:
                self._index_expressions()
            found = self._nodes.get(key, [])
            self._built[key] = self._build(found[0], name, line) if len(found) == 1 else None
        return self._built[key]

    def functions(self) -> list[tuple[int, str, ast.AST]]:
        """(def line, name, node) of every function, and (1, "<module>", tree) for the module body."""
        found: list[tuple[int, str, ast.AST]] = []
        seen: set[int] = set()
        for (line, name), entries in self._nodes.items():
            node = entries[0].node
            if len(entries) != 1 or id(node) in seen:
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and line == node.lineno:
                seen.add(id(node))
                found.append((line, name, node))
            elif isinstance(node, ast.Module):
                seen.add(id(node))
                found.append((1, name, node))
        return found

    def owner_of_node(self, node: ast.AST) -> str | None:
        """The class a function node is a method of."""
        return self._owners.get(id(node))

    def owner_of(self, program: Program) -> str | None:
        """The class a function's program belongs to, if it is a method."""
        entries = self._nodes.get((program.def_line, program.name))
        return self._owners.get(id(entries[0].node)) if entries else None

    def enclosing(self, line: int) -> tuple[int, str] | None:
        """The innermost function whose body holds `line` (for frames that name their executing line)."""
        best = None
        for (first, name), entries in self._nodes.items():
            node = entries[0].node
            end = getattr(node, "end_lineno", None)
            if name == "<module>" or end is None or not first <= line <= end:
                continue
            if best is None or first > best[0]:
                best = (first, name)
        return best

    def _build(self, entry: _Entry, name: str, line: int) -> Program:
        node = entry.node
        builder = _Builder(self._scope(entry), self.skip_cost)
        start = builder.state()
        end: int | None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            end = builder.block(node.body, start)
        elif isinstance(node, ast.Lambda):
            end = builder.expr(node.body, start)
        elif isinstance(node, ast.GeneratorExp):
            end = builder.comprehension_loop(node, node.generators, 0, start)
            builder.resumes.append(start)
        else:  # list/set/dict comprehension run in its own frame (Python 3.11)
            assert isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp))  # what _index_expressions adds
            end = builder.comprehension_loop(node, node.generators, 0, start)
        return builder.finish(name, line, start, end)


_MOVE_KEYWORDS = frozenset({"device", "non_blocking", "copy", "memory_format"})


def _cast_target(node: ast.Call, name: str) -> tuple[str | None, bool]:
    """(literal target dtype, whether the call only moves) of a cast-like call; (None, False) otherwise."""
    if name in METHOD_DTYPES and not node.args and isinstance(node.func, ast.Attribute):
        return METHOD_DTYPES[name], False
    if name in ("cuda", "cpu") and isinstance(node.func, ast.Attribute):
        return None, True
    if name not in ("to", "type") or not isinstance(node.func, ast.Attribute):
        return None, False
    arguments = list(node.args)
    if isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "Tensor" and arguments:
        arguments = arguments[1:]  # torch.Tensor.to(x, dtype): the tensor is the first argument
    for keyword in node.keywords:
        if keyword.arg == "dtype":
            return _literal_dtype(keyword.value), False
    for argument in arguments:
        literal = _literal_dtype(argument)
        if literal is not None:
            return literal, False
    moves = all(_is_device_like(a) for a in arguments) and all(k.arg in _MOVE_KEYWORDS for k in node.keywords)
    return None, moves and bool(arguments or node.keywords)


def _literal_dtype(node: ast.AST) -> str | None:
    """``torch.bfloat16`` -> "torch.bfloat16" (aliases canonical: ``torch.float`` -> "torch.float32")."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        if node.attr in ("device", "Tensor"):
            return None
        return canonical_dtype(f"torch.{node.attr}")
    return None


def _is_device_like(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    if isinstance(node, ast.Attribute) and node.attr == "device":
        return True
    if isinstance(node, ast.Name) and "device" in node.id:
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "device"


MIN_CALLBACK_ARGUMENTS = 2  # fewer names say too little of what a callable given as a value is


def callback_arguments(node: ast.Call) -> tuple[str, ...]:
    """The names a call passes as its positional arguments, where each is a name and there are at
    least `MIN_CALLBACK_ARGUMENTS` (``criteria(input_ids, scores, **kwargs)``); else ()."""
    names = tuple(a.id for a in node.args if isinstance(a, ast.Name))
    return names if len(names) == len(node.args) >= MIN_CALLBACK_ARGUMENTS else ()


def positional_parameters(
    node: ast.FunctionDef | ast.AsyncFunctionDef, method: bool
) -> tuple[tuple[str, ...], int]:
    """The names of a function's positional parameters (a method's without its first, ``self``)
    and how many of them take no default: ``((input_ids, scores), 2)`` of ``def __call__(self,
    input_ids, scores, **kwargs)``."""
    arguments = node.args
    names = [a.arg for a in (*arguments.posonlyargs, *arguments.args)]
    parameters = tuple(names[1:] if method and names else names)
    return parameters, len(parameters) - len(arguments.defaults)


def receiver_path(node: ast.AST) -> str:
    """How a method call's receiver is written, where a type may be known for it (`CallPoint.receiver`):
    a name, ``self.<attr>``, either indexed (``[]``); "" for anything else."""
    indexed = ""
    if isinstance(node, ast.Subscript):
        node, indexed = node.value, "[]"
    if isinstance(node, ast.Name) and node.id not in ("self", "cls", "torch", "F", "nn"):
        return node.id + indexed
    if isinstance(node, ast.Attribute) and _is_self(node.value):
        return f"self.{node.attr}{indexed}"
    return ""


def _callee(func: ast.AST, scope: Scope) -> tuple[str, str]:
    """(how the callee is named, its name) of a call's function expression."""
    if isinstance(func, ast.Name):
        name = func.id
        if name in TYPE_NAMES or name in EXCEPTION_NAMES:
            return BY_TYPE, name
        if name in scope.local_names:
            return BY_LOCAL, name
        return BY_NAME, name
    if isinstance(func, ast.Attribute):
        if _is_self(func.value):
            if func.attr in scope.methods:
                return BY_SELF_METHOD, func.attr
            return BY_SELF_ATTRIBUTE, func.attr
        if func.attr in ("Size", "finfo", "iinfo", "device", "dtype", "Generator", "partial"):
            return BY_TYPE, func.attr  # (x.float(), x.int() are tensor methods, not the types)
        if _is_math(func):
            return BY_TYPE, func.attr  # ``math.sqrt(d)``: on numbers, no op (a builtin's frame at most)
        return BY_ATTRIBUTE, func.attr
    if isinstance(func, ast.Subscript):
        return BY_SUBSCRIPT, _subscript_name(func)
    return OPAQUE, ""


def _subscript_name(node: ast.Subscript) -> str:
    value = node.value
    return value.attr if isinstance(value, ast.Attribute) else value.id if isinstance(value, ast.Name) else ""


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _is_text(node: ast.AST) -> bool:
    """A string literal: a tensor compared with it runs no op (it cannot be)."""
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))
    )


def _is_numeric(node: ast.AST) -> bool:
    """A literal number (or -number): arithmetic on it alone runs no tensor op."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float, complex))
        and not isinstance(node.value, bool)
    )


# Tensor methods and torch functions whose arguments are sizes, dims or counts: arithmetic in them
# is on Python ints (``q.reshape(-1, layer.tp_q_head_num * layer.qk_head_dim)``), not an op.
_SIZE_ARGUMENTS = frozenset(
    {
        "view", "reshape", "expand", "repeat", "tile", "new_empty", "new_zeros", "new_ones", "empty",
        "zeros", "ones", "randn", "rand", "arange", "narrow", "permute", "transpose", "flatten",
        "unflatten", "movedim", "split", "chunk", "unsqueeze", "squeeze", "unfold",
    }
)  # fmt: skip
_SIZE_CALLS = frozenset(
    {"len", "size", "dim", "numel", "int", "float", "range", "max", "min", "item", "math"}
)


def last_name(node: ast.AST) -> str | None:
    """The name a call target ends in: ``f`` for ``f``, ``to`` for ``x.y.to``; None for others."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_shape_math(node: ast.AST) -> bool:
    """Arithmetic on sizes (``x.shape[-1] // 2``, ``len(xs) * 2``) usually runs in Python, not as an op."""
    for child in ast.walk(node):
        if isinstance(child, ast.Attribute) and child.attr in ("shape", "ndim", "itemsize"):
            return True
        if isinstance(child, ast.Call) and last_name(child.func) in _SIZE_CALLS:
            return True
    return False


_NUMBER_BUILTINS = frozenset({"len", "int", "float", "round", "abs", "bool", "hash", "ord"})
_NUMBER_METHODS = frozenset({"size", "dim", "numel", "item", "ndimension", "element_size", "nelement"})
# Attributes that hold Python values, not tensors: comparing them runs no op (``x.dtype != y.dtype``).
_INT_ATTRIBUTES = frozenset({"ndim", "itemsize", "is_cuda", "training", "dtype", "requires_grad"})
# Names that by the common convention hold a number or a dtype (``page_size``, ``head_dim``,
# ``num_heads``, ``tp_q_head_num``, ``store_dtype``), never a tensor (not ``*_id``, ``*_count``: token
# ids and expert counts are often tensors).
_NUMBER_NAME = re.compile(r"(?:^|_)(?:size|dim|len|length|dtype|num)$|^(?:num|n)_[a-z]")
# Annotations of a parameter that holds a Python value (``layer_id: int``, ``dtype: torch.dtype``).
_SCALAR_ANNOTATIONS = frozenset({"int", "float", "bool", "dtype"})


def _is_scalar_expression(node: ast.AST, scalars: frozenset[str] | set[str]) -> bool:
    """A Python number: a literal, a name only ever bound to numbers, sizes and lengths, and
    arithmetic, comparisons and conditionals of those."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float, complex, bool)) or node.value is None
    if isinstance(node, ast.Name):
        return node.id in scalars or _NUMBER_NAME.search(node.id) is not None
    if isinstance(node, ast.UnaryOp):
        return _is_scalar_expression(node.operand, scalars)
    if isinstance(node, ast.BinOp):
        return _is_scalar_expression(node.left, scalars) and _is_scalar_expression(node.right, scalars)
    if isinstance(node, ast.IfExp):
        return _is_scalar_expression(node.body, scalars) and _is_scalar_expression(node.orelse, scalars)
    if isinstance(node, ast.BoolOp):  # ``start_layer or 0``
        return all(_is_scalar_expression(value, scalars) for value in node.values)
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and f"{node.value.id}.{node.attr}" in scalars:
            return True  # ``self.start_layer``, ``layer.layer_id``: attributes only set to numbers
        return (
            _is_math(node)  # ``math.pi``
            or _is_config(node.value)  # ``config.pretraining_tp``, ``self.config.rope_theta``
            or node.attr in _INT_ATTRIBUTES
            or _literal_dtype(node) is not None
            or _NUMBER_NAME.search(node.attr) is not None
        )
    if isinstance(node, ast.Subscript):
        return is_size_value(node.value)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in _NUMBER_BUILTINS:
                return True
            if func.id in ("min", "max"):
                return all(_is_scalar_expression(a, scalars) for a in node.args)
            return False
        if isinstance(func, ast.Attribute) and func.attr in _NUMBER_METHODS:
            return True
        return _is_math(func)
    return False


def _only_names(node: ast.AST, names: frozenset[str]) -> bool:
    """Whether `node` is `names` and arithmetic of them, nothing else."""
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.BinOp):
        return _only_names(node.left, names) and _only_names(node.right, names)
    if isinstance(node, ast.UnaryOp):
        return _only_names(node.operand, names)
    return False


def _is_config(node: ast.AST) -> bool:
    """``config``, ``self.config``, ``text_config``: a model's configuration, whose values are Python's
    (a ``PretrainedConfig`` holds numbers, strings and lists, never a tensor): what is read from it and
    compared or combined runs no op (Bloom's ``if self.pretraining_tp > 1``, set from its config)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name == "config" or name.endswith("_config")


def _is_math(node: ast.AST) -> bool:
    """``math.pi``, ``math.sqrt``: what Python's math module holds works on numbers, in Python."""
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math"


def _scalar_names(
    node: ast.FunctionDef | ast.AsyncFunctionDef,
    class_scalars: Callable[[str], frozenset[str]] | None = None,
) -> frozenset[str]:
    """The function's locals that only ever hold Python numbers (flow-insensitive, to a fixpoint):
    every binding is a number, a size or arithmetic of such; a ``range`` loop's variable. With
    `class_scalars` (a class's name -> its attributes only ever set to numbers, as ``self.<attr>``),
    also ``<parameter>.<attr>`` for a parameter annotated with such a class (``layer.layer_id`` of
    ``layer: RadixAttention``)."""
    bindings: dict[str, list[ast.AST | None]] = {}  # None: a binding of unknown kind

    def bind(target: ast.AST, value: ast.AST | None) -> None:
        if isinstance(target, ast.Name):
            bindings.setdefault(target.id, []).append(value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
            if values is not None and len(values) == len(target.elts):
                for element, part in zip(target.elts, values):
                    bind(element, part)
            else:
                for element in target.elts:
                    bind(element, None)
        elif isinstance(target, ast.Starred):
            bind(target.value, None)

    for child in own_nodes(node):
        if isinstance(child, ast.Assign):
            for target in child.targets:
                bind(target, child.value)
        elif isinstance(child, ast.AnnAssign) and child.value is not None:
            bind(child.target, child.value)
        elif isinstance(child, ast.AugAssign):
            bind(child.target, ast.BinOp(child.target, child.op, child.value))
        elif isinstance(child, (ast.For, ast.AsyncFor)):
            iterator = child.iter
            func = iterator.func if isinstance(iterator, ast.Call) else None
            called = func.id if isinstance(func, ast.Name) else None
            if called == "range":
                bind(child.target, ast.Constant(0))
            elif called == "enumerate" and isinstance(child.target, ast.Tuple):
                bind(child.target.elts[0], ast.Constant(0))
                for element in child.target.elts[1:]:
                    bind(element, None)
            else:
                bind(child.target, None)
        elif isinstance(child, ast.NamedExpr):
            bind(child.target, child.value)
        elif isinstance(child, (ast.With, ast.AsyncWith)):
            for item in child.items:
                if item.optional_vars is not None:
                    bind(item.optional_vars, None)
        elif isinstance(child, ast.comprehension):
            bind(child.target, None)
    arguments = node.args
    typed: set[str] = set()  # ``layer.layer_id``: a number by the parameter's class
    for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs):
        number = _is_scalar_annotation(argument.annotation)
        bindings.setdefault(argument.arg, []).append(ast.Constant(0) if number else None)
        if class_scalars is not None and argument.annotation is not None and not number:
            for name in annotated_classes(argument.annotation)[0]:
                typed.update(argument.arg + a.removeprefix("self") for a in class_scalars(name))
    known = frozenset(typed)
    return (
        frozenset(_only_numbers({n: [(v, known) for v in values] for n, values in bindings.items()})) | known
    )


def _only_numbers(bindings: dict[str, list[tuple[ast.AST | None, frozenset[str]]]]) -> set[str]:
    """The names each of whose bindings is a number (a value judged with the numeric names it sits
    among, and the names found so far): the greatest fixpoint, so that ``start = 0 ... start = end;
    end = start + 1`` are numbers together. A binding of None is of unknown kind."""
    scalars = {name for name, values in bindings.items() if all(v is not None for v, _ in values)}
    changed = True
    while changed:
        changed = False
        for name in list(scalars):
            if not all(
                v is not None and _is_scalar_expression(v, known | scalars) for v, known in bindings[name]
            ):
                scalars.discard(name)
                changed = True
    return scalars


def _scalar_attributes(classes: Sequence[ast.ClassDef]) -> frozenset[str]:
    """``self.<attr>`` for each attribute the methods of `classes` set only to numbers (each value
    judged with its method's numeric locals; to a fixpoint, as `_scalar_names`)."""
    bindings: dict[str, list[tuple[ast.AST | None, frozenset[str]]]] = {}  # None: unpacked, unknown
    for class_node in classes:
        for method in class_node.body:
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            names: frozenset[str] | None = None
            for child in own_nodes(method):
                if isinstance(child, ast.Assign):
                    pairs = [(target, child.value) for target in child.targets]
                elif isinstance(child, ast.AnnAssign) and child.value is not None:
                    pairs = [(child.target, child.value)]
                elif isinstance(child, ast.AugAssign):
                    pairs = [(child.target, ast.BinOp(child.target, child.op, child.value))]
                else:
                    continue
                for target, value in pairs:
                    targets = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
                    for one in targets:
                        if isinstance(one, ast.Attribute) and _is_self(one.value):
                            if names is None:
                                names = _scalar_names(method)
                            whole = value if len(targets) == 1 else None
                            bindings.setdefault(f"self.{one.attr}", []).append((whole, names))
    return frozenset(_only_numbers(bindings))


# typing's and builtin names an annotation may use: neither is a class the source defines
_NOT_CLASSES = frozenset(
    {
        "Any", "Callable", "Optional", "Union", "Type", "Self", "ClassVar", "Final", "Literal",
        "Annotated", "Unpack", "TypeVar", "Generic", "Protocol", "NoReturn", "Never", "Iterator",
        "Generator", "Awaitable", "Coroutine", "Mapping", "MutableMapping", "Dict", "Set", "FrozenSet",
        "NamedTuple", "TypedDict", "Tensor", "LongTensor", "FloatTensor", "BoolTensor", "IntTensor",
        "HalfTensor", "BFloat16Tensor", "Module", "Parameter", "ModuleList", "ModuleDict", "Size",
        "NDArray", "ndarray", "None",
    }
)  # fmt: skip
_SEQUENCES = frozenset(
    {"list", "List", "Sequence", "MutableSequence", "Iterable", "tuple", "Tuple", "deque", "Deque"}
)
_NOT_CLASS_ROOTS = frozenset({"torch", "nn", "typing", "np", "numpy", "collections", "abc", "t"})


def annotated_classes(annotation: ast.AST, depth: int = 0) -> tuple[list[str], list[str]]:
    """(instance classes, element classes) an annotation names (``X | None``, ``Optional[X]``,
    ``"X"``, ``list[X]``, ``tuple[X, ...]``)."""
    if depth > 4:
        return [], []
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            parsed = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return [], []
        return annotated_classes(parsed, depth + 1)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        left, right = (annotated_classes(side, depth + 1) for side in (annotation.left, annotation.right))
        return left[0] + right[0], left[1] + right[1]
    if isinstance(annotation, ast.Subscript):
        outer = last_name(annotation.value)
        inner = annotation.slice
        parts = list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
        if outer in ("Optional", "Union"):
            found = [annotated_classes(part, depth + 1) for part in parts]
            return [n for f in found for n in f[0]], [n for f in found for n in f[1]]
        if outer in _SEQUENCES:
            held = [n for part in parts for n in annotated_classes(part, depth + 1)[0]]
            return [], held
        return [], []
    if isinstance(annotation, (ast.Name, ast.Attribute)):
        name = last_name(annotation)
        root: ast.expr = annotation
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root is not annotation and root.id in _NOT_CLASS_ROOTS:
            return [], []
        if name and name[0].isupper() and name not in _NOT_CLASSES:
            return [name], []
    return [], []


def _is_scalar_annotation(node: ast.AST | None) -> bool:
    """``int``, ``float``, ``bool``, ``torch.dtype``, and those ``| None`` or ``Optional[...]``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        sides = (node.left, node.right)
        return any(_is_scalar_annotation(side) for side in sides) and all(
            _is_scalar_annotation(side) or _is_none(side) for side in sides
        )
    if isinstance(node, ast.Subscript) and last_name(node.value) == "Optional":
        return _is_scalar_annotation(node.slice)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            return _is_scalar_annotation(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return False
    return isinstance(node, (ast.Name, ast.Attribute)) and last_name(node) in _SCALAR_ANNOTATIONS


def own_nodes(node: ast.AST):
    """The nodes of a function's body, not those of functions or classes nested in it."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(child))


_TRUTH_OPS = frozenset({"aten::is_nonzero", "aten::item", "aten::_local_scalar_dense"})
_ITEM_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
_SLICE_OPS = frozenset({"aten::slice", "aten::alias"})  # ``x[..., :n]``: an alias where n is the dim's size


def _view_ops(index: ast.AST, scalars: frozenset[str]) -> list[frozenset[str]]:
    """The view op each index element may run, in order: a bounded slice slices (reading a
    tensor bound first; one that spans its whole dim is an alias), a number selects, None
    unsqueezes, ``...`` and ``:`` run none; anything else may select, read a 0-d tensor (item) or
    gather (the load's own point)."""
    views = []
    for element in index.elts if isinstance(index, ast.Tuple) else (index,):
        if isinstance(element, ast.Slice):
            bounds = [b for b in (element.lower, element.upper, element.step) if b is not None]
            for bound in bounds:  # a 0-d tensor bound is read first; an attribute is taken for a size
                if not (_is_scalar_expression(bound, scalars) or isinstance(bound, ast.Attribute)):
                    views.append(_ITEM_OPS)
            if bounds:
                views.append(_SLICE_OPS)
        elif isinstance(element, ast.Constant) and element.value is None:
            views.append(frozenset({"aten::unsqueeze"}))
        elif isinstance(element, ast.Constant) and element.value is Ellipsis:
            continue
        elif _is_scalar_expression(element, scalars):
            views.append(frozenset({"aten::select"}))
        else:
            views.append(frozenset({"aten::select", "aten::unsqueeze", "aten::alias"}) | _ITEM_OPS)
    return views or [frozenset({"aten::alias"})]


def runs_on_numbers(node: ast.BinOp | ast.AugAssign) -> bool:
    """An operator whose operands are plainly Python numbers or sizes (``x.numel() // x.shape[-1]``),
    judged without the function's locals: it runs no op."""
    left, right = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.target, node.value)
    return _is_scalar_expression(left, frozenset()) and _is_scalar_expression(right, frozenset())


def is_size_value(node: ast.AST) -> bool:
    """``x.shape``, ``x.size()``, ``x.stride()``: tuples of ints, whose subscripts run no op."""
    if isinstance(node, ast.Attribute):
        return node.attr in ("shape", "stride")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ("size", "stride")
    return False


def _is_tensor_index(index: ast.AST) -> bool:
    """Whether ``x[index]`` may gather with a tensor (aten::index) rather than slice or select."""
    if isinstance(index, ast.Tuple):
        return any(_is_tensor_index(e) for e in index.elts)
    if isinstance(index, (ast.Slice, ast.Constant)):
        return False
    if isinstance(index, ast.UnaryOp):
        return False
    return not _is_shape_math(index)


def _class_names(node: ast.ClassDef) -> tuple[list[str], list[str]]:
    methods, properties = [], []
    for child in node.body:
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorators = {_decorator_name(d) for d in child.decorator_list}
            if decorators & {"property", "cached_property", "getter"}:
                properties.append(child.name)
            else:
                methods.append(child.name)
    return methods, properties


def _decorator_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _local_names(node: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """Parameters and names the function assigns (a call through one may reach any callable)."""
    names = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
    names.update(a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None)
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            names.add(child.id)
    return frozenset(names)


def module_imports(tree: ast.Module):
    """The ``from m import ...`` statements a module runs at its own level (also inside ``if`` and
    ``try``), in the order they may run: a ``try`` body before its handlers."""
    for node in tree.body:
        yield from _imports_in(node)


def _imports_in(node: ast.stmt):
    if isinstance(node, ast.ImportFrom):
        yield node
    elif isinstance(node, (ast.If, ast.Try)):
        inner = [*node.body, *(s for h in getattr(node, "handlers", ()) for s in h.body), *node.orelse]
        for statement in (*inner, *getattr(node, "finalbody", ())):
            yield from _imports_in(statement)


def _import_aliases(tree: ast.Module) -> dict[str, tuple[str, ...]]:
    """``from m import a as b`` -> {"b": ("a",)}: the frame of a call of b is named a (module-level
    imports, also inside ``if``/``try`` at module level)."""
    aliases: dict[str, tuple[str, ...]] = {}
    for node in module_imports(tree):
        for alias in node.names:
            if alias.asname and alias.asname != alias.name:
                aliases[alias.asname] = (*aliases.get(alias.asname, ()), alias.name)
    return aliases
