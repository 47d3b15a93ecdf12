"""The alignment's passes run as plain loops or compiled (numba, `tracer.join.viterbi`), by how much a
process aligns: both must give the same floats, state for state, and so the same answers, whichever
a run gets (no ranking may move with what ran before it). Checked on the zoo's real functions
(loops, branches, ``try``, comprehensions) with windows of real op names, locally (the stackless
ranking) and as whole runs (the framed join)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import numpy as np
import pytest

from tracer.join import viterbi
from tracer.join.align import Alignment
from tracer.join.program import ModulePrograms
from tracer.join.stackless import STACKLESS
from tracer.join.tokens import FRAMED, token_of
from tracer.model.events import Cat

ZOO = Path(__file__).resolve().parents[2] / "bench" / "corpus" / "zoo"
WINDOW = (
    "aten::linear", "aten::view", "aten::to", "aten::pow", "aten::mean", "aten::add", "aten::rsqrt",
    "aten::mul", "aten::to", "aten::mul", "aten::transpose", "aten::cat", "aten::index",
    "aten::copy_", "aten::softmax", "aten::matmul", "aten::add", "aten::linear",
)  # fmt: skip


@pytest.fixture
def passes(monkeypatch):
    """Makes every alignment run the plain loops (`use(False)`) or the compiled ones (`use(True)`)."""

    def use(compiled: bool) -> None:
        chosen = viterbi.compiled_passes() if compiled else viterbi.passes
        monkeypatch.setattr(viterbi, "passes_for", lambda work: chosen)

    return use


def _programs() -> list:
    found = []
    for path in sorted(ZOO.glob("*.py")):
        programs = ModulePrograms(ast.parse(path.read_text()), STACKLESS.skip)
        for line, name, _ in programs.functions():
            program = programs.program(line, name)
            if program is not None and program.points:
                found.append(program)
    return found


def _answers(program, tokens, costs, **how) -> tuple:
    alignment = Alignment(program, tokens, costs, **how)
    if alignment.too_big:
        return ("too big",)
    return (alignment.total, *(alignment.scores(i) for i in range(len(tokens))))


def test_compiled_passes_give_the_plain_loops_floats(passes) -> None:
    programs = _programs()
    assert len(programs) > 50  # the zoo's functions, loops and branches among them
    assert any(p.flow.loop_u.size for p in programs)  # loops: the closure goes round again
    tokens = tuple(token_of(name, Cat.CPU_OP) for name in WINDOW)
    runs = [(STACKLESS, {"local": True, "focus": hot}, tokens) for hot in (0, 4, 11, len(tokens) - 1)] + [
        (FRAMED, {"free_start": True}, tokens),
        (FRAMED, {}, tokens[:6]),
    ]
    passes(True)
    compiled = [[_answers(p, t, costs, **how) for costs, how, t in runs] for p in programs]
    passes(False)
    plain = [[_answers(p, t, costs, **how) for costs, how, t in runs] for p in programs]
    assert compiled == plain
    fitted = [a for rows in compiled for a in rows if len(a) > 1 and any(s[0] for s in a[1:])]
    assert len(fitted) > 100  # most alignments place some op: the comparison is not of empty answers


def test_a_process_aligns_with_the_plain_loops_until_its_runs_outgrow_them(monkeypatch) -> None:
    monkeypatch.setattr(viterbi, "_plain_work", 0)
    monkeypatch.setattr(viterbi, "compiled_passes", functools.cache(viterbi.compiled_passes.__wrapped__))
    assert viterbi.passes_for(viterbi.PLAIN_WORK // 2) is viterbi.passes
    assert viterbi.passes_for(viterbi.PLAIN_WORK // 2) is viterbi.passes
    compiled = viterbi.passes_for(1)  # past the budget: numba's copy, and from then on
    assert compiled is not viterbi.passes
    assert compiled.py_func.__code__ is viterbi.passes.__code__
    assert viterbi.passes_for(0) is compiled


def test_flow_orders_forward_edges_for_one_sweep() -> None:
    program = next(p for p in _programs() if p.flow.loop_u.size)
    flow = program.flow
    assert (flow.forward_u < flow.forward_v).all()
    assert (np.diff(flow.forward_u) >= 0).all()
    assert (flow.loop_u >= flow.loop_v).all()
    assert flow.forward_u.size + flow.loop_u.size == len(program.eps)
