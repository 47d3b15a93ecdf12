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
from typing import Any

from tracer.errors import InputError
from tracer.input_files import MAX_RULES_BYTES, read_side_input


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
ARG_CLASSES = ("none", "dtype", "device", "dtype+device", "other")
INDEX_CLASSES = ("index", "slice")


@dataclass(frozen=True)
class RiskFactor:
    """One weighted clue about how hot and wasteful a site is, and the sentence that explains it."""

    id: str
    on: str  # one of FACTOR_INPUTS
    weight: float
    reason: str
    pattern: re.Pattern[str] | None = None  # None for boolean inputs (in_loop)

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
    invalid: tuple[str, ...] = ()  # code the rule must flag
    source: str = ""  # the file it came from


@dataclass(frozen=True)
class RuleSet:
    """All rules in match order, the shared factors, the scope settings, and a hash of it all."""

    rules: tuple[Rule, ...]
    factors: tuple[RiskFactor, ...]
    skip_decorators: frozenset[str]
    arg_patterns: dict[str, re.Pattern[str]]  # "dtype"/"device" -> pattern on argument text
    digest: str

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
    """The built-in rules plus those in `extra_dirs`, in match order (by code)."""
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
    arg_patterns: dict[str, re.Pattern[str]] = {}
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
    ordered = tuple(sorted(rules.values(), key=lambda r: r.code))
    return RuleSet(ordered, tuple(shared_factors), frozenset(skip), arg_patterns, hasher.hexdigest())


def _compile(path: Path, pattern: str) -> re.Pattern[str]:
    if not isinstance(pattern, str):
        raise InputError(path, f"a pattern is {type(pattern).__name__}, not a string")
    if path.parent.resolve() != BUILTIN_RULES_DIR.resolve():
        from tracer.static.patterns import BoundedPattern

        return BoundedPattern(pattern, path)  # type: ignore[return-value]  (a user's: time-bounded)
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
        match = raw["match"]
        form = "store" if match.get("form") == "store" else "call"
        names = match.get("names", ())
        methods = frozenset(n for n in names if "." not in n)
        functions = frozenset(n for n in names if "." in n)
        if form == "call" and not names:
            raise InputError(path, f"rule {code}: a call rule needs match.names")
        arg_class = match.get("arg_class")
        if arg_class is not None and not set(arg_class) <= set(ARG_CLASSES):
            raise InputError(path, f"rule {code}: arg_class values must be among {', '.join(ARG_CLASSES)}")
        index_class = match.get("index_class")
        if index_class is not None and not set(index_class) <= set(INDEX_CLASSES):
            raise InputError(
                path, f"rule {code}: index_class values must be among {', '.join(INDEX_CLASSES)}"
            )
        lowers = raw.get("lowers", {})
        examples = raw.get("examples", {})
        return Rule(
            code=code,
            name=raw["name"],
            family=family,
            kind=raw["kind"],
            summary=raw["summary"],
            form=form,
            methods=methods,
            functions=functions,
            arg_class=frozenset(arg_class) if arg_class is not None else None,
            index_class=frozenset(index_class) if index_class is not None else None,
            min_args=int(match.get("min_args", 0)),
            max_args=match.get("max_args"),
            target_dtype_by_name=dict(match.get("target_dtype", {})),
            target_device_by_name=dict(match.get("target_device", {})),
            aten_ops=tuple(lowers.get("aten_ops", ())),
            kernel_families=tuple(lowers.get("kernel_families", ())),
            launches_kernel=bool(raw.get("launches_kernel", True)),
            base=float(raw.get("base", 0)),
            weights={k: float(v) for k, v in raw.get("weights", {}).items()},
            factors=tuple(_factor(path, f) for f in raw.get("factor", ())),
            explain={k: str(v).strip("\n") for k, v in raw.get("explain", {}).items()},
            valid=tuple(examples.get("valid", ())),
            invalid=tuple(examples.get("invalid", ())),
            source=str(path),
        )
    except KeyError as err:
        raise InputError(path, f"rule {code} lacks the key {err}") from None
