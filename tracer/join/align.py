"""Align one run of a frame (its observed calls, in order) with its function's `Program`.

The run's tokens are matched to the program's call points by the cheapest path through the
program that explains the whole sequence (a Viterbi pass forward and one backward; costs in
`tracer.join.tokens`). For any one token, every point it could be is scored by the cheapest whole
alignment that puts it there; the answer is the best point, and how sure it is follows from how
much more the best *other line* would cost (its margin):

- a margin of at least `EXACT_MARGIN`: the only line consistent with the whole run (confidence 1.0);
- a smaller margin: the best fit, with the runner-up named (confidence below 0.9);
- a tie: ambiguous, every tied line listed, confidence split between them.

So an ``if``/``else`` resolves from the calls each arm would have made, a call that ran only on
some steps moves nothing after it, and a loop may run any number of times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tracer.join.program import CallPoint, Program, edge_arrays
from tracer.join.tokens import Token

INF = float("inf")
END_EARLY = 3.0  # a run that stops before its function's end (an exception, the profiler stopping)
EXACT_MARGIN = 1.0  # the next line would need at least this much more surprise: exact
TIE_MARGIN = 0.25  # closer than this is no evidence (what a scalar operator or a view costs): a tie
GOOD_MARGIN = 0.5
MAX_WORK = 4_000_000  # tokens x edges beyond which a run is not aligned (a huge driver loop)
TIE = 1e-9  # closer than this is equal: a fit no worse than leaving the token out (viterbi.TIE alike)
AGAIN = 0.3  # in a window: the function called again right after it returned (the next layer)
FADE = 0.9  # in a window: a reward's weight per token of distance from the focus


class Costs(Protocol):
    """How surprising each step of an alignment is (`tracer.join.tokens.FRAMED`, or the stackless
    model of `tracer.join.stackless`); `skip` is baked into the program's edges when it is built."""

    def match(self, point: CallPoint, token: Token) -> float | None: ...

    def repeat(self, point: CallPoint, token: Token) -> float | None: ...

    def insert(self, token: Token) -> float: ...

    def skip(self, point: CallPoint) -> float: ...


@dataclass(frozen=True)
class PointChoice:
    """The point a token was (None: none fits), how sure, why, and the ranked other lines."""

    point: CallPoint | None
    confidence: float
    evidence: tuple[str, ...]
    candidates: tuple[CallPoint, ...] = ()  # best first, one per line, the chosen one included


@dataclass(frozen=True)
class _Consumes:
    """The edges that can consume one token: (u, v, cost, point) each, and u, v, cost as arrays."""

    edges: list[tuple[int, int, float, int]]
    u: np.ndarray
    v: np.ndarray
    cost: np.ndarray

    @staticmethod
    def of(edges: list[tuple[int, int, float, int]]) -> _Consumes:
        return _Consumes(edges, *edge_arrays(edges))


