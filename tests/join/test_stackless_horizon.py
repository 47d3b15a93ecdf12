"""Without stacks, a function is judged by the ops of its helpers spliced in where it calls them, to
`INLINE_DEPTH` calls down. A call past that depth ran a block of unknown ops, each absorbed at a small
cost: so a function one call closer to the leaves saw more of the window than its caller and fit it
better, whichever of them ran the hot op. transformers' ``MixtralForCausalLM.forward`` (whose
``hidden_states[:, slice_indices, :]`` ran the trace's costliest ``aten::alias``) lost to
``MixtralModel.forward``, which reached one level deeper into the next step's mask. A helper's call past the depth now rewards the ops the helper and its callees name,
less the more ops they name (`CallPoint.runs`, `_helper_reward`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tracer.join.program import CALL
from tracer.join.sites import SiteIndex
from tracer.join.source_lines import SourceLines
from tracer.join.stackless import BLOCK, HELPER_OPS, HELPER_REWARD, STACKLESS, StacklessRanker
from tracer.join.tokens import token_of
from tracer.model.events import Cat

# Top -> Inner -> Deep -> mask(): `mask` is three calls below `Top.forward`, past its depth
NESTED = """
import torch
from torch import nn


def mask(x):
    return torch.cumsum(x, -1).flip(-1)


class Deep(nn.Module):
    def forward(self, x):
        return mask(x) * 2


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.deep = Deep()

    def forward(self, x):
        return self.deep(x) + 1


class Top(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x).sum()
"""


def _expanded(tmp_path: Path, owner: str):
    (tmp_path / "nested.py").write_text(textwrap.dedent(NESTED))
    ranker = StacklessRanker(SiteIndex(), SourceLines([tmp_path]))
    (source_file,) = ranker._all_files()
    ranker._parse_file(source_file)
    function = next(f for f in source_file.functions if f.owner == owner and f.name == "forward")
    expanded = ranker._expand(function)
    assert expanded is not None
    return expanded


def test_a_helper_past_the_depth_names_the_ops_it_runs(tmp_path: Path) -> None:
    expanded = _expanded(tmp_path, "Top")
    calls = [p for p in expanded.program.points if p.kind == CALL and p.name == "mask"]
    assert len(calls) == 1  # `Deep.forward`'s call of `mask`, spliced in two calls down
    (call,) = calls
    assert call.runs is not None and {"aten::cumsum", "aten::flip"} <= call.runs
    cumsum = token_of("aten::cumsum", Cat.CPU_OP)
    reward = STACKLESS.match(call, cumsum)
    assert reward is not None and reward < 0 < BLOCK  # a reward, where a block's op cost BLOCK
    assert reward == HELPER_REWARD * min(1.0, HELPER_OPS / len(call.runs))
    assert STACKLESS.repeat(call, token_of("aten::flip", Cat.CPU_OP)) == reward  # the block runs on
    assert STACKLESS.match(call, token_of("aten::softmax", Cat.CPU_OP)) == BLOCK  # an op it names not


def test_a_helper_spliced_in_names_no_ops_of_its_own(tmp_path: Path) -> None:
    """From `Inner.forward`, `mask` is two calls down: spliced in, its ops predicted in order."""
    expanded = _expanded(tmp_path, "Inner")
    names = [p.name for p in expanded.program.points]
    assert "cumsum" in names and "flip" in names
    assert all(p.runs is None for p in expanded.program.points if p.name == "mask")


def test_llamas_own_lines_answer_past_its_models_depth(nostack_scores) -> None:
    """transformers' Llama `forward()` on CPU, torch 2.13, every frame stripped: 76.0% of the op time
    ranked first before, 88.9% with the helper's ops rewarded."""
    scores = nostack_scores("transformers/torch2.13/llama_forward")
    assert scores.rank1 >= 0.85
    assert scores.buckets[">=0.9"].answered_ns == 0  # still a ranking


def test_mixtrals_alias_is_among_the_first_three(nostack_scores) -> None:
    """Mixtral's `forward()` on CPU, torch 2.13: one `aten::alias` (``hidden_states[:, slice_indices,
    :]`` before the lm_head) holds 69% of the op time. `MixtralModel.forward`'s first lines fit it
    first, as before; the true line, then outside the first five, is now among the first three."""
    scores = nostack_scores("transformers/torch2.13/mixtral_forward")
    assert scores.top3 >= 0.9


def test_phi3s_fused_projections_answer_in_phi3s_file(nostack_scores) -> None:
    """Phi-3's `forward()` on CPU, torch 2.13: its fused ``qkv_proj`` / ``gate_up_proj`` windows were
    fit best by other files' model forwards, one call nearer the leaves: 13.0% of the op time ranked
    first before, 91.2% now."""
    scores = nostack_scores("transformers/torch2.13/phi3_forward")
    assert scores.rank1 >= 0.85
    assert scores.buckets[">=0.9"].answered_ns == 0
