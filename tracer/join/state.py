"""`JoinState`: what the join's sweeps found about a trace, read by every later step of the join.

The sweeps (`tracer.join.attribute`) fill it once: each row's enclosing op or range, each frame's
parent frame, the top-level CPU ops, the innermost frame around the rows asked about, and each
thread's frames in start order. `CallOrder`, the context classes and `OriginBuilder` read it; the
walks they share (up to the top-level op, to the nearest copy, to the user frame) live here.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tracer.join.dtypes import COPY_OPS
from tracer.join.frames import is_user_frame
from tracer.model.events import NONE, Cat, EventTable, Trace

if TYPE_CHECKING:
    import numpy as np

    from tracer.join.stackless import OpWindows

_CPU_OP = Cat.CPU_OP


@dataclass
class JoinState:
    """Per-row links of one trace (``NONE`` where absent); see the module docstring."""

    trace: Trace
    use_call_from: bool  # CallFrom is read (the trace has it and the caller did not turn it off)
    op_parents: array = field(init=False)  # innermost enclosing cpu_op / range / runtime call
    frame_parents: array = field(init=False)  # a Python frame's parent frame
    innermost_frame: array = field(init=False)  # the frame around a row (rows asked about only)
    # CPU ops with no CPU op around them, and those Python code runs inside a Python-run op (an
    # autograd Function's ``forward``'s, `tracer.join.nesting.python_run_ops`): the calls of their frame
    top_ops: set[int] = field(default_factory=set)
    # Python frames by start, per thread (pid, tid), or all threads laid end to end under (NONE, NONE).
    sorted_frames: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    _user_above: dict[int, tuple[int, int]] = field(default_factory=dict)  # frame -> (U, C), see user_call
    _windows: OpWindows | None = None

    def __post_init__(self) -> None:
        n = len(self.trace.events)
        self.op_parents = array("q", [NONE]) * n
        self.frame_parents = array("q", [NONE]) * n
        self.innermost_frame = array("q", [NONE]) * n

    @property
    def table(self) -> EventTable:
        return self.trace.events

    @property
    def windows(self) -> OpWindows:
        """The top-level ops around any op, per thread (for ops without frames), built on first use."""
        if self._windows is None:
            from tracer.join.stackless import OpWindows

            self._windows = OpWindows(self)
        return self._windows

    def top_op(self, row: int) -> int:
        """The top-level op (`top_ops`) at or above `row`: its outermost CPU op, or, inside an
        autograd Function's op, the op of the Function's ``forward`` that it is or runs in."""
        parents, tops = self.op_parents, self.top_ops
        cur = row
        while cur != NONE and cur not in tops:
            cur = parents[cur]
        return cur

    def cast_op(self, row: int) -> int:
        """The nearest copying op (`COPY_OPS`) at or above `row`, or NONE."""
        cats, names, parents = self.table.cat, self.table.name, self.op_parents
        cur = row
        while cur != NONE:
            if cats[cur] == _CPU_OP and names[cur] in COPY_OPS:
                return cur
            cur = parents[cur]
        return NONE

    def user_call(self, anchor: int, frame: int) -> tuple[int, int]:
        """(U, C): the innermost user frame around the anchor, and the call in U that led to it.

        C is U's child frame on the way down (a builtin such as ``.to``, a module call, a torch
        function), or, when the op runs directly in U (``x[i] = v``), its top-level op (`top_op`).
        """
        names = self.table.name
        if frame == NONE:
            return NONE, NONE
        if is_user_frame(names[frame]):
            return frame, self.top_op(anchor)
        found = self._user_above.get(frame)
        if found is None:  # the walk up depends on the frame only: many anchors share it
            found = self._user_above[frame] = self._walk_to_user(frame)
        return found

    def _walk_to_user(self, frame: int) -> tuple[int, int]:
        names, parents = self.table.name, self.frame_parents
        child, cur = frame, parents[frame]
        while cur != NONE and not is_user_frame(names[cur]):
            child, cur = cur, parents[cur]
        return cur, child if cur != NONE else NONE
