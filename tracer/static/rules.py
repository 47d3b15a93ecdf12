"""Load the declarative rule files (`rules/*.toml`) into `Rule`, `RiskFactor` and one `RuleSet`."""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tracer.errors import InputError
from tracer.input_files import MAX_RULES_BYTES, read_side_input
from tracer.static.call_classes import ARG_CLASSES, ARGS_NEEDED, INDEX_CLASSES
from tracer.static.precedence import check_every_rule_can_fire, match_order


def _builtin_rules_dir() -> Path:
    """rules/ beside the tracer package in a checkout; `<prefix>/share/kerneltrace/rules` once installed."""
    checkout = Path(__file__).resolve().parents[2] / "rules"
    if checkout.is_dir():
        return checkout
    return Path(sys.prefix) / "share" / "kerneltrace" / "rules"


BUILTIN_RULES_DIR = _builtin_rules_dir()

# What a factor's pattern is tested on; "each_arg" fires when any one argument's text matches.
FACTOR_INPUTS = (
    "receiver",
    "function",
    "qualname",
    "path",
    "in_loop",
    "text",
    "args",
    "each_arg",
    "target_dtype",
)
FORMS = ("method", "function", "method-or-function", "store")
# The keys a `[rule.match]` table may hold; any other is a typo that would widen the rule silently.
MATCH_KEYS = (
    "form",
    "names",
    "arg_class",
    "index_class",
    "min_args",
    "max_args",
    "receiver",
    "text",
    "target_dtype",
    "target_device",
)
_CALL_ONLY_KEYS = ("names", "arg_class", "min_args", "max_args", "target_dtype", "target_device")
_EXPECT = re.compile(r"^[1-9]\d*:\d+ \S+$")  # "2:11 KT101": line (from 1), column (from 0), rule


@dataclass(frozen=True)
class Example:
    """An INVALID example (Fixit style): code the rule must flag and, when stated, every finding the
    scan must report in it, as `line:col CODE` (line from 1, column from 0, as `scan --json` gives)."""

    code: str
    expect: tuple[str, ...] | None = None  # None: only "the rule flags it" is checked


class TextPattern(Protocol):
    """What a rule needs of a pattern: `re.Pattern[str]` (ours) or a `BoundedPattern` (a user's)."""

    @property
    def pattern(self) -> str: ...

    def search(self, text: str, /) -> object | None: ...


@dataclass(frozen=True)
class RiskFactor:
    """One weighted clue about how hot and wasteful a site is, and the sentence that explains it."""

    id: str
    on: str  # one of FACTOR_INPUTS
    weight: float
    reason: str
    pattern: TextPattern | None = None  # None for boolean inputs (in_loop)

    def fires(self, values: dict[str, Any]) -> bool:
        value = values[self.on]
        if self.pattern is None:
            return bool(value)
        if self.on == "each_arg":
            return any(self.pattern.search(arg) for arg in value)
        return value is not None and self.pattern.search(str(value)) is not None


@dataclass(frozen=True)
class Rule:
    """A rule: what it matches, what it lowers to, how it is scored and how it is explained."""

    code: str
    name: str
    family: str
    kind: str
    summary: str
    form: str  # "call" or "store"
    methods: frozenset[str] = frozenset()  # tensor method names (`to`, `float`)
    functions: frozenset[str] = frozenset()  # qualified functions (`torch.cat`)
    arg_class: frozenset[str] | None = None  # allowed classes of the arguments (None: any)
    index_class: frozenset[str] | None = None  # for stores: "index" or "slice"
    min_args: int = 0
    max_args: int | None = None
    receiver: tuple[str, ...] | None = None  # globs on the receiver's text or its last dotted part
    text: tuple[str, ...] | None = None  # globs on the call's (or store statement's) source text
    priority: int = 0  # higher is tried first; see `tracer/static/precedence.py` for the whole order
    target_dtype_by_name: dict[str, str] = field(default_factory=dict)
    target_device_by_name: dict[str, str] = field(default_factory=dict)
    aten_ops: tuple[str, ...] = ()
    kernel_families: tuple[str, ...] = ()
    launches_kernel: bool = True
    base: float = 0.0
    weights: dict[str, float] = field(default_factory=dict)  # overrides of shared factor weights
    factors: tuple[RiskFactor, ...] = ()  # this rule's own factors
    explain: dict[str, str] = field(default_factory=dict)  # what, why, example, fix
    valid: tuple[str, ...] = ()  # code the rule must not flag
    invalid: tuple[Example, ...] = ()  # code the rule must flag, with the findings expected in it
    source: str = ""  # the file it came from

    @property
    def pattern_keys(self) -> int:
        """How many of `receiver` and `text` the rule tests: each makes it more specific."""
        return (self.receiver is not None) + (self.text is not None)


