"""Without stacks, with the model named (``--config``'s ``architectures``), the named model's own code
where other models' files hold variants of it (the hold-out's Gemma 3 forward: 81.7% ranked first):

- its variant of a function that fits about as well as another model's (within `NAMED_MARGIN`) goes
  first: transformers' Gemma 3 reads its rotary tables by ``getattr(self, f"{layer_type}_inv_freq")``
  in a loop over layer types, where Gemma 2's variant (and its four copies) reads one attribute; the
  two calls of no op cost its fit a little, and the rotary's ops answered in Gemma 2's file. The
  model's second mask (``create_sliding_window_causal_mask``) is a block past `MAX_INLINED_POINTS`
  that the rotary's window pays to skip;
- the activation the config picks by default is the named model's (``hidden_activation =
  "gelu_pytorch_tanh"``: ``GELUTanh``), not that of the model whose copies the first answers name most.

Run end to end: the hold-out's real trace (a dev-half model) with every frame stripped, the installed
transformers package as the source, the model named as ``--config`` names it."""

from __future__ import annotations

import pytest

from bench.corpus.scoring import REPO
from tracer.join.copies import without_model_prefix

GEMMA3_FORWARD = "transformers/torch2.13/gemma3_forward"
GEMMA3 = "transformers/models/gemma3/modeling_gemma3.py"


@pytest.fixture(scope="module")
def gemma3_forward(nostack_scores):
    return nostack_scores(GEMMA3_FORWARD, "named", REPO / "tests" / "fixtures" / "holdout")


def _wrong_at(score, truth: str) -> int:
    return sum(w.time_ns for w in score.wrong if w.truth.endswith(truth))


def test_without_model_prefix() -> None:
    assert without_model_prefix("Gemma2RotaryEmbedding.forward") == "RotaryEmbedding.forward"
    assert without_model_prefix("Gemma3RotaryEmbedding.forward") == "RotaryEmbedding.forward"
    assert without_model_prefix("repeat_kv") == "repeat_kv"


def test_the_named_models_rotary_answers_for_its_ops(gemma3_forward) -> None:
    # ``freqs = ...`` to ``return cos.to(...), sin.to(...)`` in ``Gemma3RotaryEmbedding.forward``
    wrong = sum(_wrong_at(gemma3_forward, f"{GEMMA3}:{line}") for line in range(209, 215))
    assert wrong < 0.02 * gemma3_forward.truth_ns  # 6.0% before


def test_the_named_models_default_activation_answers(gemma3_forward) -> None:
    assert _wrong_at(gemma3_forward, "transformers/activations.py:51") == 0  # ``GELUTanh.forward``


def test_the_named_model_ranks_first(gemma3_forward) -> None:
    assert gemma3_forward.rank1 >= 0.89  # 81.7% before
    assert gemma3_forward.buckets[">=0.9"].answered_ns == 0  # a ranking, said to be one
