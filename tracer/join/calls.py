"""Calls inside a user frame: what a call is named, which site methods it may be, and its order."""

from __future__ import annotations

from collections import Counter, defaultdict
from functools import lru_cache
from typing import TYPE_CHECKING

from tracer.join.columns import column
from tracer.join.frames import builtin_name, is_builtin, parse_call_from, parse_frame, same_file
from tracer.join.sites import OP_METHODS
from tracer.join.source_calls import MODULE_CALL, OPERATOR_ALIASES, STORE_OPS
from tracer.model.events import NONE, Cat, EventTable

if TYPE_CHECKING:
    from tracer.join.attribute import _Join

_CPU_OP, _PYTHON = Cat.CPU_OP, Cat.PYTHON_FUNCTION


class CallOrder:
    """For a call C inside a run of user frame U: its rank among U's calls of the same name."""

    def __init__(self, join: _Join) -> None:
        self.join = join
        self._positions: dict[int, dict[int, tuple[int, int]]] = {}
        self._children: dict[int, list[int]] | None = None
        self._observed: dict[int, tuple[int, Counter]] = {}
        self._signatures: dict[tuple[str, ...], int] = {}

    def observed(self, user: int) -> tuple[int, Counter]:
        """(signature, counts) of what one run of U called, by source-comparable name.

        Runs with the same signature called the same things in the same order (same branches).
        """
        found = self._observed.get(user)
        if found is None:
            table = self.join.table
            keys = tuple(source_key(table.name[r], table.cat[r]) for r in self._calls_in(user))
            signature = self._signatures.setdefault(keys, len(self._signatures))
            found = self._observed[user] = (signature, Counter(keys))
        return found

    def position(self, user: int, call: int) -> tuple[int, int]:
        """(k, n): C is the k-th (0-based) of n same-name calls in this run of U."""
        positions = self._positions.get(user)
        if positions is None:
            positions = self._positions[user] = self._rank(user)
        return positions.get(call, (0, 1))

    def _rank(self, user: int) -> dict[int, tuple[int, int]]:
        names = self.join.table.name
        by_name: dict[str, list[int]] = defaultdict(list)
        for row in self._calls_in(user):
            by_name[call_name(names[row])].append(row)
        ranks: dict[int, tuple[int, int]] = {}
        for rows in by_name.values():
            for k, row in enumerate(rows):
                ranks[row] = (k, len(rows))
        return ranks

    def _calls_in(self, user: int) -> list[int]:
        """U's child frames and direct top-level ops, in time order."""
        if self._children is None:
            self._children = self._index_children()
        return self._children.get(user, [])

    def _index_children(self) -> dict[int, list[int]]:
        """Child frames and direct top-level ops of every frame (only frames that have any), by start.

        Numpy groups them by parent and sorts each group by start time; the sort is stable, so
        equal starts keep the order a per-row loop would append them in (threads in turn, each
        by start, then the top-level ops).
        """
        import numpy as np

        join = self.join
        innermost = join.innermost_frame
        top_ops = [row for row in join.top_ops if innermost.get(row, NONE) != NONE]
        pieces = [np.asarray(rows, dtype=np.int64) for rows in join.sorted_frames.values()]
        frames = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
        parents = column(join.frame_parents)[frames]
        has_parent = parents != NONE
        rows = np.concatenate([frames[has_parent], np.asarray(top_ops, dtype=np.int64)])
        parents = np.concatenate(
            [parents[has_parent], np.asarray([innermost[row] for row in top_ops], dtype=np.int64)]
        )
        if len(rows) == 0:
            return {}
        order = np.lexsort((column(join.table.ts_ns)[rows], parents))
        parents = parents[order]
        cuts = (np.flatnonzero(parents[1:] != parents[:-1]) + 1).tolist()
        starts, ends = [0, *cuts], [*cuts, len(parents)]
        ordered = rows[order].tolist()
        keys = parents[starts].tolist()
        return {key: ordered[a:b] for key, a, b in zip(keys, starts, ends)}


def source_key(name: str, cat: int) -> str:
    """The name a call has in source (as `tracer.join.source_calls` spells it) from its trace event."""
    if cat == _CPU_OP:
        if name in STORE_OPS:
            return "__setitem__"
        if name == "aten::index":
            return "__getitem__"
        return OPERATOR_ALIASES.get(name, name)
    if is_builtin(name):
        return builtin_name(name) or name
    if name.startswith("nn.Module: "):
        return MODULE_CALL
    return parse_frame(name).function


@lru_cache(maxsize=65536)  # as source_key
def call_name(name: str) -> str:
    """What makes calls "the same" for ordering: the builtin's method, any module, else the name."""
    if is_builtin(name):
        return builtin_name(name) or name
    if name.startswith("nn.Module: "):
        return "nn.Module"
    return name


def methods_of_call(name: str, cat: int) -> tuple[str, ...]:
    """The site methods a call can come from: ``<built-in method to ...>`` -> ("to",)."""
    if cat == _CPU_OP:
        return OP_METHODS.get(name, ())
    if is_builtin(name):
        method = builtin_name(name)
        return (method,) if method else ()
    if name.startswith("nn.Module: "):
        return ()
    return (parse_frame(name).function,)


def call_from_line(table: EventTable, call: int, user: int) -> int | None:
    """The exact line in U that made call C, from C's CallFrom (torch >= 2.14)."""
    if table.cat[call] != _PYTHON:
        return None
    args = table.args[call]
    where = parse_call_from(args.get("CallFrom")) if args else None
    if where is None:
        return None
    file, line = where
    return line if same_file(file, parse_frame(table.name[user]).file) else None