@dataclass(frozen=True)
class RuleSet:
    """All rules (by code), the same rules in match order, the shared factors, the scope settings, and
    a hash of it all."""

    rules: tuple[Rule, ...]  # by code: for listings, SARIF and `by_code`
    factors: tuple[RiskFactor, ...]
    skip_decorators: frozenset[str]
    arg_patterns: dict[str, TextPattern]  # "dtype"/"device" -> pattern on argument text
    digest: str
    order: tuple[Rule, ...]  # match order: the first that matches a site wins (precedence.py)

    @property
    def method_names(self) -> frozenset[str]:
        return frozenset().union(*(r.methods for r in self.rules))

    @property
    def function_names(self) -> frozenset[str]:
        return frozenset().union(*(r.functions for r in self.rules))

    @property
    def matches_stores(self) -> bool:
        return any(r.form == "store" for r in self.rules)

    def by_code(self, code: str) -> Rule:
        for rule in self.rules:
            if rule.code == code:
                return rule
        raise KeyError(code)


def load_rules(extra_dirs: Iterable[Path | str] = ()) -> list[Rule]:
    """The built-in rules plus those in `extra_dirs`, by code."""
    return list(load_rule_set(extra_dirs).rules)


def load_rule_set(extra_dirs: Iterable[Path | str] = ()) -> RuleSet:
    """Read `rules/*.toml` and every `*.toml` in `extra_dirs` into one `RuleSet`."""
    files = sorted(BUILTIN_RULES_DIR.glob("*.toml"))
    for directory in extra_dirs:
        directory = Path(directory)
        if not directory.is_dir():
            raise InputError(directory, "rules directory does not exist")
        found = sorted(directory.glob("*.toml"))
        if not found:
            raise InputError(directory, "no *.toml rule files in this directory")
        files.extend(found)
    return _build_rule_set(files)


