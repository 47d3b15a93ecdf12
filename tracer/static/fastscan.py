"""The fast path: a regex finds candidate lines, stdlib `ast` finds the statements and their context,
and libcst parses only each candidate's own source text (the whole file never goes through libcst)."""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterator, Sequence

import libcst as cst

from tracer.model.site import Site
from tracer.static.matching import Context, ImportTable, SiteMatcher
from tracer.static.rules import RuleSet

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_STORE_OPERATORS = rb"(?:=(?!=)|(?:\+|-|\*\*?|//?|%|@|&|\||\^|<<|>>)=)"


def prefilter_pattern(rules: RuleSet) -> re.Pattern[bytes]:
    """Bytes that every candidate's statement must contain: `.name(`, `name(`, `]=`."""
    attrs = sorted(rules.method_names | {f.rsplit(".", 1)[-1] for f in rules.function_names})
    bare = sorted({f.rsplit(".", 1)[-1] for f in rules.function_names})
    parts = [rb"\.\s*(?:" + b"|".join(re.escape(n.encode()) for n in attrs) + rb")\s*\("]
    if bare:
        parts.append(rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in bare) + rb")\s*\(")
    if rules.matches_stores:
        parts.append(rb"\]\s*" + _STORE_OPERATORS)
    return re.compile(b"|".join(parts))


def alias_pattern(rules: RuleSet) -> re.Pattern[bytes]:
    """`cat as c` in a from-import: then `c(` must count as a candidate too."""
    bare = sorted({f.rsplit(".", 1)[-1] for f in rules.function_names}) or ["\0"]
    return re.compile(rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in bare) + rb")\s+as\s+(\w+)")


def hit_lines(source: bytes, pattern: re.Pattern[bytes], aliases: re.Pattern[bytes]) -> list[int]:
    """Sorted 1-based line numbers where a candidate pattern starts."""
    starts = [m.start() for m in pattern.finditer(source)]
    extra = {m.group(1) for m in aliases.finditer(source)}
    if extra:
        alias_re = re.compile(rb"\b(?:" + b"|".join(re.escape(a) for a in extra) + rb")\s*\(")
        starts.extend(m.start() for m in alias_re.finditer(source))
    if not starts:
        return []
    starts.sort()
    lines = []
    line, previous = 1, 0
    for start in starts:
        line += source.count(b"\n", previous, start)
        previous = start
        lines.append(line)
    return sorted(set(lines))


class _Lines:
    """Source lines, and ast's UTF-8 byte columns turned into character columns and text spans."""

    def __init__(self, text: str) -> None:
        self.lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._encoded: dict[int, bytes] = {}

    def _bytes(self, line: int) -> bytes:
        raw = self._encoded.get(line)
        if raw is None:
            raw = self._encoded[line] = self.lines[line - 1].encode("utf-8")
        return raw

    def char_col(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1]
        if text.isascii():
            return byte_col
        return len(self._bytes(line)[:byte_col].decode("utf-8", errors="replace"))

    def segment(self, node: ast.AST) -> str:
        first, last = node.lineno, node.end_lineno  # type: ignore[attr-defined]
        start, end = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
        if first == last:
            return self._bytes(first)[start:end].decode("utf-8")
        chunks = [self._bytes(first)[start:]]
        chunks.extend(self._bytes(n) for n in range(first + 1, last))
        chunks.append(self._bytes(last)[:end])
        return b"\n".join(chunks).decode("utf-8")


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def decorator_name(node: ast.expr) -> str | None:
    return _dotted(node.func if isinstance(node, ast.Call) else node)


class _Candidate:
    __slots__ = ("ctx", "node", "statement", "target_index")

    def __init__(
        self, node: ast.AST, ctx: Context, statement: ast.stmt | None = None, target_index: int = -1
    ):
        self.node, self.ctx, self.statement, self.target_index = node, ctx, statement, target_index


