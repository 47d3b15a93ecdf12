"""What a frame's run shows (its calls, as `Token`s) and what each source point may show (the costs).

A run of a user frame is observed as the sequence of its children in time order: child frames
(a builtin such as ``<built-in method to of Tensor object>``, a Python function, an
``nn.Module: Linear_0`` marker) and the CPU ops that ran directly in it, with no frame between
(``a * b`` runs ``aten::mul`` with no call of its own). This module turns those into tokens and
says, in one place, how well a `CallPoint` explains a token (`match_cost`), what it costs when a
point shows nothing (`skip_cost`) and when a token is explained by no point (`insert_cost`).

The costs are small integers' worth of "surprise": 0 for the expected (``.to(...)`` showing a
``to`` builtin), a little for what Python often does silently (an operator on numbers, a type
call), more for what should have shown (a tensor method that left no frame). They were set by
reasoning about what CPython's profiler hooks record, then checked on the truth corpus
(bench/accuracy.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from tracer.join.frames import builtin_name, is_library_file, parse_frame
from tracer.join.program import (
    BY_ATTRIBUTE,
    BY_LOCAL,
    BY_NAME,
    BY_SELF_ATTRIBUTE,
    BY_SELF_METHOD,
    BY_SUBSCRIPT,
    BY_TYPE,
    CALL,
    ENTER,
    EXIT,
    FRAME,
    GETITEM,
    ITER,
    OPAQUE,
    OPERATOR,
    PROPERTY,
    SCALAR_CONVERSIONS,
    SETITEM,
    VIEWS,
    CallPoint,
)
from tracer.model.events import Cat

# Token kinds.
BUILTIN, PYTHON, MODULE, OP = "builtin", "python", "module", "op"

# Other names the profiler gives the op of an operator (``a | b`` runs ``aten::__or__``).
OPERATOR_ALIASES: dict[str, str] = {
    "aten::__or__": "aten::bitwise_or",
    "aten::__and__": "aten::bitwise_and",
    "aten::__xor__": "aten::bitwise_xor",
    "aten::__ior__": "aten::bitwise_or_",
    "aten::__iand__": "aten::bitwise_and_",
    "aten::__ixor__": "aten::bitwise_xor_",
    "aten::__lshift__": "aten::bitwise_left_shift",
    "aten::__rshift__": "aten::bitwise_right_shift",
    "aten::rsub": "aten::sub",
    "aten::true_divide": "aten::div",
    "aten::true_divide_": "aten::div_",
    "aten::bmm": "aten::matmul",
    "aten::mm": "aten::matmul",
    "aten::floor_divide_": "aten::floor_divide_",
}
# Ops a subscript load or store runs directly in the frame.
GETITEM_OPS = frozenset({"aten::index", "aten::slice", "aten::select", "aten::masked_select"})
SETITEM_OPS = frozenset(
    {"aten::index_put_", "aten::copy_", "aten::fill_", "aten::masked_fill_", "aten::masked_scatter_"}
)
# Ops that move no data (views, metadata, scalar reads): they show up in many places, explain little.
QUIET_OPS = frozenset(
    {
        "aten::slice",
        "aten::select",
        "aten::alias",
        "aten::view",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::expand",
        "aten::as_strided",
        "aten::detach",
        "aten::detach_",
        "aten::t",
        "aten::numpy_T",
        "aten::permute",
        "aten::transpose",
        "aten::unbind",
        "aten::lift_fresh",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::is_nonzero",
        "aten::result_type",
        "aten::empty",
        "aten::empty_like",
        "aten::resolve_conj",
        "aten::resolve_neg",
        "aten::size",
        "aten::stride",
        "aten::sym_size",
        "aten::dim",
        "aten::is_floating_point",
        "aten::equal",
    }
)
SCALAR_OPS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::is_nonzero"})
# Python frames every caller shares (attribute plumbing, context managers, iteration, hashing).
_PLUMBING = re.compile(r"^__\w+__$")
# Owners of builtin methods that are no tensor work (``<built-in method get of dict object>``).
_CONTAINER_OWNER = re.compile(
    r" of (dict|list|set|str|tuple|frozenset|collections\.\w+|_contextvars\.\w+) object"
)

# The costs (see the module docstring).
FREE = 0.0
ALIAS = 0.3  # a name the callee's frame may carry under another name (import alias, __init__)
WILDCARD = 1.0  # a callee known only at run time (a local variable, a partial, a decorator)
MODULE_GUESS = 0.7  # obj.x(...) that turns out to be an nn.Module call
DTYPE_MISMATCH = 3.0  # the op cast to another dtype than the source says


@dataclass(frozen=True)
class Token:
    """One observed child of a frame's run."""

    kind: str  # BUILTIN, PYTHON, MODULE, OP
    name: str  # the method, function, module class or aten op
    noise: bool = False  # plumbing every caller shares: cheap to leave unexplained
    user: bool = False  # a Python frame of user code
    bias: bool | None = None  # an op of a layer with an optional bias: whether it had one (shapes)


