"""Without stacks, a call of an activation a config value picks (``self.act = ACT2FN[...]``;
``self.act(x)``) runs one of torch's activation ops: the activation's line answers for it, never the
call's own. Past the inlining depth the call was a block that may run any op, and answered for ops
around it: in transformers' GPT-2 forward (torch 2.14, CPU) ``GPT2MLP.forward``'s ``self.act(...)``
line took the ``torch.addmm`` of ``Conv1D.forward`` that ``c_proj`` runs just after it (73.3% of the op
time ranked first before, 79.2% now)."""

from __future__ import annotations

import pytest

GPT2_FORWARD = "transformers/torch2.14/gpt2_forward"


@pytest.fixture(scope="module")
def gpt2_forward(nostack_scores):
    return nostack_scores(GPT2_FORWARD)


def test_the_activation_call_answers_no_op(gpt2_forward) -> None:
    said = {wrong.said.rsplit("/", 1)[-1] for wrong in gpt2_forward.wrong}
    assert "modeling_gpt2.py:240" not in said  # `hidden_states = self.act(hidden_states)`


def test_conv1d_matmuls_answer_in_conv1d(gpt2_forward) -> None:
    wrong_for_conv1d = [w for w in gpt2_forward.wrong if w.truth.endswith("pytorch_utils.py:119")]
    assert sum(w.time_ns for w in wrong_for_conv1d) < 0.01 * gpt2_forward.truth_ns
    assert gpt2_forward.rank1 >= 0.78
    assert gpt2_forward.buckets[">=0.9"].answered_ns == 0  # a ranking, said to be one
