"""Without stacks, a layer's bias tells copies apart: transformers' Qwen2 attention is Llama's with
``bias=True`` on q/k/v (Mistral's says ``bias=False``, Llama's asks its config); the recorded shapes
show whether each ``aten::linear`` had a bias (its third input), and the source says which layers
were built with one."""

from __future__ import annotations

import ast
import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from tracer.api import explain_trace
from tracer.join.bindings import TORCH_OP, bindings_of
from tracer.join.tokens import token_of, with_bias
from tracer.model.events import Cat

ATTENTION = """
import torch
from torch import nn


class {name}Attention(nn.Module):
    def __init__(self, width, config_bias=False):
        super().__init__()
        self.q_proj = nn.Linear(width, width, bias={bias})
        self.k_proj = nn.Linear(width, width, bias={bias})
        self.v_proj = nn.Linear(width, width, bias={bias})
        self.o_proj = nn.Linear(width, width, bias=False)

    def forward(self, x):
        variant = "{name}"  # the forwards differ by a line, as transformers' do (Qwen2's sliding window)
        q = self.q_proj(x).view(x.shape[0], x.shape[1], 2, 4).transpose(1, 2)
        k = self.k_proj(x).view(x.shape[0], x.shape[1], 2, 4).transpose(1, 2)
        v = self.v_proj(x).view(x.shape[0], x.shape[1], 2, 4).transpose(1, 2)
        weights = torch.softmax(q @ k.transpose(2, 3), dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(x.shape)
        return self.o_proj(out)
"""
MODELS = {
    "biased": ("Qwen", "True"),
    "unbiased": ("Mistral", "False"),
    "configured": ("Llama", "config_bias"),
}


def _bias(source: str) -> bool | None:
    (binding,) = [b for b in bindings_of(ast.parse(source, mode="eval").body) if b.kind == TORCH_OP]
    return binding.bias


def test_the_source_says_which_layers_have_a_bias() -> None:
    assert _bias("nn.Linear(a, b)") is True  # torch's default
    assert _bias("nn.Linear(a, b, bias=False)") is False
    assert _bias("nn.Linear(a, b, False)") is False
    assert _bias("nn.Linear(a, b, bias=config.attention_bias)") is None  # a config decides
    assert _bias("nn.Linear(a, b, **kwargs)") is None
    assert _bias("nn.Conv1d(a, b, 3, bias=False)") is False
    assert _bias("nn.Embedding(a, b)") is None  # no bias to speak of


def test_the_shapes_say_which_ops_had_one() -> None:
    marked = with_bias("aten::linear", {"Input Dims": [[2, 8], [8, 8], [8]]})
    assert token_of(marked, Cat.CPU_OP).bias is True and token_of(marked, Cat.CPU_OP).name == "aten::linear"
    unmarked = with_bias("aten::linear", {"Input Dims": [[2, 8], [8, 8], []]})
    assert token_of(unmarked, Cat.CPU_OP).bias is False
    assert with_bias("aten::linear", None) == "aten::linear"  # no shapes recorded: nothing said
    assert token_of("aten::linear", Cat.CPU_OP).bias is None


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bias") / "models"
    root.mkdir()
    for module, (name, bias) in MODELS.items():
        (root / f"{module}.py").write_text(textwrap.dedent(ATTENTION.format(name=name, bias=bias)))
    return root


def _layer(source: Path, module: str):
    spec = importlib.util.spec_from_file_location(f"bias_{module}", source / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded
    spec.loader.exec_module(loaded)
    name = MODELS[module][0]
    return getattr(loaded, f"{name}Attention")(8, config_bias=module == "configured")


def _linears(source: Path, tmp_path: Path, module: str, profile) -> list:
    import torch

    layer, x = _layer(source, module), torch.randn(2, 3, 8)
    trace = profile(lambda: layer(x), tmp_path / f"{module}.json")
    analysis = explain_trace(trace, source=[source])
    found = [f.origin for f in analysis.findings if f.origin.ops and f.origin.ops[0] == "aten::linear"]
    assert found and all(o.answer == "ranked" and o.confidence < 0.5 for o in found)
    return found


def test_a_bias_the_shapes_show_picks_the_copy_built_with_one(
    source: Path, tmp_path: Path, profile_without_stacks
) -> None:
    lines = (source / "biased.py").read_text().splitlines()
    for origin in _linears(source, tmp_path, "biased", profile_without_stacks):
        assert origin.file == "biased.py", origin.candidates
        assert "_proj(" in lines[origin.line - 1]


def test_no_bias_puts_the_copy_built_with_one_last(
    source: Path, tmp_path: Path, profile_without_stacks
) -> None:
    """The copies built without a bias or by a config fit alike (no bias is the common choice and
    says little); the one built with a bias on q/k/v is ranked below both for those layers."""
    origins = _linears(source, tmp_path, "unbiased", profile_without_stacks)
    for origin in origins:
        assert origin.file != "biased.py", origin.candidates
    lines = (source / "biased.py").read_text().splitlines()
    q_line = next(i for i, line in enumerate(lines, 1) if "self.q_proj(x)" in line)
    ranked = next(o.candidates for o in origins if o.line == q_line)
    assert set(ranked[:2]) == {f"unbiased.py:{q_line}", f"configured.py:{q_line}"}
    assert f"biased.py:{q_line}" not in ranked[:2]