class Alignment:
    """Forward and backward costs of one run (`tokens`) through `program`; ask `choose(i)`.

    ``free_start``: the run may begin at any state (a frame already running when profiling began).
    ``local``: the tokens are a window around the calls of interest, not one whole run: tokens
    before and after the function's part are free, it may start and stop anywhere and run again
    right after it returns (a layer after a layer); the stackless ranking, where no frame says
    where a run begins. ``focus``: in a window, the token the question is about; rewards
    (negative costs) fade with the distance from it, so the ops next to it count most.
    ``compatible``: the edges each token can take, kept by the caller between alignments of one
    program under the same costs.
    """

    def __init__(
        self,
        program: Program,
        tokens: Sequence[Token],
        costs: Costs,
        *,
        free_start: bool = False,
        local: bool = False,
        focus: int | None = None,
        compatible: dict[Token, _Consumes] | None = None,
    ) -> None:
        from tracer.join.viterbi import passes_for

        self.program = program
        self.tokens = tuple(tokens)
        self.costs = costs
        self.local = local
        n = program.n_states
        flow = program.flow
        loop_u, loop_v, loop_cost = flow.loop_u, flow.loop_v, flow.loop_cost
        if local:  # the function called again right after it returned (the next layer)
            loop_u = np.append(loop_u, program.exit)
            loop_v = np.append(loop_v, program.entry)
            loop_cost = np.append(loop_cost, AGAIN)
        self._weights = [FADE ** abs(i - focus) for i in range(len(tokens))] if focus is not None else None
        # token -> the edges that consume it; a caller aligning many runs with one program and one
        # `costs` may pass one dict to share
        self._compatible = compatible if compatible is not None else {}
        # In a whole run, tokens no point can explain add the same cost to every alignment: left out.
        self._kept = [i for i, t in enumerate(self.tokens) if local or self._edges(t)]
        self._position = {i: k for k, i in enumerate(self._kept)}
        work = len(self._kept) * (len(program.eps) + len(program.consume))
        self.too_big = work > MAX_WORK
        if self.too_big:
            return
        start = np.full(n, INF)
        start[[program.entry, *program.resumes]] = 0.0
        if free_start or local:
            start[:] = 0.0
        end = np.full(n, 0.0 if local else END_EARLY)
        end[program.exit] = 0.0
        # no part of a window starts or stops between an operator's two ops (`Program.bound`)
        fresh = program.fresh
        start[~fresh] = INF
        end[~fresh] = INF
        consumes = [self._consumes(self.tokens[i]) for i in self._kept]
        first = np.zeros(len(consumes) + 1, dtype=np.int64)
        first[1:] = np.cumsum([len(c.u) for c in consumes])
        self._forward, self._backward, closed = passes_for(work)(
            start,
            end,
            flow.forward_u,
            flow.forward_v,
            flow.forward_cost,
            loop_u,
            loop_v,
            loop_cost,
            np.asarray([costs.insert(self.tokens[i]) for i in self._kept], dtype=np.float64),
            np.asarray([self._weight(i) for i in self._kept], dtype=np.float64),
            first,
            np.concatenate([c.u for c in consumes]) if consumes else np.zeros(0, dtype=np.int64),
            np.concatenate([c.v for c in consumes]) if consumes else np.zeros(0, dtype=np.int64),
            np.concatenate([c.cost for c in consumes]) if consumes else np.zeros(0),
            local,
            fresh,
        )
        self.total = float(np.min(self._forward[-1] + closed))

    # -- the passes -------------------------------------------------------------------------------
    def _edges(self, token: Token) -> list[tuple[int, int, float, int]]:
        """(u, v, cost, point) of each edge that can consume `token`."""
        return self._consumes(token).edges

    def _consumes(self, token: Token) -> _Consumes:
        found = self._compatible.get(token)
        if found is None:
            points = self.program.points
            edges = []
            for u, v, p in self.program.consume:
                cost = self.costs.match(points[p], token)
                if cost is not None:
                    edges.append((u, v, cost, p))
            for t, p in self.program.repeats:
                cost = self.costs.repeat(points[p], token)
                if cost is not None:
                    edges.append((t, t, cost, p))
            found = self._compatible[token] = _Consumes.of(edges)
        return found

    def _weight(self, i: int) -> float:
        return self._weights[i] if self._weights is not None else 1.0

    # -- answers ---------------------------------------------------------------------------------
    def scores(
        self, i: int, penalty: Callable[[CallPoint], float] | None = None
    ) -> tuple[dict[int, float], float]:
        """({point index: cost of the best alignment putting token i there}, cost of leaving it out)."""
        k = self._position.get(i)
        if k is None or self.too_big:
            return {}, INF
        token = self.tokens[i]
        before, after = self._forward[k], self._backward[k + 1]
        points = self.program.points
        weight = self._weight(i)
        best: dict[int, float] = {}
        for u, v, c, p in self._edges(token):
            value = float(before[u]) + (c * weight if c < 0 else c) + float(after[v])
            if penalty is not None and value < INF:
                value += penalty(points[p])
            if value < best.get(p, INF):
                best[p] = value
        extra = self.costs.insert(token)
        left_out = float(np.min(before + extra + after))
        return best, left_out

    def choose(self, i: int, penalty: Callable[[CallPoint], float] | None = None) -> PointChoice:
        """The point token i was, with a confidence from the margin to the best other line."""
        if self.too_big:
            return PointChoice(None, 0.0, ("the run is too long to align",))
        best, left_out = self.scores(i, penalty)
        if not best:
            return PointChoice(None, 0.0, ("no call in the function's source can have made it",))
        points = self.program.points
        by_line: dict[int, tuple[float, int]] = {}
        for p, value in best.items():
            line = points[p].line
            if value < by_line.get(line, (INF, 0))[0]:
                by_line[line] = (value, p)
        ranked = sorted(by_line.values())
        top, p = ranked[0]
        if top >= INF or top > left_out + TIE:
            return PointChoice(
                None, 0.0, ("the run fits better with this call made by no line of the source",)
            )
        tied = [q for value, q in ranked if value <= top + TIE_MARGIN]
        runner_up = min([value for value, _ in ranked[len(tied) :]] + [left_out])
        margin = runner_up - top
        candidates = tuple(points[q] for _, q in ranked[:5])
        if len(tied) > 1:
            lines = ", ".join(str(points[q].line) for q in tied)
            return PointChoice(
                points[p],
                round(0.5 / len(tied), 3),
                (f"ambiguous: lines {lines} fit the run's calls equally well",),
                candidates,
            )
        if margin >= EXACT_MARGIN:
            return PointChoice(
                points[p], 1.0, ("the only line that fits the run's whole call sequence",), candidates[:1]
            )
        confidence = 0.8 if margin >= GOOD_MARGIN else 0.6
        second = points[ranked[1][1]].line if len(ranked) > 1 else None
        why = (
            f"fits the run's calls best; line {second} nearly as well"
            if second
            else "fits the run's calls best"
        )
        return PointChoice(points[p], confidence, (why,), candidates)
