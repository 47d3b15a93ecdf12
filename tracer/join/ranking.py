"""Without Python frames and without the source (``--sites`` only): rank the static sites that could
have run an op chain by its op, its dtype and the ranges around it. With the source,
`tracer.join.stackless` aligns the ops around it instead."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tracer.join.sites import SiteIndex, site_dtype

MAX_CANDIDATES = 5  # the lines any ranking lists (the sites', the no-stack join's, the replay's)

# The site methods each aten op can come from (outermost op of the chain first).
OP_SITE_METHODS: dict[str, frozenset[str]] = {
    "aten::to": frozenset({"to", "float", "half", "bfloat16", "double", "int", "long", "bool", "type"}),
    "aten::_to_copy": frozenset({"to", "float", "half", "bfloat16", "double", "int", "long", "bool", "type"}),
    "aten::contiguous": frozenset({"contiguous"}),
    "aten::clone": frozenset({"clone", "contiguous"}),
    "aten::cat": frozenset({"cat", "concat", "concatenate", "stack"}),
    "aten::stack": frozenset({"stack"}),
    "aten::index_put_": frozenset({"__setitem__", "index_put_"}),
    "aten::copy_": frozenset({"copy_", "__setitem__"}),
    "aten::reshape": frozenset({"reshape"}),
    "aten::permute": frozenset({"permute"}),
    "aten::transpose": frozenset({"transpose"}),
}


@dataclass(frozen=True)
class Ranking:
    sites: tuple  # of Site, best first
    confidence: float
    evidence: tuple[str, ...]


def rank_sites(index: SiteIndex, ops: Sequence[str], ranges: Sequence[str], target: str | None) -> Ranking:
    """Score every site whose method fits the op chain; ranges naming its function weigh most."""
    if not index:
        return Ranking((), 0.0, ("no static sites given to rank",))
    outer = ops[0] if ops else None  # the op the Python call made; inner ops are its lowering
    if outer not in OP_SITE_METHODS:
        return Ranking((), 0.0, (f"no site kind lowers to {' > '.join(ops) or 'this activity'}",))
    methods = OP_SITE_METHODS[outer]
    range_words = _range_words(ranges)
    scored = []
    for site in index.sites:
        if site.method not in methods or not site.launches_kernel:
            continue
        score = 0.0
        if site.aten_ops and site.aten_ops[0] == outer:
            score += 1.0
        literal = site_dtype(site)
        if target is not None and literal is not None:
            score += 1.0 if literal == target else -2.0
        if range_words & _function_words(site.function):
            score += 3.0
        score += site.risk / 1000.0  # a tie-break: the scanner's own estimate of hotness
        scored.append((score, site))
    if not scored:
        return Ranking((), 0.0, (f"no static site lowers to {outer}",))
    scored.sort(key=lambda pair: (-pair[0], pair[1].path, pair[1].line))
    best_score = scored[0][0]
    tied = sum(1 for score, _ in scored if score >= best_score - 1e-9)
    named = best_score >= 3.0
    confidence = (0.45 if named else 0.3) / tied
    evidence = [
        f"{len(scored)} site(s) can lower to {outer}",
        "a range names the best one's function" if named else "no range names a function",
    ]
    if target:
        evidence.append(f"target dtype {target}")
    if tied > 1:
        evidence.append(f"{tied} sites tie for first")
    return Ranking(tuple(site for _, site in scored[:MAX_CANDIDATES]), round(confidence, 3), tuple(evidence))


def _range_words(ranges: Sequence[str]) -> set[str]:
    words: set[str] = set()
    for name in ranges:
        name = name.removeprefix("kt:fn:")
        words.add(name)
        words.update(part for part in name.replace("::", ".").split(".") if len(part) > 2)
    return words


def _function_words(function: str) -> set[str]:
    parts = function.split(".")
    return {function, parts[-1]} | ({".".join(parts[-2:])} if len(parts) > 1 else set())
