"""`stack_tops` (the nesting sweep on whole columns) against the plain stack loop, on real traces' rows."""

from __future__ import annotations

import numpy as np
import pytest

from tracer.join.columns import column, rows_where, sorted_by_start
from tracer.join.nesting import TOLERANCE_NS
from tracer.join.sweep import _candidates, _first_popped_answer, stack_tops
from tracer.load import load_trace
from tracer.model.events import Cat

OP_FAMILY = (Cat.CPU_OP, Cat.USER_ANNOTATION, Cat.RUNTIME, Cat.DRIVER)
LEAVES = (Cat.RUNTIME, Cat.DRIVER)


def plain_loop(thresholds, ends, pushed) -> list[int]:
    """The stack sweep as nesting defines it: pop while the top ends below the threshold, read the top."""
    stack: list[int] = []
    out = []
    for step, (threshold, _end, push) in enumerate(zip(thresholds.tolist(), ends.tolist(), pushed.tolist())):
        while stack and ends[stack[-1]] < threshold:
            stack.pop()
        out.append(stack[-1] if stack else -1)
        if push:
            stack.append(step)
    return out


@pytest.fixture(scope="module")
def llama(shared_gpu_traces):
    return load_trace(shared_gpu_traces / "hf_llama_generate_stack.json.gz")


def _op_family(trace):
    """The op family of the trace's busiest thread in sweep order: (thresholds, ends, pushed)."""
    table = trace.events
    rows = sorted_by_start(table, rows_where(column(table.cat), OP_FAMILY))
    rows = rows[column(table.tid)[rows] == np.bincount(column(table.tid)[rows]).argmax()]
    ends = column(table.ts_ns)[rows] + column(table.dur_ns)[rows]
    pushed = ~np.isin(column(table.cat)[rows], LEAVES)
    return ends - TOLERANCE_NS, ends, pushed


def test_real_op_rows_match_the_plain_loop(llama):
    thresholds, ends, pushed = _op_family(llama)
    assert len(ends) > 20_000
    tops = stack_tops(thresholds, ends, pushed)
    assert tops.tolist() == plain_loop(thresholds, ends, pushed)
    # Real rows nest: every candidate was still on the stack, no loop needed.
    assert _first_popped_answer(_candidates(thresholds, ends, pushed), pushed) == len(ends)


def test_real_frames_with_start_thresholds_match_the_plain_loop(llama):
    table = llama.events
    frames = sorted_by_start(table, rows_where(column(table.cat), (Cat.PYTHON_FUNCTION,)))
    starts = column(table.ts_ns)[frames]
    ends = starts + column(table.dur_ns)[frames]
    # OpTree's sweep: pop what ended by this start; thresholds only grow.
    tops = stack_tops(starts + 1, ends, np.ones(len(frames), dtype=bool), monotone=True)
    assert tops.tolist() == plain_loop(starts + 1, ends, np.ones(len(frames), dtype=bool))


def test_a_leaf_sticking_out_of_its_op_hands_over_to_the_loop(llama):
    """A runtime call that ends after its op pops the op; the ops after it must not see it any more."""
    thresholds, ends, pushed = _op_family(llama)
    parents = np.asarray(plain_loop(thresholds, ends, pushed))
    # A runtime call followed by another row inside the same op (the op stays their parent).
    leaf = next(
        int(r) for r in np.flatnonzero(~pushed[:-1]) if parents[r] >= 0 and parents[r + 1] == parents[r]
    )
    ends, thresholds = ends.copy(), thresholds.copy()
    ends[leaf] = ends[parents[leaf]] + 10 * TOLERANCE_NS  # now it ends after its op
    thresholds[leaf] = ends[leaf] - TOLERANCE_NS
    first_wrong = _first_popped_answer(_candidates(thresholds, ends, pushed), pushed)
    assert leaf < first_wrong < len(ends)
    assert stack_tops(thresholds, ends, pushed).tolist() == plain_loop(thresholds, ends, pushed)


def test_empty_and_single_steps():
    empty = np.zeros(0, dtype=np.int64)
    assert stack_tops(empty, empty, empty.astype(bool)).tolist() == []
    one = np.array([5], dtype=np.int64)
    assert stack_tops(one, one, np.array([True])).tolist() == [-1]
