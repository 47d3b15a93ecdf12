"""Calls inside a user frame: the run's calls in order, which site methods a call may be, its CallFrom."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracer.join.columns import ValueCodes, column, values_at
from tracer.join.frames import builtin_name, is_builtin, parse_call_from, parse_frame, same_file
from tracer.join.sites import OP_METHODS
from tracer.join.tokens import Token, token_of
from tracer.model.events import NONE, Cat, EventTable

if TYPE_CHECKING:
    import numpy as np

    from tracer.join.state import JoinState

_CPU_OP, _PYTHON = Cat.CPU_OP, Cat.PYTHON_FUNCTION


class CallOrder:
    """The calls of each run of a user frame U (its child frames and the ops run directly in it, in
    time order), as rows and as tokens, and where a call C sits among them."""

    def __init__(self, join: JoinState) -> None:
        self.join = join
        self._children: Children | None = None  # of every frame
        self._some_children: Children | None = None  # of the frames `places` was asked about
        self._runs: dict[int, tuple[int, dict[int, int]]] = {}  # U -> (sequence id, C -> place)
        self._sequences: dict[tuple[Token, ...], int] = {}
        self.tokens: list[tuple[Token, ...]] = []  # by sequence id

    def run_of(self, user: int, call: int) -> tuple[int, int]:
        """(id of U's call sequence, C's index in it; -1 when C is not among U's calls)."""
        found = self._runs.get(user)
        if found is None:
            table = self.join.table
            rows = self.children(user)
            tokens = tuple(token_of(table.name[r], table.cat[r]) for r in rows)
            sequence = self._sequences.get(tokens)
            if sequence is None:
                sequence = self._sequences[tokens] = len(self.tokens)
                self.tokens.append(tokens)
            found = self._runs[user] = (sequence, {row: i for i, row in enumerate(rows)})
        return found[0], found[1].get(call, -1)

    def places(self, users, calls, asked, names: ValueCodes):
        """For the rows `asked` of (U, C) arrays: (an id of what U called, C's index among those calls).

        Equal ids and indexes mean equal `position` and `observed` answers; elsewhere (-1, -1), and
        index -1 where C is not among U's calls.
        """
        import numpy as np

        sequence = np.full(len(users), -1, dtype=np.int64)
        place = np.full(len(users), -1, dtype=np.int64)
        picked = np.flatnonzero(asked)
        if len(picked) == 0:
            return sequence, place
        from tracer.join.columns import distinct

        children = self._some_children = Children(self.join, distinct(users[picked]))
        if len(children.keys) == 0:
            sequence[picked] = 0  # every U called nothing
            return sequence, place
        group, has_calls = children.group_of(users[picked])
        slot = children.slot_of(calls[picked])
        start = children.starts[group]
        inside = has_calls & (slot >= start) & (slot < children.ends[group])
        place[picked[inside]] = slot[inside] - start[inside]
        # What each U called, compared by (name, category) of its calls: finer than by `call_name`
        # and `source_key`, which is all a class needs.
        groups, which = np.unique(group[has_calls], return_inverse=True)
        starts, ends = children.starts[groups], children.ends[groups]
        lengths = ends - starts
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        slots = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1] - starts, lengths)
        rows = children.rows[slots]
        table = self.join.table
        kinds = (names.of(values_at(table.name, rows)) << 4) | column(table.cat)[rows]
        contents: dict[bytes, int] = {b"": 0}
        ids = [
            contents.setdefault(kinds[a:b].tobytes(), len(contents))
            for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())
        ]
        found = np.zeros(len(picked), dtype=np.int64)  # 0: U called nothing
        found[has_calls] = np.asarray(ids, dtype=np.int64)[which.reshape(-1)]
        sequence[picked] = found
        return sequence, place

    def children(self, user: int) -> list[int]:
        """U's child frames and direct top-level ops, in time order."""
        some = self._some_children
        if some is not None and some.covers(user):
            return some.of(user)
        if self._children is None:
            self._children = Children(self.join)
        return self._children.of(user)


class Children:
    """Child frames and direct top-level ops of every frame (or of the frames `parents` names), by start.

    Numpy groups them by parent and sorts each group by start time; the sort is stable, so equal
    starts keep the order a per-row loop would append them in (threads in turn, each by start, then
    the top-level ops). Group g holds ``rows[starts[g]:ends[g]]``, the calls of frame ``keys[g]``.
    """

    def __init__(self, join: JoinState, parents: np.ndarray | None = None) -> None:
        import numpy as np

        innermost = column(join.innermost_frame)
        top_ops = np.fromiter(join.top_ops, dtype=np.int64, count=len(join.top_ops))  # in set order
        top_ops = top_ops[innermost[top_ops] != NONE]
        pieces = [np.asarray(rows, dtype=np.int64) for rows in join.sorted_frames.values()]
        frames = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
        above = column(join.frame_parents)[frames]
        frames, above = frames[above != NONE], above[above != NONE]
        op_above = innermost[top_ops]
        self._wanted = None
        if parents is not None:
            self._wanted = np.zeros(len(join.table), dtype=bool)
            self._wanted[parents] = True
            mine = self._wanted[above]
            frames, above = frames[mine], above[mine]
            mine = self._wanted[op_above]
            top_ops, op_above = top_ops[mine], op_above[mine]
        rows = np.concatenate([frames, top_ops])
        keys = np.concatenate([above, op_above])
        order = np.lexsort((column(join.table.ts_ns)[rows], keys))
        keys = keys[order]
        cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
        self.rows = rows[order]
        self.starts = np.concatenate([[0], cuts]).astype(np.int64) if len(rows) else cuts
        self.ends = np.concatenate([cuts, [len(rows)]]).astype(np.int64) if len(rows) else cuts
        self.keys = keys[self.starts]
        self._slot: np.ndarray | None = None
        self._table_size = len(join.table)

    def covers(self, frame: int) -> bool:
        """Whether this holds `frame`'s calls (all frames', or those of the frames it was built for)."""
        return self._wanted is None or bool(self._wanted[frame])

    def of(self, frame: int) -> list[int]:
        """The calls of `frame`, in time order."""
        import numpy as np

        g = int(np.searchsorted(self.keys, frame))
        if g < len(self.keys) and self.keys[g] == frame:
            return self.rows[self.starts[g] : self.ends[g]].tolist()
        return []

    def group_of(self, frames):
        """(group of each frame, whether it has one); the group is 0 where it has none."""
        import numpy as np

        group = np.searchsorted(self.keys, frames)
        inside = group < len(self.keys)
        group[~inside] = 0
        found = inside & (self.keys[group] == frames) if len(self.keys) else inside
        group[~found] = 0
        return group, found

    def slot_of(self, rows):
        """Index in `self.rows` of each row, -1 for rows that are no call held here."""
        import numpy as np

        if self._slot is None:
            self._slot = np.full(self._table_size, -1, dtype=np.int64)
            self._slot[self.rows] = np.arange(len(self.rows))
        return self._slot[rows]


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
