"""Copies of one function across files (`tracer/join/copies.py`), on transformers' real source: each
model file keeps its own copy of the RMSNorm, rotary and MLP code of the model it was made from."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tracer.join.copies import FunctionCopies, function_texts

MODELS = "transformers/models"


@pytest.fixture(scope="module")
def copies(transformers_src: Path) -> FunctionCopies:
    files = sorted((transformers_src / MODELS).glob("*/modeling_*.py"))
    return FunctionCopies(
        (str(path.relative_to(transformers_src)), lambda path=path: path.read_text()) for path in files
    )


def _line_of(path: Path, text: str, after: int = 0) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if i > after and line.strip() == text)


def test_a_line_of_llamas_rmsnorm_is_found_in_each_copy(
    transformers_src: Path, copies: FunctionCopies
) -> None:
    llama = transformers_src / MODELS / "llama/modeling_llama.py"
    line = _line_of(llama, "hidden_states = hidden_states.to(torch.float32)")
    places = copies.same_line(f"{MODELS}/llama/modeling_llama.py", line)
    found = {file: at for file, at, _ in places}
    names = {file: name for file, _, name in places}
    assert names[f"{MODELS}/qwen3/modeling_qwen3.py"] == "Qwen3RMSNorm.forward"
    assert found[f"{MODELS}/llama/modeling_llama.py"] == line
    for model in ("qwen3", "mistral"):  # LlamaRMSNorm copied as Qwen3RMSNorm / MistralRMSNorm
        path = transformers_src / MODELS / model / f"modeling_{model}.py"
        assert found[f"{MODELS}/{model}/modeling_{model}.py"] == _line_of(
            path, "hidden_states = hidden_states.to(torch.float32)"
        )
    # Gemma's RMSNorm scales by (1 + weight) in float: another function, not a copy
    assert f"{MODELS}/gemma/modeling_gemma.py" not in found
    assert len(found) > 20


def test_copies_ignore_comments_docstrings_and_the_model_prefix() -> None:
    a = textwrap.dedent(
        '''
        def forward(self, x):
            """Llama's."""
            # a comment
            y = LlamaMLP(x)

            return y.to(torch.float32)  # cast back
        '''
    )
    b = textwrap.dedent(
        """
        def forward(self, x):
            y = MistralMLP(x)
            return y.to(torch.float32)
        """
    )
    (fa,), (fb,) = function_texts(a), function_texts(b)
    assert fa.digest == fb.digest
    assert (fa.lines, fb.lines) == ((5, 7), (3, 4))  # the same statements, at their own lines
    copies = FunctionCopies(
        [("a.py", lambda: a), ("b.py", lambda: b), ("c.py", lambda: b.replace("32", "16"))]
    )
    assert sorted(copies.same_line("a.py", 7)) == [("a.py", 7, "forward"), ("b.py", 4, "forward")]
    assert copies.same_line("a.py", 1) == []  # no function holds it


def test_a_copy_that_says_so_has_its_renames_undone(transformers_src: Path, copies: FunctionCopies) -> None:
    """``# Copied from ...GPT2Attention with GPT2->DecisionTransformerGPT2``: the model prefix alone
    does not make ``DecisionTransformerGPT2Attention`` into ``GPT2Attention``; the comment does."""
    gpt2 = transformers_src / MODELS / "gpt2/modeling_gpt2.py"
    line = _line_of(gpt2, "attn_output = self.c_proj(attn_output)")
    found = {file: (at, name) for file, at, name in copies.same_line(f"{MODELS}/gpt2/modeling_gpt2.py", line)}
    decision = transformers_src / MODELS / "decision_transformer/modeling_decision_transformer.py"
    assert found[f"{MODELS}/decision_transformer/modeling_decision_transformer.py"] == (
        _line_of(decision, "attn_output = self.c_proj(attn_output)"),
        "DecisionTransformerGPT2Attention.forward",
    )


def test_renames_apply_to_the_class_a_comment_heads_and_past_decorators() -> None:
    original = textwrap.dedent(
        """
        class FooBlock:
            def forward(self, x):
                return FooMLP(x) + x
        """
    )
    copy = textwrap.dedent(
        """
        # Copied from pkg.foo.FooBlock with Foo->BarBazQux, foo->bar
        class BarBazQuxBlock:
            @staticmethod
            def forward(self, x):
                return BarBazQuxMLP(x) + x
        """
    )
    unsaid = copy.replace("# Copied from pkg.foo.FooBlock with Foo->BarBazQux, foo->bar\n", "")
    (a,), (b,), (c,) = function_texts(original), function_texts(copy), function_texts(unsaid)
    assert a.digest == b.digest and b.qualname == "BarBazQuxBlock.forward"
    assert c.digest != a.digest  # ``BarBazQux`` is more than one leading word: not a copy unless said


def test_a_method_whose_class_builds_its_layers_with_a_bias_is_no_copy(
    transformers_src: Path, copies: FunctionCopies
) -> None:
    """Qwen2's attention has the text of CWM's, but builds q/k/v with ``bias=True`` (the ops' shapes
    show it); DeepSeek-OCR2's text attention, built alike, stays its copy. ``bias=False`` and a
    config's flag build alike in the configs that run: the MLPs stay copies of Llama's."""
    qwen2 = transformers_src / MODELS / "qwen2/modeling_qwen2.py"
    line = _line_of(qwen2, "cos, sin = position_embeddings")
    holders = {file for file, *_ in copies.same_line(f"{MODELS}/qwen2/modeling_qwen2.py", line)}
    assert f"{MODELS}/deepseek_ocr2/modeling_deepseek_ocr2.py" in holders
    assert f"{MODELS}/cwm/modeling_cwm.py" not in holders
    assert f"{MODELS}/llama/modeling_llama.py" not in holders
    mlp = _line_of(qwen2, "down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))")
    mlp_holders = {file for file, *_ in copies.same_line(f"{MODELS}/qwen2/modeling_qwen2.py", mlp)}
    assert f"{MODELS}/llama/modeling_llama.py" in mlp_holders  # bias=False vs bias=config.mlp_bias
