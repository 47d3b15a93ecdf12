"""The calling-context tree a graph is drawn from: findings inserted along their origin's path,
the smaller ones folded into "other", runs of single-child Python frames merged into one node."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from tracer.graph.context import FUNCTION, Step, origin_steps
from tracer.model import Analysis, Finding

ROOT = "root"
ROOT_ID = "root"
OTHER_FLOOR = 0.02  # an "other" node smaller than this share (or min_share) folds into its parent's


@dataclass(frozen=True)
class Entry:
    """One finding of one analysis (side: "" for a single graph, "before"/"after" for a diff)."""

    side: str
    finding: Finding
    steps: int | None


@dataclass
class Context:
    """A node of the calling-context tree while it is being built."""

    step: Step
    key_path: tuple[str, ...]
    chain: list[Step] = field(default_factory=list)  # merged function frames, outermost first
    children: dict[tuple[str, str], Context] = field(default_factory=dict)
    findings: list[Entry] = field(default_factory=list)  # kernels launched right here
    others: list[Entry] = field(default_factory=list)  # findings folded into "other" below here
    raw_names: set[str] = field(default_factory=set)

    def child(self, step: Step) -> Context:
        node = self.children.get((step.kind, step.key))
        if node is None:
            node = Context(step, self.key_path + (f"{step.kind}:{step.key}",), chain=[step])
            self.children[(step.kind, step.key)] = node
        if step.raw:
            node.raw_names.add(step.raw)
        return node

    def entries(self) -> Iterable[Entry]:
        stack = [self]  # not recursive: ranges can nest thousands deep
        while stack:
            node = stack.pop()
            yield from node.findings
            yield from node.others
            stack.extend(reversed(node.children.values()))


def _select(entries: Sequence[Entry], top: int | None, min_share: float) -> set[int]:
    """Indexes of the entries drawn in full: each side's `top` heaviest at or above `min_share`."""
    kept: set[int] = set()
    by_side: dict[str, list[int]] = defaultdict(list)
    for index, entry in enumerate(entries):
        by_side[entry.side].append(index)
    for indexes in by_side.values():
        ranked = sorted(indexes, key=lambda i: (-entries[i].finding.total_ns, entries[i].finding.kernel))
        ranked = [i for i in ranked if entries[i].finding.share >= min_share]
        kept.update(ranked if top is None else ranked[:top])
    return kept


def _per_step_ns(entry: Entry) -> float:
    return entry.finding.total_ns / entry.steps if entry.steps else float(entry.finding.total_ns)


def _select_changes(
    entries: Sequence[Entry], contexts: Sequence[Hashable], top: int | None, min_share: float
) -> set[int]:
    """For a diff: the entries of the `top` contexts (path and kernel) whose time per step changed
    most, by at least `min_share` of the larger side's total; both sides of a kept context are kept."""
    change: dict[Hashable, float] = defaultdict(float)
    totals: dict[str, float] = defaultdict(float)
    for entry, context in zip(entries, contexts, strict=True):
        ns = _per_step_ns(entry)
        change[context] += -ns if entry.side == "before" else ns
        totals[entry.side] += ns
    floor = min_share * max(totals.values(), default=0.0)
    ranked = sorted(change, key=lambda context: -abs(change[context]))
    ranked = [context for context in ranked if abs(change[context]) >= floor and change[context] != 0]
    chosen = set(ranked if top is None else ranked[:top])
    return {i for i, context in enumerate(contexts) if context in chosen}


def _others_share(entries: Sequence[Entry]) -> float:
    per_side: dict[str, float] = defaultdict(float)
    for entry in entries:
        per_side[entry.side] += entry.finding.share
    return max(per_side.values(), default=0.0)


def _lift_small_others(node: Context, floor: float) -> None:
    """Move each "other" under `floor` up to its parent's, bottom-up: a few sizeable "other" nodes
    read better than one sliver per node, and the function runs they leave can merge."""
    order = _depth_first(node)  # parents before children; walked backwards: bottom-up, no recursion
    for parent in reversed(order):
        for child in parent.children.values():
            if child.others and _others_share(child.others) < floor:
                parent.others.extend(child.others)
                child.others = []


def _compress_functions(node: Context) -> None:
    """Merge runs of function nodes with one child each: a 30-frame stack prefix becomes one node."""
    stack = [node]  # not recursive: ranges and frames can nest thousands deep
    while stack:
        node = stack.pop()
        while (
            node.step.kind == FUNCTION
            and len(node.children) == 1
            and not node.findings
            and not node.others
            and next(iter(node.children.values())).step.kind == FUNCTION
        ):
            (only,) = node.children.values()
            node.chain.extend(only.chain)
            node.children = only.children
            node.findings = only.findings
            node.others = only.others
            node.key_path = only.key_path
        stack.extend(node.children.values())


def _depth_first(root: Context) -> list[Context]:
    """Every node of the tree, each parent before its children."""
    order, stack = [], [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.children.values())
    return order


def entries_of(analyses: Sequence[tuple[str, Analysis]]) -> list[Entry]:
    return [
        Entry(side, finding, analysis.steps) for side, analysis in analyses for finding in analysis.findings
    ]


def build_tree(
    entries: Sequence[Entry], *, top: int | None, min_share: float, diff: bool
) -> tuple[Context, set[int]]:
    """The tree of `entries` and the indexes of those drawn in full (the rest are in "other" nodes).

    A diff keys sites by source text (a fix moves lines), as `diff_analyses` matches them, and keeps
    the contexts whose time changed most; one analysis keeps the heaviest findings.
    """
    paths = [tuple(origin_steps(entry.finding.origin, site_by_text=diff)) for entry in entries]
    if diff:
        contexts = [
            (tuple((s.kind, s.key) for s in path), e.finding.kernel)
            for path, e in zip(paths, entries, strict=True)
        ]
        kept = _select_changes(entries, contexts, top, min_share)
    else:
        kept = _select(entries, top, min_share)

    root = Context(Step(ROOT, ROOT_ID, ROOT_ID), ())
    for index in sorted(kept):
        node = root
        for step in paths[index]:
            node = node.child(step)
        node.findings.append(entries[index])
    for index, entry in enumerate(entries):
        if index in kept:
            continue
        node = root  # the deepest node this finding shares with the kept ones
        for step in paths[index]:
            nxt = node.children.get((step.kind, step.key))
            if nxt is None:
                break
            node = nxt
        node.others.append(entry)
    _lift_small_others(root, max(min_share, OTHER_FLOOR))
    for child in root.children.values():
        _compress_functions(child)
    return root, kept