def _build_rule_set(files: Sequence[Path]) -> RuleSet:
    hasher = hashlib.blake2b(digest_size=8)
    shared_factors: list[RiskFactor] = []
    skip: set[str] = set()
    arg_patterns: dict[str, TextPattern] = {}
    rules: dict[str, Rule] = {}
    for path in files:
        raw_bytes = read_side_input(path, "rule file", MAX_RULES_BYTES)
        hasher.update(os.fsencode(path.name) + b"\0" + raw_bytes)
        try:
            data = tomllib.loads(raw_bytes.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            raise InputError(path, f"not a valid TOML rule file: {err}") from None
        try:
            scope = data.get("scope", {})
            skip.update(scope.get("skip_decorators", ()))
            for name, pattern in data.get("arg_classes", {}).items():
                arg_patterns[name] = _compile(path, pattern)
            shared_factors.extend(_factor(path, raw) for raw in data.get("factor", ()))
            family = data.get("family", path.stem)
            for raw in data.get("rule", ()):
                rule = _rule(path, family, raw)
                if rule.code in rules:
                    raise InputError(
                        path, f"rule code {rule.code} is already defined in {rules[rule.code].source}"
                    )
                rules[rule.code] = rule
        except (TypeError, ValueError, AttributeError, OverflowError) as err:  # a value of the wrong type
            raise InputError(path, f"not a valid rule file: {type(err).__name__}: {err}") from None
    for needed in ("dtype", "device"):
        if needed not in arg_patterns:
            raise InputError(BUILTIN_RULES_DIR, f"no [arg_classes] pattern for {needed!r}")
    by_code = tuple(sorted(rules.values(), key=lambda r: r.code))
    order = match_order(by_code)
    check_every_rule_can_fire(order)
    return RuleSet(by_code, tuple(shared_factors), frozenset(skip), arg_patterns, hasher.hexdigest(), order)


def _compile(path: Path, pattern: str) -> TextPattern:
    if not isinstance(pattern, str):
        raise InputError(path, f"a pattern is {type(pattern).__name__}, not a string")
    if path.parent.resolve() != BUILTIN_RULES_DIR.resolve():
        from tracer.static.patterns import BoundedPattern

        return BoundedPattern(pattern, path)  # a user's: time-bounded
    try:
        return re.compile(pattern)
    except re.error as err:
        raise InputError(path, f"bad regular expression {pattern!r}: {err}") from None


def _factor(path: Path, raw: dict[str, Any]) -> RiskFactor:
    try:
        on = raw["on"]
        if on not in FACTOR_INPUTS:
            raise InputError(
                path, f"factor {raw.get('id')!r}: `on` must be one of {', '.join(FACTOR_INPUTS)}"
            )
        pattern = raw.get("pattern")
        return RiskFactor(
            id=raw["id"],
            on=on,
            weight=float(raw["weight"]),
            reason=raw["reason"],
            pattern=_compile(path, pattern) if pattern is not None else None,
        )
    except KeyError as err:
        raise InputError(path, f"factor {raw.get('id')!r} lacks the key {err}") from None


def _rule(path: Path, family: str, raw: dict[str, Any]) -> Rule:
    code = raw.get("code", "?")
    try:
        match = _match(path, code, raw["match"])
        lowers = raw.get("lowers", {})
        examples = raw.get("examples", {})
        priority = raw.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise InputError(path, f"rule {code}: priority must be a whole number, not {priority!r}")
        return Rule(
            code=code,
            name=raw["name"],
            family=family,
            kind=raw["kind"],
            summary=raw["summary"],
            **match,
            priority=priority,
            aten_ops=tuple(lowers.get("aten_ops", ())),
            kernel_families=tuple(lowers.get("kernel_families", ())),
            launches_kernel=bool(raw.get("launches_kernel", True)),
            base=float(raw.get("base", 0)),
            weights={k: float(v) for k, v in raw.get("weights", {}).items()},
            factors=tuple(_factor(path, f) for f in raw.get("factor", ())),
            explain={k: str(v).strip("\n") for k, v in raw.get("explain", {}).items()},
            valid=tuple(_strings(path, code, "examples.valid", examples.get("valid", ()))),
            invalid=tuple(_example(path, code, e) for e in examples.get("invalid", ())),
            source=str(path),
        )
    except KeyError as err:
        raise InputError(path, f"rule {code} lacks the key {err}") from None


def _match(path: Path, code: str, match: dict[str, Any]) -> dict[str, Any]:
    """`[rule.match]` as `Rule` fields; a key that cannot apply, or a match that is empty or
    contradicts itself, is the rule file's error (the rule could never fire, or fire too widely)."""
    if not isinstance(match, dict):
        raise InputError(path, f"rule {code}: match must be a table")
    unknown = sorted(set(match) - set(MATCH_KEYS))
    if unknown:
        raise InputError(
            path, f"rule {code}: unknown match key {unknown[0]!r} (known: {', '.join(MATCH_KEYS)})"
        )
    declared = match.get("form")
    if declared is not None and declared not in FORMS:
        raise InputError(path, f"rule {code}: match.form must be one of {', '.join(FORMS)}, not {declared!r}")
    form = "store" if declared == "store" else "call"
    receiver = _globs(path, code, "receiver", match.get("receiver"))
    text = _globs(path, code, "text", match.get("text"))
    if form == "store":
        misplaced = [key for key in _CALL_ONLY_KEYS if key in match]
        if misplaced:
            raise InputError(path, f"rule {code}: match.{misplaced[0]} does not apply to a store rule")
        index_class = _classes(path, code, "index_class", match.get("index_class"), INDEX_CLASSES)
        return {"form": form, "index_class": index_class, "receiver": receiver, "text": text}
    if "index_class" in match:
        raise InputError(
            path, f'rule {code}: match.index_class applies only to a store rule (form = "store")'
        )
    names = _strings(path, code, "match.names", match.get("names", ()))
    if not names:
        raise InputError(path, f"rule {code}: a call rule needs match.names")
    methods = frozenset(n for n in names if "." not in n)
    functions = frozenset(n for n in names if "." in n)
    if declared == "method" and functions:
        raise InputError(
            path, f'rule {code}: form = "method" but names holds the function {min(functions)!r}'
        )
    if declared == "function" and methods:
        raise InputError(
            path,
            f'rule {code}: form = "function" but names holds the method {min(methods)!r} '
            "(a function is named with its module: torch.cat)",
        )
    min_args = _count(path, code, "min_args", match.get("min_args", 0))
    max_args = None if match.get("max_args") is None else _count(path, code, "max_args", match["max_args"])
    if max_args is not None and min_args > max_args:
        raise InputError(path, f"rule {code}: can never fire: min_args = {min_args} > max_args = {max_args}")
    arg_class = _classes(path, code, "arg_class", match.get("arg_class"), ARG_CLASSES)
    if arg_class is not None and max_args is not None and all(ARGS_NEEDED[c] > max_args for c in arg_class):
        raise InputError(
            path,
            f"rule {code}: can never fire: arg_class {sorted(arg_class)} needs at least "
            f"{min(ARGS_NEEDED[c] for c in arg_class)} argument(s) but max_args = {max_args}",
        )
    return {
        "form": form,
        "methods": methods,
        "functions": functions,
        "arg_class": arg_class,
        "min_args": min_args,
        "max_args": max_args,
        "receiver": receiver,
        "text": text,
        "target_dtype_by_name": dict(match.get("target_dtype", {})),
        "target_device_by_name": dict(match.get("target_device", {})),
    }


def _strings(path: Path, code: str, key: str, value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise InputError(path, f"rule {code}: {key} must be a list of strings")
    return list(value)


def _globs(path: Path, code: str, key: str, value: Any) -> tuple[str, ...] | None:
    """A list of globs, or None for "any"; `*` alone means any, so the key is dropped."""
    if value is None:
        return None
    globs = _strings(path, code, f"match.{key}", value)
    if not globs or not all(globs):
        raise InputError(path, f"rule {code}: can never fire: match.{key} holds no pattern (or an empty one)")
    return None if "*" in globs else tuple(dict.fromkeys(globs))


def _classes(path: Path, code: str, key: str, value: Any, allowed: tuple[str, ...]) -> frozenset[str] | None:
    if value is None:
        return None
    classes = _strings(path, code, f"match.{key}", value)
    if not set(classes) <= set(allowed):
        raise InputError(path, f"rule {code}: {key} values must be among {', '.join(allowed)}")
    if not classes:
        raise InputError(path, f"rule {code}: can never fire: match.{key} is empty")
    return frozenset(classes)


def _count(path: Path, code: str, key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InputError(path, f"rule {code}: match.{key} must be a whole number >= 0, not {value!r}")
    return value


def _example(path: Path, code: str, raw: Any) -> Example:
    """`"source"`, or `{ expect = ["2:11 KT101"], code = "source" }`."""
    if isinstance(raw, str):
        return Example(raw)
    if not isinstance(raw, dict) or not isinstance(raw.get("code"), str) or set(raw) - {"code", "expect"}:
        raise InputError(
            path, f'rule {code}: an invalid example is a string or {{ expect = [...], code = "..." }}'
        )
    expect = raw.get("expect")
    if expect is None:
        return Example(raw["code"])
    findings = _strings(path, code, "an invalid example's expect", expect)
    for finding in findings:
        if not _EXPECT.match(finding):
            raise InputError(
                path, f'rule {code}: expected finding {finding!r} is not `line:col CODE` (e.g. "2:11 KT101")'
            )
    if not any(finding.split()[1] == code for finding in findings):
        raise InputError(path, f"rule {code}: an invalid example must expect {code} itself, at its line:col")
    return Example(raw["code"], tuple(findings))
