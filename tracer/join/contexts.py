"""Which anchors must share an Origin: content ids of each anchor's join context, found in numpy.

An anchor's Origin depends only on its context (`OriginBuilder.origin_id`): the names along its op
chain and range chain, the forward op of a backward op, the names and CallFrom texts along its Python
frame chain, what the run of its user frame U called and which of those calls C led to it, and the
dtypes of a copy. Anchors whose contexts are equal get one Origin, so the builder need only see the
first anchor of each class; at the scale of a 500 MB trace (140k kernels, a few hundred contexts)
that is what keeps the join fast. The classes may be finer than the contexts (e.g. a backward op's
class is its forward op's row), never coarser: the builder still decides every context it sees.

Chains are compared by ids: a chain's id interns (its parent chain's id, its last item), computed
one tree level at a time over the anchors' ancestors only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracer.join.columns import ValueCodes, column, distinct, values_at
from tracer.join.dtypes import COPY_OPS, copy_dtypes
from tracer.join.frames import is_user_frame
from tracer.model.events import NONE, Cat

if TYPE_CHECKING:
    import numpy as np

    from tracer.join.calls import CallOrder
    from tracer.join.state import JoinState

_CPU_OP, _RANGE, _PYTHON = int(Cat.CPU_OP), int(Cat.USER_ANNOTATION), int(Cat.PYTHON_FUNCTION)
_ITEM_BITS = 31  # chain ids and item codes stay below 2**31, so (parent id, item) packs in one int64
_UNLAUNCHED, _BACKWARD, _PLAIN = 0, 1, 2  # the three kinds of context `origin_id` builds


class ChainIds:
    """Ids of chains (tuples of item codes): a chain extended by an item gets one id, the empty chain 0."""

    def __init__(self) -> None:
        self._ids: dict[int, int] = {}

    def extend(self, parents: np.ndarray, items: np.ndarray) -> np.ndarray:
        import numpy as np

        if len(parents) == 0:
            return parents
        keys, inverse = np.unique((parents << _ITEM_BITS) | items, return_inverse=True)
        ids = self._ids
        found = [ids.setdefault(key, len(ids) + 1) for key in keys.tolist()]
        return np.asarray(found, dtype=np.int64)[inverse.reshape(-1)]


class Tree:
    """`starts` and all their ancestors under `parents`, sorted, with each one's parent position and
    the positions of each depth (roots first), so values can flow from parents to children."""

    def __init__(self, starts: np.ndarray, parents: np.ndarray) -> None:
        import numpy as np

        seen = np.zeros(len(parents), dtype=bool)
        frontier = distinct(starts[starts != NONE])
        seen[frontier] = True
        while len(frontier):
            up = parents[frontier]
            up = distinct(up[up != NONE])
            up = up[~seen[up]]
            seen[up] = True
            frontier = up
        self.rows = rows = np.flatnonzero(seen)
        above = parents[rows]
        has_parent = above != NONE
        self.parent = np.full(len(rows), -1, dtype=np.int64)
        self.parent[has_parent] = np.searchsorted(rows, above[has_parent])
        # Depth by pointer doubling: each round doubles how far `jump` looks up.
        depth = has_parent.astype(np.int64)
        jump = self.parent.copy()
        while True:
            going = np.flatnonzero(jump >= 0)
            if len(going) == 0:
                break
            target = jump[going]
            depth[going] += depth[target]
            jump[going] = jump[target]
        order = np.argsort(depth, kind="stable")
        cuts: np.ndarray | list[int] = np.cumsum(np.bincount(depth))[:-1] if len(depth) else []
        self.levels = np.split(order, cuts)

    def position(self, rows: np.ndarray) -> np.ndarray:
        """Positions of `rows` (each in the tree, or NONE -> -1)."""
        import numpy as np

        out = np.full(len(rows), -1, dtype=np.int64)
        known = rows != NONE
        out[known] = np.searchsorted(self.rows, rows[known])
        return out


def context_classes(
    join: JoinState,
    anchors: np.ndarray,
    replays: np.ndarray,
    calls: CallOrder,
    names: ValueCodes,
    orders_calls: bool,
):
    """(class of each anchor, the first anchor of each class in order): equal classes, equal Origins."""
    import numpy as np

    table = join.table
    cat = column(table.cat)
    anchor = anchors.astype(np.int64, copy=False)
    replay = replays.astype(bool, copy=False)
    launched = anchor != NONE

    ops = _OpContexts(join, anchor[launched], names)
    op_at = np.full(len(anchor), -1, dtype=np.int64)
    op_at[launched] = ops.tree.position(anchor[launched])
    op_chain = _gather(ops.op_chain, op_at, -1)
    range_chain = _gather(ops.range_chain, op_at, -1)
    forward = _gather(ops.forward, op_at, NONE)
    backward = launched & (forward != NONE) & ~replay
    plain = launched & ~backward

    frame = np.full(len(anchor), NONE, dtype=np.int64)
    frame[plain] = column(join.innermost_frame)[anchor[plain]]
    frames = _FrameContexts(join, frame[plain], names)
    frame_at = frames.tree.position(frame)
    framed = frame_at >= 0
    frame_chain = np.where(plain, 0, -1)
    frame_chain[framed] = frames.chain[frame_at[framed]]

    # (U, C) as `JoinState.user_call` finds them: a user frame's own op runs directly in it.
    user = np.full(len(anchor), NONE, dtype=np.int64)
    call = np.full(len(anchor), NONE, dtype=np.int64)
    asked = framed & ~replay
    in_user = asked.copy()
    in_user[asked] = frames.is_user[frame_at[asked]]
    user[in_user] = frame[in_user]
    call[in_user] = ops.top_op[op_at[in_user]]
    below = asked & ~in_user
    user[below] = frames.user[frame_at[below]]
    call[below] = frames.call[frame_at[below]]
    ordered = (user != NONE) & (call != NONE) & orders_calls
    if join.use_call_from:
        ordered[ordered] = cat[call[ordered]] != _PYTHON
    sequence, place = calls.places(user, call, ordered, names)

    # A copy's dtypes, read from the nearest copying op at or above the anchor (a CPU-only trace's
    # leaf `aten::empty_strided` of a cast takes its `aten::_to_copy`'s).
    dtypes = np.where(plain, 0, -1)
    copies = np.flatnonzero(plain)
    cast_rows = _gather(ops.cast_op, op_at[copies], NONE)
    copies, cast_rows = copies[cast_rows != NONE], cast_rows[cast_rows != NONE]
    dtypes[copies] = _dtype_codes(table, cast_rows.tolist())

    # Without frames the answer is a ranking judged by the ops around the op's top-level op.
    window = np.full(len(anchor), -1, dtype=np.int64)
    unframed = plain & ~replay & (frame_chain == 0)
    if orders_calls and unframed.any():
        window[unframed] = join.windows.ids(ops.top_op[op_at[unframed]])

    kind = np.where(launched, np.where(backward, _BACKWARD, _PLAIN), _UNLAUNCHED)
    columns = [
        kind,
        np.where(launched, replay, 0),
        op_chain,
        range_chain,
        np.where(backward, forward, NONE),
        frame_chain,
        sequence,
        place,
        dtypes,
        window,
    ]
    order = np.lexsort(columns[::-1])
    changed = np.zeros(len(order), dtype=bool)
    if len(order):
        changed[0] = True
        for values in columns:
            ranked = values[order]
            changed[1:] |= ranked[1:] != ranked[:-1]
    classes = np.empty(len(order), dtype=np.int64)
    classes[order] = np.cumsum(changed) - 1
    firsts = np.sort(order[changed])  # the stable sort puts each class's first anchor first
    return classes, firsts


def _gather(values: np.ndarray, at: np.ndarray, missing: int) -> np.ndarray:
    """``values[at]``, `missing` where `at` is -1."""
    import numpy as np

    out = np.full(len(at), missing, dtype=np.int64)
    known = at >= 0
    out[known] = values[at[known]]
    return out


def _dtype_codes(table, rows: list[int]) -> list[int]:
    """A code for `copy_dtypes` of each row (0: none), computed once per distinct args object."""
    names, args = table.name, table.args
    codes: dict[tuple, int] = {(None, None): 0}
    by_args: dict[tuple[str, int], int] = {}
    out = []
    for row in rows:
        name = names[row]
        if name not in COPY_OPS:
            out.append(0)
            continue
        row_args = args[row]
        key = (name, id(row_args))
        code = by_args.get(key)
        if code is None:
            code = by_args[key] = codes.setdefault(copy_dtypes(name, row_args), len(codes))
        out.append(code)
    return out


class _OpContexts:
    """Per op-family row of the anchors' trees: op chain id, range chain id, forward op, top-level op."""

    def __init__(self, join: JoinState, anchors: np.ndarray, names: ValueCodes) -> None:
        import numpy as np

        table = join.table
        parents = column(join.op_parents)
        fwdbwd = join.trace.fwdbwd
        self.tree = tree = Tree(anchors, parents)
        rows = tree.rows
        n = len(rows)
        cat = column(table.cat)[rows]
        name = names.of(values_at(table.name, rows))
        step_range = names.flags(lambda value: isinstance(value, str) and value.startswith("ProfilerStep#"))
        is_op = cat == _CPU_OP
        tops = np.fromiter(join.top_ops, dtype=np.int64, count=len(join.top_ops))
        is_top = is_op & np.isin(rows, tops)  # (`JoinState.top_op`: the nearest at or above)
        is_range = (cat == _RANGE) & ~step_range[name]
        forward_of = np.full(n, NONE, dtype=np.int64)
        if fwdbwd:
            marked = np.flatnonzero(is_op)
            row_list = rows[marked].tolist()
            forward_of[marked] = [fwdbwd.get(r, NONE) for r in row_list]
        self.op_chain = op_chain = np.zeros(n, dtype=np.int64)
        self.range_chain = range_chain = np.zeros(n, dtype=np.int64)
        self.forward = forward = np.full(n, NONE, dtype=np.int64)
        self.top_op = top_op = np.full(n, NONE, dtype=np.int64)
        self.cast_op = cast_op = np.full(n, NONE, dtype=np.int64)  # the nearest copying op, self included
        is_cast = names.flags(lambda value: value in COPY_OPS)[name]
        op_ids, range_ids = ChainIds(), ChainIds()
        for level in tree.levels:
            above = tree.parent[level]
            has = above >= 0
            inherit = level[has]
            source = above[has]
            op_chain[inherit] = op_chain[source]
            range_chain[inherit] = range_chain[source]
            forward[inherit] = forward[source]
            top_op[inherit] = top_op[source]
            cast_op[inherit] = cast_op[source]
            own_cast = level[is_cast[level]]
            cast_op[own_cast] = rows[own_cast]
            grow = level[is_op[level]]
            op_chain[grow] = op_ids.extend(op_chain[grow], name[grow])
            own = forward_of[grow]
            forward[grow] = np.where(own != NONE, own, forward[grow])
            first = grow[(top_op[grow] == NONE) | is_top[grow]]
            top_op[first] = rows[first]
            named = level[is_range[level]]
            range_chain[named] = range_ids.extend(range_chain[named], name[named])


