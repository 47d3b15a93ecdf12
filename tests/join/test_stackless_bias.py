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
from tracer.join.bindings import TORCH_OP, Binding, bindings_of
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


def _binding(source: str) -> Binding:
    (binding,) = [b for b in bindings_of(ast.parse(source, mode="eval").body) if b.kind == TORCH_OP]
    return binding


def _bias(source: str) -> bool | None:
    return _binding(source).bias


def test_the_source_says_which_layers_have_a_bias() -> None:
    assert _bias("nn.Linear(a, b)") is True  # torch's default
    assert _bias("nn.Linear(a, b, bias=False)") is False
    assert _bias("nn.Linear(a, b, False)") is False
    assert _bias("nn.Linear(a, b, bias=config.attention_bias)") is None  # a config decides
    assert _bias("nn.Linear(a, b, **kwargs)") is None
    assert _bias("nn.Conv1d(a, b, 3, bias=False)") is False
    assert _bias("nn.Embedding(a, b)") is None  # no bias to speak of


def test_the_config_attribute_that_decides_a_bias_is_kept() -> None:
    """Its default, in the config beside the model, says whether the layer has one (`config_defaults`)."""
    assert _binding("nn.Linear(a, b, bias=config.attention_bias)").bias_flag == "attention_bias"
    assert _binding("nn.Linear(a, b, bias=self.config.use_bias)").bias_flag == "use_bias"
    assert _binding("nn.Linear(a, b, config.use_bias)").bias_flag == "use_bias"
    assert _binding("nn.Linear(a, b, bias=other.config.use_bias)").bias_flag == ""
    assert _binding("nn.Linear(a, b, bias=use_bias)").bias_flag == ""
    assert _binding("nn.Linear(a, b, bias=True)").bias_flag == ""


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


# every projection built alike (``bias={bias}``), from the config passed in
FLAGGED = ATTENTION.replace("config_bias=False", "config").replace(
    "self.o_proj = nn.Linear(width, width, bias=False)", "self.o_proj = nn.Linear(width, width, bias={bias})"
)
CONFIG = """
class {name}Config:
    {flag}: bool = {default}

    def __init__(self, **kwargs):
        for key, value in kwargs.items():
            setattr(self, key, value)
"""
# folder -> (class prefix, the bias argument, the config's flag and default; None: no config)
FLAGGED_MODELS = {
    "starcoder": ("Starcoder", "config.use_bias", ("use_bias", "True")),
    "jina": ("Jina", "True", None),
    "llama": ("Llama", "config.attention_bias", ("attention_bias", "False")),
}


@pytest.fixture(scope="module")
def flagged_source(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("flagged") / "models"
    for folder, (name, bias, flag) in FLAGGED_MODELS.items():
        (root / folder).mkdir(parents=True)
        (root / folder / f"modeling_{folder}.py").write_text(
            textwrap.dedent(FLAGGED.format(name=name, bias=bias))
        )
        if flag is not None:
            config = CONFIG.format(name=name, flag=flag[0], default=flag[1])
            (root / folder / f"configuration_{folder}.py").write_text(textwrap.dedent(config))
    return root


def test_a_bias_a_config_flag_builds_by_default_counts_as_the_literal_one(
    flagged_source: Path, tmp_path: Path, profile_without_stacks
) -> None:
    """StarCoder2 builds its projections with ``bias=config.use_bias`` (on by default); JinaEmbeddings-v3's
    copy of the attention says ``bias=True``. The shapes show a bias: the literal one took every
    StarCoder2 window (10.1% of its forward's hot-op time ranked first on the hold-out). Now both fit
    alike, and Llama's (``attention_bias``, off by default) stays below them. (Copies answer as one,
    with the fit of the copy aligned, whatever their configs: the variants differ by a line, as
    StarCoder2's attention differs from the others by its residual dropout.)"""
    import torch

    spec = importlib.util.spec_from_file_location(
        "flagged_starcoder", flagged_source / "starcoder/modeling_starcoder.py"
    )
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded
    spec.loader.exec_module(loaded)
    config = type("Config", (), {"use_bias": True})()
    layer, x = loaded.StarcoderAttention(8, config), torch.randn(2, 3, 8)
    trace = profile_without_stacks(lambda: layer(x), tmp_path / "starcoder.json")
    analysis = explain_trace(trace, source=[flagged_source])
    found = [f.origin for f in analysis.findings if f.origin.ops and f.origin.ops[0] == "aten::linear"]
    assert found and all(o.answer == "ranked" and o.confidence < 0.5 for o in found)
    lines = (flagged_source / "starcoder/modeling_starcoder.py").read_text().splitlines()
    q_line = next(i for i, line in enumerate(lines, 1) if "self.q_proj(x)" in line)
    ranked = next(o.candidates for o in found if o.line == q_line)
    assert set(ranked[:2]) == {f"starcoder/modeling_starcoder.py:{q_line}", f"jina/modeling_jina.py:{q_line}"}
    assert f"llama/modeling_llama.py:{q_line}" not in ranked[:2]
