"""Turn one libcst candidate node (a call or a subscript store) into a scored `Site`, by the rules."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst._nodes.internal import CodegenState

from tracer.model.site import Site
from tracer.static.rules import Rule, RuleSet

_CODEGEN = cst.Module(body=[])
_LINE_BREAKS = re.compile(r"\s*\n\s*")
_OPENERS, _CLOSERS = "([{", ")]}"


def glob_matches(pattern: str, text: str) -> bool:
    """`*` matches any run of characters, `?` one; everything else, brackets too, is literal.

    Linear in the text for `*`-only patterns, O(len(pattern) * len(text)) at worst: a user's glob
    cannot backtrack exponentially.
    """
    if "?" not in pattern:
        parts = pattern.split("*")
        if len(parts) == 1:
            return text == pattern
        first, *middle, last = parts
        if len(text) < len(first) + len(last) or not text.startswith(first) or not text.endswith(last):
            return False
        position, end = len(first), len(text) - len(last)
        for part in middle:
            found = text.find(part, position, end)
            if found < 0:
                return False
            position = found + len(part)
        return True
    p = t = 0
    star, resume = -1, 0
    while t < len(text):
        if p < len(pattern) and pattern[p] == "*":
            star, resume, p = p, t, p + 1
        elif p < len(pattern) and pattern[p] in ("?", text[t]):
            p, t = p + 1, t + 1
        elif star >= 0:
            resume += 1
            p, t = star + 1, resume
        else:
            return False
    return pattern[p:].strip("*") == ""


def last_part(text: str) -> str:
    """What follows the last `.` outside brackets and strings: `self.pool.k_buffer[i]` -> `k_buffer[i]`,
    `self.pool.get_key_buffer(layer.id)` -> `get_key_buffer(layer.id)`."""
    depth, quote, escaped, cut = 0, "", False, -1
    for index, char in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth -= 1
        elif char == "." and depth == 0:
            cut = index
    return text[cut + 1 :]


def patterns_match(globs: tuple[str, ...] | None, text: str, *, last: bool = False) -> bool:
    """Whether any glob matches `text` (line breaks dropped) or, with `last`, its last dotted part."""
    if globs is None:
        return True
    text = _LINE_BREAKS.sub("", text)
    tail = last_part(text) if last else None
    return any(glob_matches(g, text) or (tail is not None and glob_matches(g, tail)) for g in globs)


@dataclass(frozen=True)
class Context:
    """Where a candidate sits: its enclosing function (as Python names it) and whether it loops."""

    function: str  # "Class.method", "outer.<locals>.inner", "Class" (class body), "<module>"
    def_line: int | None  # the code object's first line: the first decorator's line if decorated
    in_loop: bool


@dataclass
class ImportTable:
    """Names a file binds by `import` (modules) and by `from ... import` (anything), file-wide."""

    modules: dict[str, str] = field(default_factory=dict)  # local name -> module ("th" -> "torch")
    names: dict[str, str] = field(default_factory=dict)  # local name -> "torch.cat"

    def add_import(self, dotted: str, alias: str | None) -> None:
        if alias:
            self.modules[alias] = dotted
        else:
            first = dotted.split(".", 1)[0]
            self.modules[first] = first

    def add_from(self, module: str, name: str, alias: str | None) -> None:
        if name != "*":
            self.names[alias or name] = f"{module}.{name}"

    def resolve(self, dotted: str) -> tuple[str | None, bool]:
        """(qualified name, whether the first component is a module bound by `import`)."""
        first, _, rest = dotted.partition(".")
        if first in self.modules:
            base = self.modules[first]
            return (f"{base}.{rest}" if rest else base), True
        if first in self.names:
            base = self.names[first]
            return (f"{base}.{rest}" if rest else base), False
        return None, False

    def function_aliases(self, functions: frozenset[str]) -> frozenset[str]:
        """Local names that a `from torch import cat [as c]` binds to a rule's function."""
        return frozenset(local for local, qualified in self.names.items() if qualified in functions)


