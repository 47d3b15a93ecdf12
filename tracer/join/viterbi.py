"""The alignment's two passes (`tracer.join.align.Alignment`): plain loops, compiled by numba when
a process has much to align.

A pass walks the tokens of a run through a program: for each token, every state's cheapest cost
so far, relaxed over the edges that consume the token, then closed over the free edges (forward ones
in one sweep, in order; those that loop back until nothing changes). The stackless ranking aligns
each window of a trace with dozens of functions, tens of thousands of alignments a trace: in Python
these loops took two thirds of its time, so `passes_for` hands out the numba-compiled copy of these
very functions once a process's runs outgrow `PLAIN_WORK`. Below it (a framed join: a few dozen
runs) the plain loops are cheaper than numba's import and cache load (~0.1 s against ~0.4 s of the
535 MB bench trace's serial path). The arithmetic is the same, in the same order, either way (same
floats, same answers); ``NUMBA_DISABLE_JIT=1`` runs the compiled copy uncompiled.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable

import numpy as np

# a loop edge must improve a state by more than this to go round again (align.TIE: this module is
# imported by align, lazily, and imports nothing of it)
TIE = 1e-9
# Tokens x edges (align's measure of a run) a process aligns with the plain loops before it loads
# the compiled ones: ~0.9 us each, so at most ~0.15 s, under numba's import and cache load (~0.4 s).
PLAIN_WORK = 160_000
_plain_work = 0  # what this process has aligned with the plain loops so far


def _close(cost, src, dst, edge_cost, loop_src, loop_dst, loop_cost):
    """Relax the free edges src -> dst in their order (one sweep settles them), then those that loop
    back, and again while a loop improved a state."""
    changed = True
    while changed:
        for j in range(len(src)):
            value = cost[src[j]] + edge_cost[j]
            if value < cost[dst[j]]:
                cost[dst[j]] = value
        changed = False
        for j in range(len(loop_src)):
            value = cost[loop_src[j]] + loop_cost[j]
            if value < cost[loop_dst[j]] - TIE:
                cost[loop_dst[j]] = value
                changed = True


def _sweep(initial, free, loops, extra, weight, first, src, dst, edge_cost, local, fresh, backwards):
    """One pass: row k the cost of each state at token k's boundary, from `initial` at the start
    (forward: row 0) or the end (backward: the last row). `free` and `loops` are (src, dst, cost)
    in the direction of the pass; `src`/`dst` the tokens' consuming edges in it."""
    tokens = len(extra)
    rows = np.empty((tokens + 1, len(initial)))
    cost = initial.copy()
    _close(cost, free[0], free[1], free[2], loops[0], loops[1], loops[2])
    rows[tokens if backwards else 0] = cost
    for step in range(tokens):
        k = tokens - 1 - step if backwards else step
        known = rows[k + 1] if backwards else rows[k]
        found = rows[k] if backwards else rows[k + 1]
        for s in range(len(known)):
            found[s] = known[s] + extra[k]
        for j in range(first[k], first[k + 1]):
            c = edge_cost[j]
            value = known[src[j]] + (c * weight[k] if c < 0 else c)
            if value < found[dst[j]]:
                found[dst[j]] = value
        if local:  # or start (stop) right here, where a part may (`fresh`)
            for s in range(len(found)):
                if fresh[s] and not found[s] < 0.0:
                    found[s] = 0.0
        _close(found, free[0], free[1], free[2], loops[0], loops[1], loops[2])
    return rows


def passes(start, end, fu, fv, fc, lu, lv, lc, extra, weight, first, eu, ev, ec, local, fresh):
    """(forward, backward, closed end): row k of forward is the cost of each state before token k
    (row K: after the last), row k of backward the cost from each state before token k to the end.

    `start`/`end`: each state's cost to begin/finish there; `fu, fv, fc` the forward free edges by u,
    `lu, lv, lc` those that loop back; per token k, `extra[k]` what leaving it unexplained costs,
    `weight[k]` its rewards' weight, and its consuming edges ``eu, ev, ec[first[k]:first[k + 1]]``;
    `local`: a window, which may start and stop anywhere (no state costs more than 0) but between an
    operator's two ops (`fresh` False: `Program.bound`; `start` and `end` say so too). The backward
    pass runs the same edges the other way, the free ones in reverse order."""
    forward = _sweep(start, (fu, fv, fc), (lu, lv, lc), extra, weight, first, eu, ev, ec, local, fresh, False)
    free_back = (fv[::-1].copy(), fu[::-1].copy(), fc[::-1].copy())
    backward = _sweep(end, free_back, (lv, lu, lc), extra, weight, first, ev, eu, ec, local, fresh, True)
    return forward, backward, backward[len(extra)]


def passes_for(work: int) -> Callable:
    """`passes` for a run of `work` tokens x edges: the plain loops while this process's runs stay
    within `PLAIN_WORK` together, else (from then on) the compiled copy."""
    global _plain_work
    if _plain_work + work <= PLAIN_WORK and compiled_passes.cache_info().currsize == 0:
        _plain_work += work
        return passes
    return compiled_passes()


@functools.cache
def compiled_passes() -> Callable:
    """`passes` compiled by numba, with the `_sweep` and `_close` it calls (numba's cache keeps the
    machine code beside this file: ~4 s to compile the first time, ~0.3 s to load after).

    The compiled functions are copies of the plain ones whose globals name each other's compiled
    copy (numba resolves a callee by its global name); the plain ones stay plain."""
    from numba import njit

    namespace = dict(globals())
    for plain in (_close, _sweep, passes):
        copy = types.FunctionType(plain.__code__, namespace, plain.__name__)
        namespace[plain.__name__] = njit(cache=True)(copy)
    return namespace["passes"]
