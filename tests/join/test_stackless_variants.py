"""Without stacks, variants of shared code: transformers holds ~60 copies of one rotary embedding
(Qwen2's, which casts with ``.float()`` three times more) and Llama's own, cast once. The windows of
Llama's trace were aligned with the 12 files that spell them best: copies of the other variant took
the places, Llama's file fit none of its rotary windows, and Qwen2's file won the trace (GPU Llama
forward: 2.0% of the op time ranked first). What fixed it, each a mechanism of its own:

- a file whose best function is a copy of one picked before (same text, reaching the same helpers)
  adds nothing to align: the places go to different code;
- the ops next to the hot op weigh most in picking files (a window also holds the ops of the
  functions around it, which a decoder layer of another model reaches all of);
- Python's builtins (``isinstance``, ``len``) run no op and hold none, and comparing with a string
  runs none: they had absorbed or matched the ops of the code before the rotary embedding (the
  attention mask's), so that the variant with more casts fit more of the window.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from tracer.join.program import CALL, OPERATOR, ModulePrograms
from tracer.join.sites import SiteIndex
from tracer.join.source_lines import SourceLines
from tracer.join.spelling import spellings
from tracer.join.stackless import MAX_FILES, NEAR_FILES, STACKLESS, StacklessRanker, runs_a_block, runs_no_op
from tracer.join.tokens import token_of
from tracer.model.events import Cat

# The variant most files copy: it casts again before the matmul
CAST_AGAIN = """
import torch


class {P}Rotary(torch.nn.Module):
    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        pos = position_ids[:, None, :].float()
        freqs = (inv.float() @ pos.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
"""
# Llama's: cast once, and a guard more (so it spells one word more, and loses on BM25's length norm)
CAST_ONCE = """
import torch


class LlamaRotary(torch.nn.Module):
    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1).to(dtype=torch.float)
        pos = position_ids[:, None, :].float()
        with maybe_autocast(enabled=False):
            freqs = (inv @ pos).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
"""
ROTARY_WINDOW = [
    *("aten::unsqueeze", "aten::unsqueeze", "aten::expand", "aten::to", "aten::unsqueeze", "aten::to"),
    *("aten::matmul", "aten::transpose", "aten::cat", "aten::cos", "aten::to", "aten::sin", "aten::to"),
]


def test_copies_of_one_variant_leave_places_for_another(tmp_path: Path) -> None:
    """20 files hold one variant, each spelling the window better than the one file holding the other:
    without the copies set aside, the 12 places all went to the first variant."""
    for i in range(20):
        (tmp_path / f"model_{i:02d}.py").write_text(CAST_AGAIN.format(P=f"Model{i:02d}"))
    (tmp_path / "model_llama.py").write_text(CAST_ONCE)
    ranker = StacklessRanker(SiteIndex(), SourceLines([tmp_path]))
    picked = [Path(f.name).name for f in ranker._files_for(ROTARY_WINDOW, ROTARY_WINDOW.index("aten::cat"))]
    assert "model_llama.py" in picked
    assert len(picked) == 2 < MAX_FILES  # one of the 20 copies, and Llama's


def test_the_ops_next_to_the_hot_op_pick_files_too(tmp_path: Path) -> None:
    """A window holds the ops of the functions around the hot op's too (the attention before a norm,
    the MLP after): functions that run all of them (other models' decoder layers, which norm with a
    `layer_norm` of their own) spell more of the window than the norm that ran the hot op, and took
    every place. The ops next to the hot op (``to``, ``layer_norm``, ``to``) pick files of their own."""
    norm = (
        "def norm(x):\n    dtype = x.dtype\n    return F.layer_norm(x.to(torch.float32), shape).to(dtype)\n"
    )
    layer = textwrap.dedent(
        """
        def layer(self, x):
            q = F.linear(x, self.wq).view(s).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, q, q).transpose(1, 2).reshape(x.shape)
            x = F.layer_norm(F.linear(a, self.wo) + x, shape).to(x.dtype)
            return F.linear(F.silu(F.linear(x, self.wg)) * F.linear(x, self.wu), self.w{i}) + x
        """
    )
    for i in range(MAX_FILES + 4):  # as many layers as places, and more (none a copy of another)
        (tmp_path / f"layer_{i:02d}.py").write_text(layer.format(i=i))
    (tmp_path / "norm.py").write_text(norm)
    window = [
        *("aten::linear", "aten::view", "aten::transpose", "aten::scaled_dot_product_attention"),
        *("aten::transpose", "aten::reshape", "aten::linear", "aten::add", "aten::to", "aten::layer_norm"),
        *("aten::to", "aten::linear", "aten::silu", "aten::linear", "aten::mul", "aten::linear"),
    ]
    hot = window.index("aten::layer_norm")
    ranker = StacklessRanker(SiteIndex(), SourceLines([tmp_path]))
    by_name = {Path(f.name).name: i for i, f in enumerate(ranker._all_files())}
    scores = ranker._spelling_scores(window, frozenset(spellings("aten::layer_norm")))
    assert all(
        scores[by_name[f"layer_{i:02d}.py"]][0] > scores[by_name["norm.py"]][0] for i in range(MAX_FILES + 4)
    )
    picked = [Path(f.name).name for f in ranker._files_for(window, hot)]
    assert "norm.py" in picked[MAX_FILES : MAX_FILES + NEAR_FILES]  # picked by the ops next to the hot one
    assert scores[by_name["norm.py"]][1] == 1  # the file's best function, by its def line


def _points(source: str):
    programs = ModulePrograms(ast.parse(textwrap.dedent(source)), STACKLESS.skip)
    line, name, _ = next(f for f in programs.functions() if f[1] == "f")
    program = programs.program(line, name)
    assert program is not None
    return program.points


def test_a_string_compared_runs_no_operator() -> None:
    points = _points(
        """
        def f(self, x, kind):
            device_type = x.device.type if x.device.type != "mps" else "cpu"
            if kind == "gelu" or f"{kind}" == b"x":
                x = x * 3
            return x + 1
        """
    )
    assert [p.name for p in points if p.kind == OPERATOR] == ["aten::mul", "aten::add"]


def test_builtins_run_no_op_and_hold_none() -> None:
    points = _points(
        """
        def f(self, x):
            if isinstance(x, tuple) and hasattr(self, "bias") and len(x) > 1:
                x = helper(x)
            return x
        """
    )
    calls = {p.name: p for p in points if p.kind == CALL}
    op = token_of("aten::sum", Cat.CPU_OP)
    for name in ("isinstance", "hasattr", "len"):
        assert runs_no_op(calls[name]) and not runs_a_block(calls[name])
        assert STACKLESS.match(calls[name], op) is None  # it absorbs no op of the window
        assert STACKLESS.skip(calls[name]) < 0.1  # and running none says nothing against a path
    assert runs_a_block(calls["helper"]) and STACKLESS.match(calls["helper"], op) is not None


@pytest.fixture(scope="module")
def gpu_llama_forward(nostack_scores):
    return nostack_scores("gpu/torch2.11/llama_forward")


def test_llamas_rotary_answers_in_llamas_file(gpu_llama_forward) -> None:
    """The H200 trace of Llama's forward, frames stripped, the whole transformers package as source.
    Before: 2.0% of the op time ranked first (Qwen2's file won); 71.2% after."""
    assert gpu_llama_forward.rank1 >= 0.65
    assert gpu_llama_forward.top3 >= gpu_llama_forward.rank1
    assert gpu_llama_forward.buckets[">=0.9"].answered_ns == 0  # a ranking