# ops of layers whose bias is optional (``nn.Linear(..., bias=False)``): their third input is the bias
BIASED_OPS = frozenset({"aten::linear", "aten::conv1d", "aten::conv2d"})
# a window's name of such an op says what its shapes showed (`with_bias`; read back by `token_of`)
_BIAS_MARKS = {True: " (bias)", False: " (no bias)"}


def with_bias(name: str, args: dict | None) -> str:
    """`name`, marked with whether the op's recorded shapes show a bias (unmarked: no shapes)."""
    dims = args.get("Input Dims") if name in BIASED_OPS and args else None
    if not isinstance(dims, list) or len(dims) < 3:
        return name
    return name + _BIAS_MARKS[bool(dims[2])]


@lru_cache(maxsize=65536)
def token_of(name: str, cat: int) -> Token:
    """The token of a child row: its trace name and category."""
    if cat == Cat.CPU_OP:
        bias = None
        for value, mark in _BIAS_MARKS.items():
            if name.endswith(mark):
                name, bias = name.removesuffix(mark), value
        op = OPERATOR_ALIASES.get(name, name)
        return Token(OP, op, noise=op in QUIET_OPS, bias=bias)
    if name.startswith("<built-in"):
        method = builtin_name(name) or name
        noise = _CONTAINER_OWNER.search(name) is not None or " of pybind11" in name or method.startswith("_")
        if " function " in name[:20] and method in _PYTHON_BUILTINS:
            noise = True
        return Token(BUILTIN, method, noise=noise)
    if name.startswith("nn.Module: "):
        return Token(MODULE, name.removeprefix("nn.Module: "))
    frame = parse_frame(name)
    library = is_library_file(frame.file)
    return Token(
        PYTHON, frame.function, noise=library or bool(_PLUMBING.match(frame.function)), user=not library
    )


_PYTHON_BUILTINS = frozenset(
    {
        "isinstance",
        "issubclass",
        "getattr",
        "setattr",
        "hasattr",
        "len",
        "id",
        "hash",
        "callable",
        "iter",
        "next",
        "all",
        "any",
        "repr",
        "print",
        "sorted",
        "sum",
        "max",
        "min",
        "abs",
        "round",
        "vars",
        "locals",
        "globals",
        "divmod",
        "format",
    }
)


def views_of(point: CallPoint) -> frozenset[str]:
    """The ops a `VIEWS` point may run: its own (a truth test reads a value: ``is_nonzero``, never
    a view), else any quiet op."""
    return point.views if point.views is not None else QUIET_OPS