class _FrameContexts:
    """Per frame of the anchors' frame trees: chain id, user frame, and (U, C) as `JoinState` walks them."""

    def __init__(self, join: JoinState, frames: np.ndarray, names: ValueCodes) -> None:
        import numpy as np

        table = join.table
        self.tree = tree = Tree(frames, column(join.frame_parents))
        rows = tree.rows
        n = len(rows)
        name = names.of(values_at(table.name, rows))
        self.is_user = names.flags(lambda value: isinstance(value, str) and is_user_frame(value))[name]
        call_from = ValueCodes()
        texts = [a.get("CallFrom") if a else None for a in values_at(table.args, rows)]
        text = call_from.of(texts)
        _, item = np.unique((name << _ITEM_BITS) | text, return_inverse=True)
        item = item.reshape(-1)
        self.chain = chain = np.zeros(n, dtype=np.int64)
        self.user = user = np.full(n, NONE, dtype=np.int64)
        self.call = call = np.full(n, NONE, dtype=np.int64)
        is_user = self.is_user
        ids = ChainIds()
        for level in tree.levels:
            above = tree.parent[level]
            has = above >= 0
            base = np.zeros(len(level), dtype=np.int64)
            base[has] = chain[above[has]]
            chain[level] = ids.extend(base, item[level])
            child, parent = level[has], above[has]
            direct = is_user[parent]
            user[child[direct]] = rows[parent[direct]]
            call[child[direct]] = rows[child[direct]]
            user[child[~direct]] = user[parent[~direct]]
            call[child[~direct]] = call[parent[~direct]]
