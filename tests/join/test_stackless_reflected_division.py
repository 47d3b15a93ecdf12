"""Without stacks, ``a / x`` of a Python number `a` and a tensor `x` records ``aten::reciprocal`` then
``aten::mul`` (``Tensor.__rtruediv__`` is ``self.reciprocal() * other``), not ``aten::div``; and building
a ``Parameter`` records a ``detach``, no block of code.

Both were found on SGLang's `input_to_float8` (``scale = fp_max / amax``, where ``fp_max`` is
``torch.finfo(dtype).max``, a number the source does not show): its reciprocal and mul fit no line of
it, and went to the function's ``scale.float().reciprocal()`` and ``x.float() * scale`` below. With
them predicted, `Fp8LinearMethod.process_weights_after_loading` (which calls `input_to_float8` and then
builds ``Parameter(qweight.t(), requires_grad=False)``) fit the window of the next helper's
``repeat_interleave`` better, the ``Parameter`` taken for a block that may run it."""

from __future__ import annotations

import ast

import pytest

from tests.join.package_source import line_in
from tests.join.test_stackless_iterating_builtins import _top_level_ops
from tracer.join.align import Alignment
from tracer.join.program import BY_ATTRIBUTE, BY_NAME, CALL, CallPoint, ModulePrograms
from tracer.join.stackless import STACKLESS, predicted_ops, runs_a_block
from tracer.join.tokens import token_of
from tracer.model.events import Cat


def test_a_number_divided_by_a_tensor_records_a_reciprocal_and_a_mul() -> None:
    import torch

    x = torch.rand(4) + 1.0
    assert _top_level_ops(lambda: 2.0 / x) == ["aten::reciprocal", "aten::mul"]
    assert _top_level_ops(lambda: x / 2.0) == ["aten::div"]


def test_a_parameter_records_a_detach_and_runs_no_block() -> None:
    import torch

    x = torch.rand(4, 4)
    assert _top_level_ops(lambda: torch.nn.Parameter(x, requires_grad=False)) == ["aten::detach"]
    for callee in (BY_NAME, BY_ATTRIBUTE):
        point = CallPoint(1, 0, CALL, "Parameter", callee=callee)
        assert not runs_a_block(point)
        assert predicted_ops(point) == ("aten::detach",)
        assert STACKLESS.match(point, token_of("aten::repeat_interleave", Cat.CPU_OP)) is None


def _division_paths(source: str) -> list[list[str]]:
    """The op sequences the program of `source`'s function may predict, each path's ops in order."""
    program = ModulePrograms(ast.parse(source), STACKLESS.skip).program(1, "f")
    assert program is not None
    successors: dict[int, list[tuple[int, str | None]]] = {}
    for u, v, _ in program.eps:
        successors.setdefault(u, []).append((v, None))
    for u, v, p in program.consume:
        successors.setdefault(u, []).append((v, program.points[p].name))
    paths: list[list[str]] = []

    def walk(state: int, ops: list[str]) -> None:
        if state == program.exit:
            paths.append(ops)
            return
        for v, name in successors.get(state, []):
            if v > state:
                walk(v, [*ops, name] if name else ops)

    walk(program.entry, [])
    return paths


def test_a_division_of_a_tensor_may_be_a_reciprocal_and_a_mul() -> None:
    paths = _division_paths("def f(x, amax):\n    return x / amax\n")
    assert ["aten::div"] in paths
    assert ["aten::reciprocal", "aten::mul"] in paths
    # the reciprocal is not skipped on its own: a division does not explain a lone mul
    assert ["aten::mul"] not in paths
    # by a number: a plain division (``x / 2.0``), on numbers none at all
    assert sorted(_division_paths("def f(x):\n    return x / 2.0\n")) == [[], ["aten::div"]]
    assert _division_paths("def f(n):\n    return 2.0 / 4\n") == [[]]


def test_a_windows_lone_mul_is_no_divisions_second_op() -> None:
    """A window's part may start anywhere (a local alignment), but not between an operator's two
    ops (`Program.bound`): a ``mul`` with no ``reciprocal`` before it fits no division."""
    program = ModulePrograms(ast.parse("def f(x, a):\n    return x / a\n"), STACKLESS.skip).program(1, "f")
    assert program is not None and len(program.bound) == 1
    for window in (["aten::mul"], ["aten::add", "aten::mul"], ["aten::add", "aten::mul", "aten::add"]):
        tokens = [token_of(op, Cat.CPU_OP) for op in window]
        best, _ = Alignment(program, tokens, STACKLESS, local=True, focus=window.index("aten::mul")).scores(
            window.index("aten::mul")
        )
        assert not best, window
    tokens = [token_of(op, Cat.CPU_OP) for op in ("aten::add", "aten::reciprocal", "aten::mul")]
    best, _ = Alignment(program, tokens, STACKLESS, local=True, focus=2).scores(2)
    assert best and min(best.values()) < 0  # after its reciprocal, it does


FP8_UTILS = "sglang/srt/layers/quantization/fp8_utils.py"


@pytest.mark.parametrize("torch_version", ["torch2.13", "torch2.14"])
def test_the_scales_reciprocal_is_the_divisions_line(nostack_scores, sglang_root, torch_version: str) -> None:
    """The corpus's SGLang FP8 helpers (`input_to_float8`, `block_quant_to_tensor_quant`,
    `block_quant_dequant` on CPU), every frame stripped: the ``fp_max / amax`` line's reciprocal and mul
    were said to be the lines below it (8.0% of torch 2.13's truth time); none is now, and
    `block_quant_dequant`'s ``repeat_interleave`` is not the ``Parameter`` line of the weight loader."""
    division = line_in(sglang_root, FP8_UTILS, "scale = fp_max / amax")
    repeat = line_in(sglang_root, FP8_UTILS, "x_scale_repeat = x_s.repeat_interleave(block_n, dim=-2)")
    score = nostack_scores(f"sglang/{torch_version}/fp8_helpers")
    assert score.truth_ns > 0
    wrong = [w for w in score.wrong if w.truth in (f"{FP8_UTILS}:{division}", f"{FP8_UTILS}:{repeat}")]
    assert not wrong, [(w.truth, w.said, w.rows) for w in wrong]
    assert score.rank1 >= 0.9  # was 0.847 (torch 2.13) and 0.845 (torch 2.14)