def match_cost(point: CallPoint, token: Token) -> float | None:
    """The cost of `point` explaining `token`, or None when it cannot."""
    kind = point.kind
    if kind == CALL:
        return _call_cost(point, token)
    if token.kind == OP:
        name = token.name
        if kind == OPERATOR:
            return FREE if name == point.name else None
        if kind == GETITEM:
            return FREE if name in GETITEM_OPS else None
        if kind == SETITEM:
            return FREE if name in SETITEM_OPS else None
        if kind == VIEWS:
            return FREE if name in views_of(point) else None
        if kind == ITER:
            return FREE if name == "aten::unbind" else None
        return None
    if kind == ITER:
        return FREE if token.name in ("__iter__", "unbind") else None
    if kind in (GETITEM, SETITEM):
        # Python-level indexing: nn.ModuleList, a dict subclass, a tensor subclass.
        return FREE if token.kind == PYTHON and token.name == point.name else None
    if kind == FRAME:
        return FREE if token.kind == PYTHON and token.name == point.name else None
    if kind in (ENTER, EXIT):
        return FREE if token.kind in (PYTHON, BUILTIN) and token.name == point.name else None
    if kind == PROPERTY:
        return FREE if token.kind == PYTHON and token.name == point.name else None
    if kind == OPERATOR and token.kind == PYTHON and token.name.startswith("__"):
        return WILDCARD  # an operator on Python objects: their __mul__ & co
    return None


def _call_cost(point: CallPoint, token: Token) -> float | None:
    callee, name = point.callee, point.name
    kind = token.kind
    if kind == OP:
        if callee == BY_TYPE:
            return FREE if name in SCALAR_CONVERSIONS and token.name in SCALAR_OPS else None
        # A callable with no frame of its own runs its ops right here: a partial of a tensor
        # method (`to_bf16 = partial(torch.Tensor.to, ...)`), an operator.methodcaller, a C callable.
        return WILDCARD if callee in (OPAQUE, BY_NAME, BY_LOCAL, BY_SELF_ATTRIBUTE) else None
    if kind == MODULE:
        if callee in (BY_SELF_ATTRIBUTE, BY_SUBSCRIPT):
            return FREE
        if callee in (BY_LOCAL, BY_NAME, BY_ATTRIBUTE, OPAQUE):
            return MODULE_GUESS  # a module held in a variable, a closure, another object
        return None
    if token.name == name or token.name in point.aliases:
        return FREE
    if callee == BY_TYPE:
        return None
    if kind == PYTHON:
        if token.name in ("__init__", "__new__", "__post_init__", "__call__"):
            return ALIAS  # a class instantiated, a callable object called
        return WILDCARD  # a local callable, a decorator's wrapper, an alias made at run time
    if kind == BUILTIN and callee in (OPAQUE, BY_LOCAL, BY_NAME, BY_SELF_ATTRIBUTE, BY_SUBSCRIPT):
        return WILDCARD  # getattr(x, "to")(...), fn = torch.cat; fn(...), self.act = F.gelu; self.act(x)
    return None


def skip_cost(point: CallPoint) -> float:
    """The cost of `point` running without showing anything."""
    kind = point.kind
    if kind == CALL:
        if point.callee == BY_TYPE:
            return 0.05
        if point.name[:1].isupper():
            return 0.3  # a class: C types record nothing
        if point.callee == OPAQUE:
            return 0.3
        if point.callee == BY_SELF_METHOD:
            return 2.0
        return 1.5
    if kind == OPERATOR:
        return 0.05 if point.scalar_like else 0.2
    if kind == GETITEM:
        return 0.3 if point.tensor_index else 0.05
    if kind == SETITEM:
        return 0.3
    if kind == VIEWS:
        return 0.0
    if kind == FRAME:
        return 1.0 if point.name != "<genexpr>" else 0.05
    return 0.05  # ENTER, EXIT, PROPERTY: C context managers and plain attributes show nothing


def insert_cost(token: Token) -> float:
    """The cost of `token` being explained by no point of the function."""
    if token.noise:
        return 0.1 if token.kind == OP else 0.3
    if token.kind == OP:
        return 1.0
    if token.kind == PYTHON and not token.user:
        return 1.0
    return 2.0


class FramedCosts:
    """The costs of aligning a frame's whole run (`match_cost`, `skip_cost`, `insert_cost`); a
    subscript's views may repeat, nothing else may (a loop repeats a call)."""

    match = staticmethod(match_cost)
    skip = staticmethod(skip_cost)
    insert = staticmethod(insert_cost)

    @staticmethod
    def repeat(point: CallPoint, token: Token) -> float | None:
        return match_cost(point, token) if point.kind == VIEWS else None


FRAMED = FramedCosts()
