"""Without stacks, a view that a helper's call *may* take is worth no more than one the source spells.

A helper called past the inlining depth is a block that may run any op it names (`CallPoint.runs`).
Its ops were each worth `HELPER_REWARD` (-0.4), views too, where a view the source spells
(``x[a:b, c:d]``) is worth a third of a quiet op's reward (-0.1): a caller whose deep helper names
``slice`` explained a run of slices better than the function that spells them. On SGLang's
`block_quant_to_tensor_quant` (a cast to float32, then its tiles sliced in a double loop) the cast went
to the like cast of `block_quant_dequant` reached from `requant_weight_ue8m0_inplace`, whose
requantising helper takes views too."""

from __future__ import annotations

import pytest

from tests.join.package_source import line_in
from tracer.join.program import BY_NAME, CALL, VIEWS, CallPoint
from tracer.join.stackless import STACKLESS
from tracer.join.tokens import token_of
from tracer.model.events import Cat


@pytest.mark.parametrize("view", ["aten::slice", "aten::select", "aten::view", "aten::unsqueeze"])
def test_a_view_a_helper_may_take_is_worth_no_more_than_one_the_source_spells(view: str) -> None:
    token = token_of(view, Cat.CPU_OP)
    helper = CallPoint(1, 0, CALL, "requantise", callee=BY_NAME, runs=frozenset({view, "aten::mul"}))
    spelled = CallPoint(2, 0, VIEWS, "__getitem__", views=frozenset({view}))
    assert STACKLESS.match(helper, token) >= STACKLESS.match(spelled, token)
    assert STACKLESS.repeat(helper, token) >= STACKLESS.repeat(spelled, token)
    # the helper's other ops keep their reward
    mul = token_of("aten::mul", Cat.CPU_OP)
    assert STACKLESS.match(helper, mul) < STACKLESS.match(spelled, token)


FP8_UTILS = "sglang/srt/layers/quantization/fp8_utils.py"


@pytest.mark.parametrize("torch_version", ["torch2.13", "torch2.14"])
def test_the_tiles_cast_is_not_the_dequantising_helpers(
    nostack_scores, sglang_root, torch_version: str
) -> None:
    cast = line_in(sglang_root, FP8_UTILS, "x_dq_block = x_q_block.to(torch.float32)")
    dequant = line_in(
        sglang_root, FP8_UTILS, "return (x_q_block.to(torch.float32) * x_scale_repeat).to(dtype)"
    )
    score = nostack_scores(f"sglang/{torch_version}/fp8_helpers")
    assert score.truth_ns > 0
    wrong = [w for w in score.wrong if w.truth == f"{FP8_UTILS}:{cast}"]
    # was: every one of them said block_quant_dequant's cast (reached from requant_weight_ue8m0_inplace).
    # Still wrong: the second call's window, whose first half is block_quant_dequant's end, goes to
    # dequant_block_fp8_weight_to_bf16 (a like dequantisation in SGLang's ROCm kernels), as a ranking
    assert not [w for w in wrong if w.said == f"{FP8_UTILS}:{dequant}"], [(w.said, w.rows) for w in wrong]
    assert all(w.confidence < 0.5 for w in wrong)
    assert score.rank1 >= 0.8  # was 0.78 (torch 2.13) and 0.75 (torch 2.14)
