"""The nesting stack sweep, in numpy: at each step pop the entries that end too early, read the top.

Nesting (`tracer.join.nesting`, `tracer.explain.optree`) walks rows in start order with a stack:
step t pops every top entry whose end is below ``thresholds[t]``, answers the entry then on top,
and pushes itself if ``pushed[t]``. A Python loop over a 500 MB trace's million rows costs most of a
second; `stack_tops` gives the same answers from whole-column passes:

- the top at step t is the latest entry still on the stack whose end reaches ``thresholds[t]`` (any
  entry above it ends too early and is popped), so the answer is the latest pushed j < t that
  reaches it (a search in a max segment tree over the ends) -- provided j is still on the stack;
- it is, given right answers before t, iff walking the stack down from step t - 1 (each entry's
  answer is the entry below it) lands on j; those walks add up to the pops of the plain loop;
- where that check fails (a row sticking out of its parent by more than the tolerance, where a row
  that is not pushed popped it), the plain stack loop takes over from the first such step.

With thresholds that never decrease (`monotone`), a popped entry can never reach a later threshold,
so the check is skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_LOWEST = -(1 << 63)  # the end of an entry that is never pushed: reaches no threshold
_CHUNK = 1 << 16  # steps searched at once
_STRETCH, _RESUMES = 4096, 6  # steps the loop answers after a wrong candidate (x4 each time); how often


def stack_tops(
    thresholds: np.ndarray, ends: np.ndarray, pushed: np.ndarray, *, monotone: bool = False
) -> np.ndarray:
    """The stack's top (a step index, -1 when empty) at each step, after that step's pops."""
    import numpy as np

    count = len(thresholds)
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    values = np.where(pushed, ends, _LOWEST).astype(np.int64, copy=False)
    if int(thresholds.min()) <= _LOWEST:
        return _loop(thresholds, values, pushed, np.full(count, -1, dtype=np.int64), 0, count)
    tops = _candidates(thresholds, ends, pushed)
    if monotone:
        return tops
    # A wrong candidate is rare (a row sticking out of its parent): the loop answers a stretch
    # from there, then the check resumes; after a few such stretches the loop finishes the job.
    checked, stretch = 0, _STRETCH
    for _ in range(_RESUMES):
        wrong = _first_popped_answer(tops, pushed, checked)
        if wrong == count:
            return tops
        checked = min(count, wrong + stretch)
        tops = _loop(thresholds, values, pushed, tops, wrong, checked)
        stretch *= 4
    return _loop(thresholds, values, pushed, tops, checked, count)


def _candidates(thresholds: np.ndarray, ends: np.ndarray, pushed: np.ndarray) -> np.ndarray:
    """For each step: the latest pushed step before it whose end reaches its threshold, else -1."""
    import numpy as np

    # Only pushed steps can be answers: search among them, each step among those before it.
    entries = np.flatnonzero(pushed)
    before = np.cumsum(pushed) - pushed
    found = _latest_reaching(ends[entries].astype(np.int64, copy=False), thresholds, before)
    return np.where(found >= 0, entries[np.maximum(found, 0)], -1) if len(entries) else found


def _max_tree(values: np.ndarray) -> tuple[np.ndarray, int]:
    """An implicit max segment tree: node k holds the max of its children 2k, 2k+1; leaves from `size`."""
    import numpy as np

    size = 1 << max(1, (len(values) - 1).bit_length())
    tree = np.full(2 * size, _LOWEST, dtype=np.int64)
    tree[size : size + len(values)] = values
    width = size
    while width > 1:
        half = width >> 1
        np.maximum(tree[2 * half : 4 * half : 2], tree[2 * half + 1 : 4 * half : 2], out=tree[half:width])
        width = half
    return tree, size


def _latest_reaching(values: np.ndarray, thresholds: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """For each t: the largest j < ``limits[t]`` with ``values[j] >= thresholds[t]``, else -1."""
    import numpy as np

    out = np.full(len(thresholds), -1, dtype=np.int64)
    if len(values) == 0:
        return out
    tree, size = _max_tree(values)
    # The last value before the limit is the commonest answer (a first child under its parent).
    last = limits - 1
    near = np.flatnonzero(last >= 0)
    near = near[values[last[near]] >= thresholds[near]]
    out[near] = last[near]
    far = limits > 0
    far[near] = False
    # The rest: walk up from leaf t, taking at each level the node just left of the prefix's
    # right edge; the first (rightmost) node holding a reaching value contains the answer. In
    # chunks: small temporaries are reused, where big ones would cost a page fault per 4 kB.
    pending = np.flatnonzero(far)
    for first in range(0, len(pending), _CHUNK):
        query = pending[first : first + _CHUNK]
        right = last[query] + size
        want = thresholds[query]
        width = size  # nodes at this level: [width, 2 * width); the root level (1) holds no answer
        while width > 1 and len(query):
            odd = (right & 1) == 1
            right -= odd
            hit = odd & (tree[right] >= want)
            if hit.any():
                _descend(tree, size, right[hit], want[hit], query[hit], out)
                keep = ~hit
                query, right, want = query[keep], right[keep], want[keep]
            right >>= 1
            width >>= 1
    return out


def _descend(
    tree: np.ndarray, size: int, node: np.ndarray, want: np.ndarray, query: np.ndarray, out: np.ndarray
) -> None:
    """From nodes known to hold a reaching value, the rightmost leaf that does."""
    import numpy as np

    while len(node) and int(node.min()) < size:
        inner = node < size
        right = 2 * node[inner] + 1
        node[inner] = np.where(tree[right] >= want[inner], right, right - 1)
    out[query] = node - size


def _first_popped_answer(tops: np.ndarray, pushed: np.ndarray, start: int = 0) -> int:
    """The first step t >= `start` whose candidate j = tops[t] is no longer on the stack, or len(tops).

    Given right answers before t, the stack before t is the chain from the step before (if
    pushed; else from its answer) down through each entry's own answer; j is on it iff walking
    that chain down from above j lands on j. The walks add up to the pops of the plain loop.
    """
    import numpy as np

    count = len(tops)
    steps = np.flatnonzero(tops[start:] >= 0) + start
    steps = steps[steps - tops[steps] >= 2]
    if len(steps) == 0:
        return count
    oldest = tops[steps]
    below = steps - 1
    entry = np.where(pushed[below], below, tops[below])
    wrong = []
    while len(steps):
        above = entry > oldest
        missed = ~above & (entry != oldest)
        if missed.any():
            wrong.append(int(steps[missed].min()))
        steps, oldest, entry = steps[above], oldest[above], tops[entry[above]]
    return min(wrong) if wrong else count


def _loop(
    thresholds: np.ndarray, values: np.ndarray, pushed: np.ndarray, tops: np.ndarray, start: int, stop: int
) -> np.ndarray:
    """`tops` with steps [start, stop) answered by the plain stack loop, its stack rebuilt from the
    answers before `start`."""
    import numpy as np

    stack: list[int] = []
    if start > 0:
        entry = start - 1 if pushed[start - 1] else int(tops[start - 1])
        while entry != -1:
            stack.append(entry)
            entry = int(tops[entry])
        stack.reverse()
    ends = [int(values[entry]) for entry in stack]
    answers = []
    for step, threshold, end, push in zip(
        range(start, stop),
        thresholds[start:stop].tolist(),
        values[start:stop].tolist(),
        pushed[start:stop].tolist(),
    ):
        while ends and ends[-1] < threshold:
            stack.pop()
            ends.pop()
        answers.append(stack[-1] if stack else -1)
        if push:
            stack.append(step)
            ends.append(end)
    out = tops.copy()
    out[start:stop] = np.asarray(answers, dtype=np.int64)
    return out