class _StatementWalk:
    """Pass 1: every statement with its context; keeps those whose text holds a hit line."""

    def __init__(self, hits: Sequence[int], skip_decorators: frozenset[str]) -> None:
        self.hits = hits
        self.skip = skip_decorators
        self.imports = ImportTable()
        # (ast node to search, context, True when it is a whole simple statement)
        self.pieces: list[tuple[ast.AST, Context, bool]] = []

    def _hit(self, node: ast.AST) -> bool:
        i = bisect.bisect_left(self.hits, node.lineno)  # type: ignore[attr-defined]
        return i < len(self.hits) and self.hits[i] <= node.end_lineno  # type: ignore[attr-defined]

    def _header(self, nodes: Iterator[ast.AST | None], ctx: Context) -> None:
        for node in nodes:
            if node is not None and self._hit(node):
                self.pieces.append((node, ctx, False))

    def block(self, body: list[ast.stmt], ctx: Context, prefix: str, in_function: bool) -> None:
        for stmt in body:
            self.statement(stmt, ctx, prefix, in_function)

    def statement(self, stmt: ast.stmt, ctx: Context, prefix: str, in_function: bool) -> None:
        if isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
            if isinstance(stmt, _FUNCTIONS) and any(
                decorator_name(d) in self.skip for d in stmt.decorator_list
            ):
                return  # a Triton/CuTe kernel: compiled, launches no aten op
            first = stmt.decorator_list[0].lineno if stmt.decorator_list else stmt.lineno
            if self._hit_range(first, stmt.end_lineno):  # type: ignore[arg-type]
                self._header(iter(stmt.decorator_list), ctx)
                if isinstance(stmt, ast.ClassDef):
                    self._header(iter(stmt.bases), ctx)
                    self._header((k.value for k in stmt.keywords), ctx)
                else:
                    args = stmt.args
                    self._header(iter(args.defaults), ctx)
                    self._header(iter(args.kw_defaults), ctx)
                    self._header(
                        (a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)), ctx
                    )
                    self._header(
                        iter((args.vararg and args.vararg.annotation, args.kwarg and args.kwarg.annotation)),
                        ctx,
                    )
                    self._header(iter((stmt.returns,)), ctx)
            qualname = f"{prefix}{stmt.name}"
            inner = Context(qualname, first, False)
            child_prefix = f"{qualname}.<locals>." if isinstance(stmt, _FUNCTIONS) else f"{qualname}."
            self.block(stmt.body, inner, child_prefix, isinstance(stmt, _FUNCTIONS))
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            self._header(iter((stmt.target, stmt.iter)), ctx)
            loop = Context(ctx.function, ctx.def_line, True)
            self.block(stmt.body, loop, prefix, in_function)
            self.block(stmt.orelse, ctx, prefix, in_function)
        elif isinstance(stmt, ast.While):
            loop = Context(ctx.function, ctx.def_line, True)
            self._header(iter((stmt.test,)), loop)
            self.block(stmt.body, loop, prefix, in_function)
            self.block(stmt.orelse, ctx, prefix, in_function)
        elif isinstance(stmt, ast.If):
            self._header(iter((stmt.test,)), ctx)
            self.block(stmt.body, ctx, prefix, in_function)
            self.block(stmt.orelse, ctx, prefix, in_function)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            self._header((i.context_expr for i in stmt.items), ctx)
            self._header((i.optional_vars for i in stmt.items), ctx)
            self.block(stmt.body, ctx, prefix, in_function)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            self.block(stmt.body, ctx, prefix, in_function)  # type: ignore[attr-defined]
            for handler in stmt.handlers:  # type: ignore[attr-defined]
                self._header(iter((handler.type,)), ctx)
                self.block(handler.body, ctx, prefix, in_function)
            self.block(stmt.orelse, ctx, prefix, in_function)  # type: ignore[attr-defined]
            self.block(stmt.finalbody, ctx, prefix, in_function)  # type: ignore[attr-defined]
        elif isinstance(stmt, ast.Match):
            self._header(iter((stmt.subject,)), ctx)
            for case in stmt.cases:
                self._header(iter((case.guard,)), ctx)
                self.block(case.body, ctx, prefix, in_function)
        else:
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    self.imports.add_import(alias.name, alias.asname)
            elif isinstance(stmt, ast.ImportFrom):
                module = "." * stmt.level + (stmt.module or "")
                for alias in stmt.names:
                    self.imports.add_from(module, alias.name, alias.asname)
            elif self._hit(stmt):
                self.pieces.append((stmt, ctx, True))

    def _hit_range(self, first: int, last: int) -> bool:
        i = bisect.bisect_left(self.hits, first)
        return i < len(self.hits) and self.hits[i] <= last