def code_of(node: cst.CSTNode, indent: Sequence[str] = ()) -> str:
    """Exact source text of a node; `indent` is the enclosing blocks' indentation (whole-module trees
    keep it out of continuation lines, so it is put back here)."""
    if not indent:
        return _CODEGEN.code_for_node(node)
    state = CodegenState(default_indent="    ", default_newline="\n", indent_tokens=list(indent))
    node._codegen(state)
    return "".join(state.tokens)


def dotted_name(node: cst.BaseExpression) -> str | None:
    """`a.b.c` for a chain of names, else None."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def is_string_key(subscript: cst.Subscript) -> bool:
    """`d["key"]`: a dict/list write with a constant string (or bytes) key, not a tensor store."""
    if len(subscript.slice) != 1:
        return False
    index = subscript.slice[0].slice
    return isinstance(index, cst.Index) and isinstance(
        index.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
    )


def call_names(call: cst.Call) -> str | None:
    """The called name a candidate test looks at: the attribute or the bare name."""
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    if isinstance(func, cst.Name):
        return func.value
    return None


class _ArgText:
    """One call argument as source text: `text` as written (`dtype=x`), `value` without the keyword."""

    __slots__ = ("keyword", "star", "text", "value")

    def __init__(self, arg: cst.Arg, code: str) -> None:
        text = code.strip()
        if text.endswith(","):
            text = text[:-1].rstrip()
        self.text = text
        self.keyword = arg.keyword.value if arg.keyword is not None else None
        self.star = bool(arg.star)
        self.value = text.partition("=")[2].strip() if self.keyword is not None else text

    @property
    def positional(self) -> bool:
        return self.keyword is None and not self.star


class SiteMatcher:
    """Applies a `RuleSet` to candidate nodes of one file; both scan paths share it."""

    def __init__(self, rules: RuleSet, path: str, imports: ImportTable) -> None:
        self.rules = rules
        self.path = path
        self.imports = imports
        self.indent: tuple[str, ...] = ()  # set per candidate by the whole-module path
        self._call_rules = [r for r in rules.order if r.form == "call"]  # match order: first wins
        self._store_rules = [r for r in rules.order if r.form == "store"]
        self.attr_names = rules.method_names | {f.rsplit(".", 1)[-1] for f in rules.function_names}
        self.bare_names = {f.rsplit(".", 1)[-1] for f in rules.function_names} | imports.function_aliases(
            rules.function_names
        )

    def _code(self, node: cst.CSTNode) -> str:
        return code_of(node, self.indent)

    # -- candidates: the same test on libcst nodes here and on ast nodes in fastscan --
    def is_call_candidate(self, call: cst.Call) -> bool:
        func = call.func
        if isinstance(func, cst.Attribute):
            return func.attr.value in self.attr_names
        return isinstance(func, cst.Name) and func.value in self.bare_names

    # -- matching --
    def match_call(
        self, call: cst.Call, line: int, col: int, ctx: Context, text: str | None = None
    ) -> Site | None:
        """A site for `call` if a rule matches; `text` is the call's exact source when the caller has it."""
        func = call.func
        method: str | None = None
        qualified: str | None = None
        receiver_node: cst.CSTNode | None = None
        if isinstance(func, cst.Attribute):
            dotted = dotted_name(func)
            is_module = False
            if dotted is not None:
                qualified, is_module = self.imports.resolve(dotted)
            if qualified is not None and qualified in self.rules.function_names:
                method = None
            elif is_module:
                return (
                    None  # `asyncio.gather(...)`, `np.stack(...)`: a module's function, not a tensor method
                )
            else:
                qualified = None
                method = func.attr.value
                receiver_node = func.value
        elif isinstance(func, cst.Name):
            qualified = self.imports.names.get(func.value)
            if qualified not in self.rules.function_names:
                return None
        else:
            return None
        args = [_ArgText(a, self._code(a)) for a in call.args]
        known: list[str] = []  # receiver and text, worked out once, when a rule or the site needs them

        def receiver_and_text() -> tuple[str, str]:
            if not known:
                if receiver_node is not None:
                    known.append(self._code(receiver_node))
                else:  # a function's receiver is its first positional argument: `torch.cat(xs)` -> `xs`
                    known.append(next((a.value for a in args if a.positional), ""))
                known.append(
                    text
                    if text is not None
                    else self._code(call.with_changes(lpar=(), rpar=()) if call.lpar else call)
                )
            return known[0], known[1]

        rule = self._first_call_rule(method, qualified, args, receiver_and_text)
        if rule is None:
            return None
        receiver, text = receiver_and_text()
        target_dtype, target_device = self._targets(rule, method, args)
        name = method if method is not None else qualified.rsplit(".", 1)[-1]  # type: ignore[union-attr]
        arg_texts = tuple(a.text for a in args)
        return self._site(
            rule, line, col, ctx, name, receiver, arg_texts, text, line, target_dtype, target_device
        )

    def match_store(
        self,
        target: cst.Subscript,
        statement: cst.BaseSmallStatement,
        stmt_line: int,
        line: int,
        col: int,
        ctx: Context,
        text: str | None = None,
    ) -> Site | None:
        """A site for a store into `target[...]`; `text` is the statement's exact source if known."""
        if is_string_key(target):
            return None
        index_class = self._index_class(target)
        if text is None:
            if not isinstance(getattr(statement, "semicolon", cst.MaybeSentinel.DEFAULT), cst.MaybeSentinel):
                statement = statement.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            text = self._code(statement)
        value_node = target.value
        receiver = self._code(value_node.with_changes(lpar=(), rpar=()) if value_node.lpar else value_node)
        rule = next(
            (
                r
                for r in self._store_rules
                if (r.index_class is None or index_class in r.index_class)
                and patterns_match(r.receiver, receiver, last=True)
                and patterns_match(r.text, text)
            ),
            None,
        )
        if rule is None:
            return None
        index_text = ", ".join(self._code(e.slice) for e in target.slice)
        value = statement.value if isinstance(statement, (cst.Assign, cst.AugAssign)) else None
        args = (index_text, self._code(value)) if value is not None else (index_text,)
        return self._site(rule, line, col, ctx, "__setitem__", receiver, args, text, stmt_line, None, None)

    def _first_call_rule(
        self,
        method: str | None,
        qualified: str | None,
        args: list[_ArgText],
        receiver_and_text: Callable[[], tuple[str, str]],
    ) -> Rule | None:
        """The first rule in match order (`RuleSet.order`) whose every match key holds."""
        arg_class: str | None = None
        for rule in self._call_rules:
            if method is not None and method not in rule.methods:
                continue
            if qualified is not None and qualified not in rule.functions:
                continue
            if len(args) < rule.min_args or (rule.max_args is not None and len(args) > rule.max_args):
                continue
            if rule.arg_class is not None:
                if arg_class is None:
                    arg_class = self._arg_class(args)
                if arg_class not in rule.arg_class:
                    continue
            if rule.pattern_keys:
                receiver, text = receiver_and_text()
                if not (
                    patterns_match(rule.receiver, receiver, last=True) and patterns_match(rule.text, text)
                ):
                    continue
            return rule
        return None

    def _classify_text(self, text: str) -> str | None:
        text = _LINE_BREAKS.sub("", text)
        if self.rules.arg_patterns["dtype"].search(text):
            return "dtype"
        if self.rules.arg_patterns["device"].search(text):
            return "device"
        return None

    def _arg_class(self, args: list[_ArgText]) -> str:
        classes: set[str] = set()
        other = False
        for arg in args:
            if arg.star:
                other = True
            elif arg.keyword is not None:
                if arg.keyword in ("dtype", "device"):
                    classes.add(arg.keyword)
                elif arg.keyword == "memory_format":
                    other = True
            else:
                found = self._classify_text(arg.value)
                if found is None:
                    other = True
                else:
                    classes.add(found)
        if other and not classes:
            return "other"
        if not classes:
            return "none"
        return "dtype+device" if classes == {"dtype", "device"} else classes.pop()

    def _targets(self, rule: Rule, method: str | None, args: list[_ArgText]) -> tuple[str | None, str | None]:
        dtype = rule.target_dtype_by_name.get(method or "")
        device = rule.target_device_by_name.get(method or "")
        if method not in ("to", "type", "view"):
            return dtype, device
        for arg in args:
            if arg.star:
                continue
            kind = arg.keyword if arg.keyword is not None else self._classify_text(arg.value)
            if kind == "dtype" and dtype is None:
                dtype = arg.value
            elif kind == "device" and device is None:
                device = (
                    arg.value.strip("'\"") if re.fullmatch(r"""(['"])[\w:]+\1""", arg.value) else arg.value
                )
        if method == "type" and dtype is None:
            dtype = next((a.value for a in args if a.positional), None)
        return dtype, device

    @staticmethod
    def _index_class(target: cst.Subscript) -> str:
        for element in target.slice:
            index = element.slice
            if not isinstance(index, cst.Index):  # a cst.Slice, the other BaseSlice
                return "slice"
            value = index.value
            if isinstance(value, (cst.Ellipsis, cst.Integer)) or (
                isinstance(value, cst.Name) and value.value == "None"
            ):
                return "slice"
            if isinstance(value, cst.UnaryOperation) and isinstance(value.expression, cst.Integer):
                return "slice"
        return "index"

    def _site(
        self,
        rule: Rule,
        line: int,
        col: int,
        ctx: Context,
        method: str,
        receiver: str,
        args: tuple[str, ...],
        text: str,
        text_line: int,
        target_dtype: str | None,
        target_device: str | None,
    ) -> Site:
        risk, reasons = self.score(rule, ctx, receiver, args, text, target_dtype)
        return Site(
            path=self.path,
            line=line,
            col=col,
            kind=rule.kind,
            method=method,
            function=ctx.function,
            def_line=ctx.def_line,
            receiver=receiver,
            args=args,
            text=text,
            end_line=text_line + text.count("\n"),
            target_dtype=target_dtype,
            target_device=target_device,
            in_loop=ctx.in_loop,
            aten_ops=rule.aten_ops,
            kernel_families=rule.kernel_families,
            launches_kernel=rule.launches_kernel,
            rule=rule.code,
            risk=risk,
            reasons=reasons,
        )

    def score(
        self,
        rule: Rule,
        ctx: Context,
        receiver: str,
        args: tuple[str, ...],
        text: str,
        target_dtype: str | None,
    ) -> tuple[float, tuple[str, ...]]:
        """The rule's base plus every factor that fires, clamped to 0..100, and why, in words."""
        if not rule.launches_kernel:
            return 0.0, (f"0 {rule.code} {rule.name}: launches no kernel (zero-copy)",)
        function = ctx.function.rsplit(".", 1)[-1]
        values = {
            "receiver": _LINE_BREAKS.sub("", receiver),
            "function": function,
            "qualname": ctx.function,
            "path": self.path,
            "in_loop": ctx.in_loop,
            "text": _LINE_BREAKS.sub("", text),
            "args": ", ".join(args),
            "each_arg": [_LINE_BREAKS.sub("", a) for a in args],
            "target_dtype": target_dtype,
        }
        score = rule.base
        reasons = [f"{rule.base:+g} {rule.code} {rule.name}: {rule.summary}"]
        for factor in (*self.rules.factors, *rule.factors):
            weight = rule.weights.get(factor.id, factor.weight)
            if weight and factor.fires(values):
                score += weight
                reasons.append(f"{weight:+g} {factor.reason}")
        return float(max(0.0, min(100.0, score))), tuple(reasons)
