"""The alignment's two passes (`tracer.join.align.Alignment`), compiled by numba.

A pass walks the tokens of a run through a program: for each token, every state's cheapest cost
so far, relaxed over the edges that consume the token, then closed over the free edges (forward ones
in one sweep, in order; those that loop back until nothing changes). The stackless ranking aligns
each window of a trace with dozens of functions, tens of thousands of alignments a trace: in Python
these loops took two thirds of its time. The arithmetic is the same, in the same order, as the
plain loops it replaced (same floats, same answers); ``NUMBA_DISABLE_JIT=1`` runs this very code
uncompiled.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# a loop edge must improve a state by more than this to go round again (align.TIE: this module is
# imported by align, lazily, and imports nothing of it)
TIE = 1e-9


@njit(cache=True)
def _close(cost, src, dst, edge_cost, loop_src, loop_dst, loop_cost):  # pragma: no cover - compiled
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


@njit(cache=True)
def _sweep(
    initial, free, loops, extra, weight, first, src, dst, edge_cost, local, backwards
):  # pragma: no cover
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
        if local:  # or start (stop) right here
            for s in range(len(found)):
                if not found[s] < 0.0:
                    found[s] = 0.0
        _close(found, free[0], free[1], free[2], loops[0], loops[1], loops[2])
    return rows


@njit(cache=True)
def passes(start, end, fu, fv, fc, lu, lv, lc, extra, weight, first, eu, ev, ec, local):  # pragma: no cover
    """(forward, backward, closed end): row k of forward is the cost of each state before token k
    (row K: after the last), row k of backward the cost from each state before token k to the end.

    `start`/`end`: each state's cost to begin/finish there; `fu, fv, fc` the forward free edges by u,
    `lu, lv, lc` those that loop back; per token k, `extra[k]` what leaving it unexplained costs,
    `weight[k]` its rewards' weight, and its consuming edges ``eu, ev, ec[first[k]:first[k + 1]]``;
    `local`: a window, which may start and stop anywhere (no state costs more than 0). The backward
    pass runs the same edges the other way, the free ones in reverse order."""
    forward = _sweep(start, (fu, fv, fc), (lu, lv, lc), extra, weight, first, eu, ev, ec, local, False)
    free_back = (fv[::-1].copy(), fu[::-1].copy(), fc[::-1].copy())
    backward = _sweep(end, free_back, (lv, lu, lc), extra, weight, first, ev, eu, ec, local, True)
    return forward, backward, backward[len(extra)]
