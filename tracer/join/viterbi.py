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

TIE = 1e-9  # a loop edge must improve a state by more than this to go round again


@njit(cache=True)
def _close_forward(cost, fu, fv, fc, lu, lv, lc):  # pragma: no cover - compiled
    changed = True
    while changed:
        for j in range(len(fu)):
            value = cost[fu[j]] + fc[j]
            if value < cost[fv[j]]:
                cost[fv[j]] = value
        changed = False
        for j in range(len(lu)):
            value = cost[lu[j]] + lc[j]
            if value < cost[lv[j]] - TIE:
                cost[lv[j]] = value
                changed = True


@njit(cache=True)
def _close_backward(cost, fu, fv, fc, lu, lv, lc):  # pragma: no cover - compiled
    changed = True
    while changed:
        for j in range(len(fu) - 1, -1, -1):
            value = cost[fv[j]] + fc[j]
            if value < cost[fu[j]]:
                cost[fu[j]] = value
        changed = False
        for j in range(len(lu)):
            value = cost[lv[j]] + lc[j]
            if value < cost[lu[j]] - TIE:
                cost[lu[j]] = value
                changed = True


@njit(cache=True)
def passes(start, end, fu, fv, fc, lu, lv, lc, extra, weight, first, eu, ev, ec, local):  # pragma: no cover
    """(forward, backward, closed end): row k of forward is the cost of each state before token k
    (row K: after the last), row k of backward the cost from each state before token k to the end.

    `start`/`end`: each state's cost to begin/finish there; `fu, fv, fc` the forward free edges by u,
    `lu, lv, lc` those that loop back; per token k, `extra[k]` what leaving it unexplained costs,
    `weight[k]` its rewards' weight, and its consuming edges ``eu, ev, ec[first[k]:first[k + 1]]``;
    `local`: a window, which may start and stop anywhere (no state costs more than 0)."""
    tokens = len(extra)
    n = len(start)
    forward = np.empty((tokens + 1, n))
    backward = np.empty((tokens + 1, n))
    cost = start.copy()
    _close_forward(cost, fu, fv, fc, lu, lv, lc)
    forward[0] = cost
    for k in range(tokens):
        before = forward[k]
        after = forward[k + 1]
        for s in range(n):
            after[s] = before[s] + extra[k]
        for j in range(first[k], first[k + 1]):
            c = ec[j]
            value = before[eu[j]] + (c * weight[k] if c < 0 else c)
            if value < after[ev[j]]:
                after[ev[j]] = value
        if local:
            for s in range(n):
                if not after[s] < 0.0:
                    after[s] = 0.0
        _close_forward(after, fu, fv, fc, lu, lv, lc)
    closed = end.copy()
    _close_backward(closed, fu, fv, fc, lu, lv, lc)
    backward[tokens] = closed
    for k in range(tokens - 1, -1, -1):
        later = backward[k + 1]
        before = backward[k]
        for s in range(n):
            before[s] = later[s] + extra[k]
        for j in range(first[k], first[k + 1]):
            c = ec[j]
            value = later[ev[j]] + (c * weight[k] if c < 0 else c)
            if value < before[eu[j]]:
                before[eu[j]] = value
        if local:
            for s in range(n):
                if not before[s] < 0.0:
                    before[s] = 0.0
        _close_backward(before, fu, fv, fc, lu, lv, lc)
    return forward, backward, closed
