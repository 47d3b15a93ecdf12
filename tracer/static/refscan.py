"""The reference path: libcst parses the whole file and one visitor finds every site, no pre-filter.

Slow (libcst parse plus PositionProvider), used to check that the fast path finds the same sites.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from tracer.model.site import Site
from tracer.static.matching import Context, ImportTable, SiteMatcher, dotted_name, is_string_key
from tracer.static.rules import RuleSet

_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _decorator_name(decorator: cst.Decorator) -> str | None:
    node = decorator.decorator
    return dotted_name(node.func if isinstance(node, cst.Call) else node)


class _SiteCollector(cst.CSTVisitor):
    """Tracks scopes and loops with its own stacks; records candidate nodes with their context."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, skip_decorators: frozenset[str], default_indent: str) -> None:
        super().__init__()
        self.default_indent = default_indent
        self.indent: list[str] = []  # the enclosing blocks' indentation, outermost first
        self.skip = skip_decorators
        self.imports = ImportTable()
        self.scopes: list[tuple[str, Context, bool]] = [("", Context("<module>", None, False), False)]
        self.loop_depth: list[int] = [0]
        self.outer_fors: set[int] = set()
        self.calls: list[tuple[cst.Call, int, int, Context, tuple[str, ...]]] = []
        self.stores: list[
            tuple[cst.Subscript, cst.BaseSmallStatement, int, int, int, Context, tuple[str, ...]]
        ] = []

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self.indent.append(self.default_indent if node.indent is None else node.indent)

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock) -> None:
        self.indent.pop()

    def _ctx(self) -> Context:
        ctx = self.scopes[-1][1]
        in_loop = self.loop_depth[-1] > 0
        return ctx if in_loop == ctx.in_loop else Context(ctx.function, ctx.def_line, in_loop)

    def _start(self, node: cst.CSTNode) -> tuple[int, int]:
        pos = self.get_metadata(PositionProvider, node).start
        return pos.line, pos.column

    # -- scopes --
    def _enter_scope(self, node: cst.FunctionDef | cst.ClassDef, is_function: bool) -> None:
        prefix = self.scopes[-1][0]
        first = self._start(node.decorators[0] if node.decorators else node)[0]
        qualname = f"{prefix}{node.name.value}"
        child_prefix = f"{qualname}.<locals>." if is_function else f"{qualname}."
        self.scopes.append((child_prefix, Context(qualname, first, False), is_function))
        self.loop_depth.append(0)

    def _leave_scope(self) -> None:
        self.scopes.pop()
        self.loop_depth.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return not any(_decorator_name(d) in self.skip for d in node.decorators)

    def visit_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self._enter_scope(node, True)

    def leave_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self._leave_scope()

    def visit_ClassDef_body(self, node: cst.ClassDef) -> None:
        self._enter_scope(node, False)

    def leave_ClassDef_body(self, node: cst.ClassDef) -> None:
        self._leave_scope()

    # -- loops: a for-loop's body and a while-loop's test and body run per iteration --
    def _loop_in(self, node: cst.CSTNode) -> None:
        self.loop_depth[-1] += 1

    def _loop_out(self, node: cst.CSTNode) -> None:
        self.loop_depth[-1] -= 1

    visit_For_body = _loop_in
    leave_For_body = _loop_out
    visit_While_test = _loop_in
    leave_While_test = _loop_out
    visit_While_body = _loop_in
    leave_While_body = _loop_out

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, _COMPREHENSIONS):
            self.loop_depth[-1] += 1
            self.outer_fors.add(id(node.for_in))
        return super().on_visit(node)

    # A comprehension's first iterable is evaluated once, outside the loop.
    def visit_CompFor_iter(self, node: cst.CompFor) -> None:
        if id(node) in self.outer_fors:
            self.loop_depth[-1] -= 1

    def leave_CompFor_iter(self, node: cst.CompFor) -> None:
        if id(node) in self.outer_fors:
            self.loop_depth[-1] += 1

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        if isinstance(original_node, _COMPREHENSIONS):
            self.loop_depth[-1] -= 1

    # -- imports --
    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = cst.Module(body=[]).code_for_node(alias.name)
            self.imports.add_import(name, alias.asname.name.value if alias.asname else None)  # type: ignore[union-attr]

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = "." * len(node.relative) + (
            cst.Module(body=[]).code_for_node(node.module) if node.module is not None else ""
        )
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            asname = alias.asname.name.value if alias.asname else None  # type: ignore[union-attr]
            self.imports.add_from(module, cst.Module(body=[]).code_for_node(alias.name), asname)

    # -- candidates --
    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append((node, *self._start(node.func), self._ctx(), tuple(self.indent)))

    def _store(self, statement: cst.BaseSmallStatement, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Subscript) and not is_string_key(target):
            line, col = self._start(target)
            self.stores.append(
                (target, statement, self._start(statement)[0], line, col, self._ctx(), tuple(self.indent))
            )

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._store(node, target.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._store(node, node.target)


def scan_module_reference(source: bytes | str, rules: RuleSet, path: str) -> list[Site]:
    """Every site in one file, found by a whole-module libcst visit."""
    module = cst.parse_module(source)
    collector = _SiteCollector(rules.skip_decorators, module.default_indent)
    MetadataWrapper(module, unsafe_skip_copy=True).visit(collector)
    matcher = SiteMatcher(rules, path, collector.imports)
    sites = []
    for call, line, col, ctx, indent in collector.calls:
        if matcher.is_call_candidate(call):
            matcher.indent = indent
            site = matcher.match_call(call, line, col, ctx)
            if site is not None:
                sites.append(site)
    if rules.matches_stores:
        for target, statement, stmt_line, line, col, ctx, indent in collector.stores:
            matcher.indent = indent
            site = matcher.match_store(target, statement, stmt_line, line, col, ctx)
            if site is not None:
                sites.append(site)
    return sites
