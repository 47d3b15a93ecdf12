"""Which rule wins a site: the rules in one documented match order, and a load-time error for a rule
that can never fire.

The first rule in this order that matches a call or store gives the site its code:

1. a higher `priority` first (a rule's own key, default 0);
2. then rules that test more of what they are applied to (`receiver`, `text` match keys) first: a
   `.float()` on a receiver named like a KV cache goes before any `.float()`;
3. then a rule whose every match is also another's match (fewer names, arg classes or index classes,
   a narrower arg count, a subset of its patterns) before that other;
4. otherwise by code.

Containment is proven on what the rule says, never guessed: names, classes and arg counts are finite
sets; two pattern lists are compared as sets (`["*kv_cache"]` is within `["*kv_cache", "*_pool"]`,
but `*kv_cache` is not known to be within `*cache`). So a rule that can never fire is found when
earlier rules provably take every call (or store) it matches.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tracer.errors import InputError
from tracer.static.call_classes import ARG_CLASSES, ARGS_NEEDED, INDEX_CLASSES

if TYPE_CHECKING:
    from tracer.static.rules import Rule

Cell = tuple[str, int]  # (argument class, argument count); the last count stands for "that many or more"


def match_order(rules: Sequence[Rule]) -> tuple[Rule, ...]:
    """`rules` in match order (see the module's docstring)."""
    bound = _count_bound(rules)
    tiers: dict[tuple[int, int], list[Rule]] = {}
    for rule in rules:
        tiers.setdefault((-rule.priority, -rule.pattern_keys), []).append(rule)
    order: list[Rule] = []
    for tier in sorted(tiers):
        order.extend(_contained_first(tiers[tier], bound))
    return tuple(order)


def check_every_rule_can_fire(order: Sequence[Rule]) -> None:
    """Raise `InputError` (the rule's file, one line) for a rule whose every possible match is taken
    by rules before it in `order`."""
    bound = _count_bound(order)
    for index, rule in enumerate(order):
        earlier = [
            other for other in order[:index] if other.form == rule.form and _patterns_within(rule, other)
        ]
        takers = _takers_if_dead(rule, earlier, bound)
        if takers is None:
            continue
        what = "store" if rule.form == "store" else "call"
        named = ", ".join(f"{t.code} ({Path(t.source).name})" for t in takers)
        raise InputError(
            rule.source,
            f"rule {rule.code} can never fire: every {what} it matches is matched first by {named}; "
            "make it more specific or give it a higher priority",
        )


def contains(outer: Rule, inner: Rule, bound: int) -> bool:
    """Whether every call (or store) `inner` matches is provably matched by `outer` too."""
    if outer.form != inner.form or not _patterns_within(inner, outer):
        return False
    if inner.form == "store":
        return _index_classes(inner) <= _index_classes(outer)
    return (
        inner.methods <= outer.methods
        and inner.functions <= outer.functions
        and _cells(inner, bound) <= _cells(outer, bound)
    )


def _contained_first(rules: list[Rule], bound: int) -> list[Rule]:
    """A topological order of "contained before containing", by code among the rules that are free."""
    waits_for: dict[str, set[str]] = {rule.code: set() for rule in rules}
    for inner in rules:
        for outer in rules:
            if inner is not outer and contains(outer, inner, bound) and not contains(inner, outer, bound):
                waits_for[outer.code].add(inner.code)
    by_code = {rule.code: rule for rule in rules}
    ready = [code for code, waits in waits_for.items() if not waits]
    heapq.heapify(ready)
    order: list[Rule] = []
    while ready:
        code = heapq.heappop(ready)
        order.append(by_code[code])
        for other, waits in waits_for.items():
            if code in waits:
                waits.discard(code)
                if not waits:
                    heapq.heappush(ready, other)
    assert len(order) == len(rules), "strict containment has no cycle"
    return order


def _takers_if_dead(rule: Rule, earlier: list[Rule], bound: int) -> list[Rule] | None:
    """The earlier rules that take all of `rule`'s matches, or None when some match is left to it."""
    takers: list[Rule] = []
    if rule.form == "store":
        parts: list[tuple[set, list[Rule]]] = [(set(_index_classes(rule)), earlier)]
    else:
        parts = [(set(_cells(rule, bound)), [e for e in earlier if m in e.methods]) for m in rule.methods]
        parts += [
            (set(_cells(rule, bound)), [e for e in earlier if f in e.functions]) for f in rule.functions
        ]
    for left, candidates in parts:
        for other in candidates:
            taken = left & (_index_classes(other) if rule.form == "store" else _cells(other, bound))
            if taken:
                left -= taken
                if other not in takers:
                    takers.append(other)
        if left:
            return None
    return takers


def _patterns_within(inner: Rule, outer: Rule) -> bool:
    """`inner`'s receiver and text patterns ask at least what `outer`'s ask (None asks nothing)."""
    return all(
        theirs is None or (mine is not None and set(mine) <= set(theirs))
        for mine, theirs in ((inner.receiver, outer.receiver), (inner.text, outer.text))
    )


def _index_classes(rule: Rule) -> frozenset[str]:
    return rule.index_class if rule.index_class is not None else frozenset(INDEX_CLASSES)


def _cells(rule: Rule, bound: int) -> frozenset[Cell]:
    """The (argument class, argument count) pairs a call rule accepts; counts at `bound` stand for
    every count from there up (no rule tells them apart)."""
    classes = rule.arg_class if rule.arg_class is not None else ARG_CLASSES
    top = bound if rule.max_args is None else min(rule.max_args, bound)
    return frozenset(
        (cls, count)
        for cls in classes
        for count in range(rule.min_args, top + 1)
        if count >= ARGS_NEEDED[cls]
    )


def _count_bound(rules: Sequence[Rule]) -> int:
    """One more than any arg count a rule names: from there on, every rule treats counts alike."""
    counts = [rule.min_args for rule in rules] + [r.max_args for r in rules if r.max_args is not None]
    return 1 + max([max(ARGS_NEEDED.values()), *counts])


def match_words(rule: Rule) -> str:
    """What a rule matches, in a line: `kerneltrace rules --explain` shows it."""
    if rule.form == "store":
        parts = [
            "stores `x[...] = v`"
            + (f" by {' or '.join(sorted(rule.index_class))}" if rule.index_class else "")
        ]
    else:
        names = [f"`.{m}()`" for m in sorted(rule.methods)] + [f"`{f}()`" for f in sorted(rule.functions)]
        parts = ["calls of " + ", ".join(names)]
        if rule.arg_class is not None:
            parts.append("arguments: " + " or ".join(sorted(rule.arg_class)))
        if rule.max_args == 0:
            parts.append("no arguments")
        elif rule.min_args or rule.max_args is not None:
            bounds = [f"at least {rule.min_args}"] if rule.min_args else []
            bounds += [f"at most {rule.max_args}"] if rule.max_args is not None else []
            parts.append(" and ".join(bounds) + " argument(s)")
    if rule.receiver is not None:
        parts.append(
            "receiver (its text or last dotted part) like " + ", ".join(f"`{g}`" for g in rule.receiver)
        )
    if rule.text is not None:
        parts.append("text like " + ", ".join(f"`{g}`" for g in rule.text))
    if rule.priority:
        parts.append(f"priority {rule.priority}")
    return "; ".join(parts)