def _find_candidates(
    piece: ast.AST, ctx: Context, whole_statement: bool, matcher_names: tuple
) -> list[_Candidate]:
    """Pass 2: the candidate calls and stores inside one statement or header expression."""
    attr_names, bare_names, stores = matcher_names
    found: list[_Candidate] = []
    loop_ctx = Context(ctx.function, ctx.def_line, True)

    def visit(node: ast.AST, current: Context) -> None:
        if isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr in attr_names) or (
                isinstance(func, ast.Name) and func.id in bare_names
            ):
                found.append(_Candidate(node, current))
        elif isinstance(node, _COMPREHENSIONS):
            # The first `for`'s iterable is evaluated once, outside; the rest runs per element.
            outer_iter = node.generators[0].iter
            visit(outer_iter, current)
            for child in ast.iter_child_nodes(node):
                if child is not node.generators[0]:
                    visit(child, loop_ctx)
            first = node.generators[0]
            for child in (first.target, *first.ifs):
                visit(child, loop_ctx)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, current)

    if whole_statement and stores and isinstance(piece, (ast.Assign, ast.AugAssign)):
        targets = piece.targets if isinstance(piece, ast.Assign) else [piece.target]
        for index, target in enumerate(targets):
            if isinstance(target, ast.Subscript) and not _string_key(target):
                found.append(_Candidate(target, ctx, piece, index))
    visit(piece, ctx)
    return found


def _string_key(target: ast.Subscript) -> bool:
    index = target.slice
    return (isinstance(index, ast.Constant) and isinstance(index.value, (str, bytes))) or isinstance(
        index, ast.JoinedStr
    )


class SnippetError(Exception):
    """libcst could not parse a candidate's text (ast could): reported, the rest of the file scans."""


def scan_tree(
    tree: ast.Module, text: str, hits: Sequence[int], rules: RuleSet, path: str
) -> tuple[list[Site], list[str]]:
    """Sites in one parsed file, and problems with single candidates (line: reason)."""
    walk = _StatementWalk(hits, rules.skip_decorators)
    walk.block(tree.body, Context("<module>", None, False), "", False)
    if not walk.pieces:
        return [], []
    matcher = SiteMatcher(rules, path, walk.imports)
    names = (matcher.attr_names, matcher.bare_names, rules.matches_stores)
    lines = _Lines(text)
    sites: list[Site] = []
    problems: list[str] = []
    parsed_statements: dict[int, tuple[cst.BaseSmallStatement, str]] = {}
    for piece, ctx, whole in walk.pieces:
        for cand in _find_candidates(piece, ctx, whole, names):
            node = cand.node
            try:
                if cand.statement is None:
                    segment = lines.segment(node)
                    site = matcher.match_call(
                        _parse_call(segment),
                        node.lineno,  # type: ignore[attr-defined]
                        lines.char_col(node.lineno, node.col_offset),  # type: ignore[attr-defined]
                        cand.ctx,
                        segment,
                    )
                else:
                    parsed = parsed_statements.get(id(cand.statement))
                    if parsed is None:
                        segment = lines.segment(cand.statement)
                        parsed = parsed_statements[id(cand.statement)] = (_parse_statement(segment), segment)
                    stmt, segment = parsed
                    target = (
                        stmt.targets[cand.target_index].target
                        if isinstance(stmt, cst.Assign)
                        else stmt.target
                        if isinstance(stmt, (cst.AugAssign, cst.AnnAssign))
                        else None
                    )
                    if not isinstance(target, cst.Subscript):  # ast saw a subscript store here
                        raise SnippetError(f"expected a subscript store in {segment[:60]!r}")
                    site = matcher.match_store(
                        target,
                        stmt,
                        cand.statement.lineno,
                        node.lineno,  # type: ignore[attr-defined]
                        lines.char_col(node.lineno, node.col_offset),  # type: ignore[attr-defined]
                        cand.ctx,
                        segment,
                    )
            except SnippetError as err:
                problems.append(f"line {node.lineno}: {err}")  # type: ignore[attr-defined]
                continue
            if site is not None:
                sites.append(site)
    return sites, problems


def _parse_call(segment: str) -> cst.Call:
    try:
        node = cst.parse_expression(f"({segment})")
    except cst.ParserSyntaxError as err:
        raise SnippetError(f"libcst cannot parse {segment[:60]!r}: {err.message}") from None
    if not isinstance(node, cst.Call):
        raise SnippetError(f"expected a call in {segment[:60]!r}")
    return node


def _parse_statement(segment: str) -> cst.BaseSmallStatement:
    try:
        line = cst.parse_statement(segment + "\n")
    except cst.ParserSyntaxError as err:
        raise SnippetError(f"libcst cannot parse {segment[:60]!r}: {err.message}") from None
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        raise SnippetError(f"expected one statement in {segment[:60]!r}")
    return line.body[0]
