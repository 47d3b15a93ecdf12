"""Put a site range around the statement that launches each site, keeping every line and column.

The transformation works on the module's syntax tree, not its text: each statement holding a site
becomes ``with __kt_range__("kt:site:<id>@<path>:<line>"): <statement>``, where the new ``with``
node takes the statement's own position and the statement keeps the position it was parsed with.
Compiling that tree gives code whose line table (and column table) matches the original for every
original statement: tracebacks, profiler frames and debuggers see the file on disk exactly as it is,
and nothing but the range is added. (A text rewrite, with libcst or otherwise, would shift the
columns of the rewritten lines; the tree keeps them.)

Sites that no statement-level range can bracket exactly are skipped with a reason: a site in the
header of a compound statement (``if``/``for``/``while``/``with``, decorators, defaults), inside a
lambda (it runs later), in a statement that suspends (``yield``/``await``: the range would cover
other work), or inside a function compiled by torch.compile/JIT (a range there is a graph break).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import CodeType
from typing import TypedDict

from tracer.instrument.runtime import HELPER_NAME
from tracer.model.ranges import site_range_name
from tracer.model.site import Site

# Statements that hold other statements: a site in one of these (outside a nested body) is in a header.
_COMPOUND = (
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Try,
    ast.Match,
) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())
_KEYWORDS = {
    "If": "if",
    "For": "for",
    "AsyncFor": "async for",
    "While": "while",
    "With": "with",
    "AsyncWith": "async with",
    "FunctionDef": "def",
    "AsyncFunctionDef": "async def",
    "ClassDef": "class",
    "Try": "try",
    "TryStar": "try",
    "Match": "match",
}
_SUSPENDING = (ast.Yield, ast.YieldFrom, ast.Await)
# Decorators after which a range in the body would break a compiled graph or a JIT kernel.
_COMPILED_DECORATOR_WORDS = ("compile", "jit", "triton", "cute.kernel")


@dataclass(frozen=True)
class SkippedSite:
    """A site left without a range, and why (one line)."""

    site: Site
    reason: str


@dataclass(frozen=True)
class RewriteResult:
    """The rewritten module tree, which sites got a range, which shared one statement, which were skipped."""

    tree: ast.Module
    placed: tuple[Site, ...]
    skipped: tuple[SkippedSite, ...]
    # Statements holding several sites: one range, named after the first site listed (the riskiest);
    # every op of the statement is inside it, so the trace names the line, and that site.
    shared: tuple[tuple[Site, ...], ...] = field(default=())

    def compile(self, filename: str) -> CodeType:
        return compile(self.tree, filename, "exec", dont_inherit=True)


def rewrite_module(
    source: str | bytes, sites: Sequence[Site], filename: str = "<kerneltrace>"
) -> RewriteResult:
    """Wrap the statements launching `sites` (all in this one file) in site ranges.

    Raises SyntaxError if `source` does not parse (the caller then leaves the module alone).
    """
    tree = ast.parse(source, filename=filename)
    placer = _RangePlacer(sites)
    placer.visit(tree)
    return RewriteResult(tree, tuple(placer.placed), tuple(placer.skipped), tuple(placer.shared))


def _position(site: Site) -> tuple[int, int]:
    return (site.line, site.col)


def _start(node: ast.AST) -> tuple[int, int]:
    return (node.lineno, node.col_offset)  # type: ignore[attr-defined]


def _end(node: ast.AST) -> tuple[int, int]:
    end_line = getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
    end_col = getattr(node, "end_col_offset", None)
    return (end_line, end_col if end_col is not None else 1 << 30)


def _contains(node: ast.AST, position: tuple[int, int]) -> bool:
    return _start(node) <= position < _end(node) or _start(node) == position


class _RangePlacer(ast.NodeTransformer):
    """Walks statement lists; wraps each simple statement that holds sites, records the rest."""

    def __init__(self, sites: Iterable[Site]) -> None:
        self.pending: list[Site] = sorted(sites, key=_position)
        self.placed: list[Site] = []
        self.skipped: list[SkippedSite] = []
        self.shared: list[tuple[Site, ...]] = []
        self.compiled_depth = 0  # > 0 inside a function whose decorators compile it

    # -- bookkeeping ------------------------------------------------------------------------------
    def _take(self, node: ast.AST) -> list[Site]:
        """Remove and return the pending sites inside `node`."""
        inside = [s for s in self.pending if _contains(node, _position(s))]
        if inside:
            taken = set(map(id, inside))
            self.pending = [s for s in self.pending if id(s) not in taken]
        return inside

    def _skip(self, sites: Iterable[Site], reason: str) -> None:
        self.skipped.extend(SkippedSite(site, reason) for site in sites)

    # -- traversal --------------------------------------------------------------------------------
    def visit_Module(self, node: ast.Module) -> ast.Module:
        node.body = self._statements(node.body)
        self._skip(self.pending, "no statement of the file starts at or spans this position")
        self.pending = []
        return node

    def _statements(self, body: list[ast.stmt]) -> list[ast.stmt]:
        return [self._statement(stmt) for stmt in body]

    def _statement(self, stmt: ast.stmt) -> ast.stmt:
        if not any(_contains(stmt, _position(s)) for s in self.pending):
            return stmt
        if isinstance(stmt, _COMPOUND):
            return self._compound(stmt)
        return self._wrap(stmt, self._take(stmt))

    def _compound(self, stmt: ast.stmt) -> ast.stmt:
        compiled = isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_compiled(stmt)
        self.compiled_depth += compiled
        try:
            for name in ("body", "orelse", "finalbody"):
                block = getattr(stmt, name, None)
                if block:
                    setattr(stmt, name, self._statements(block))
            for handler in getattr(stmt, "handlers", ()):
                handler.body = self._statements(handler.body)
            for case in getattr(stmt, "cases", ()):
                case.body = self._statements(case.body)
        finally:
            self.compiled_depth -= compiled
        kind = _KEYWORDS.get(type(stmt).__name__, type(stmt).__name__)
        self._skip(self._take(stmt), f"in the header of a `{kind}` statement: no statement range brackets it")
        return stmt

    def _wrap(self, stmt: ast.stmt, sites: list[Site]) -> ast.stmt:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            # A docstring (or a bare constant) launches nothing; wrapped, it would stop being `__doc__`.
            self._skip(sites, "a constant statement (a docstring?): it launches nothing")
            return stmt
        if self.compiled_depth:
            self._skip(sites, "inside a torch.compile/JIT function: a range there would break the graph")
            return stmt
        if any(isinstance(node, _SUSPENDING) for node in ast.walk(stmt)):
            self._skip(sites, "the statement suspends (yield/await): its range would cover other work")
            return stmt
        lambdas = [node for node in ast.walk(stmt) if isinstance(node, ast.Lambda)]
        in_lambda = [s for s in sites if any(_contains(lam.body, _position(s)) for lam in lambdas)]
        if in_lambda:
            self._skip(in_lambda, "inside a lambda: it runs later, outside this statement's range")
            sites = [s for s in sites if s not in in_lambda]
        if not sites:
            return stmt
        self.placed.extend(sites)
        # One range per statement: nested ranges around one statement would all enclose the same ops
        # (the join reads the innermost), so the extra ones would only cost. It names the riskiest.
        named = max(sites, key=lambda s: (s.risk, s.launches_kernel, -s.line, -s.col))
        if len(sites) > 1:
            self.shared.append((named, *(s for s in sites if s is not named)))
        return _with_range(stmt, site_range_name(named))


class _Where(TypedDict):
    """A node's location, as the `ast` node constructors take it."""

    lineno: int
    col_offset: int
    end_lineno: int | None
    end_col_offset: int | None


def _with_range(stmt: ast.stmt, name: str) -> ast.With:
    """``with __kt_range__(name): stmt``, every new node placed exactly on `stmt`."""
    where: _Where = {
        "lineno": stmt.lineno,
        "col_offset": stmt.col_offset,
        "end_lineno": stmt.end_lineno,
        "end_col_offset": stmt.end_col_offset,
    }
    call = ast.Call(
        func=ast.Name(id=HELPER_NAME, ctx=ast.Load(), **where),
        args=[ast.Constant(value=name, **where)],
        keywords=[],
        **where,
    )
    return ast.With(items=[ast.withitem(context_expr=call, optional_vars=None)], body=[stmt], **where)


def _is_compiled(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in function.decorator_list:
        text = ast.unparse(decorator)
        if any(word in text for word in _COMPILED_DECORATOR_WORDS):
            return True
    return False
