"""Without stacks, an activation chosen by a config value answers in the activation's own line:
transformers' MoE experts (``integrations/moe.py``) are module-level functions taking ``self`` that
call ``self.act_fn(...)``, bound by the classes they are attached to as
``self.act_fn = ACT2FN[config.hidden_act]``. The ops around the ``aten::silu`` fit the experts
function; the line that ran it is ``SiLUActivation.forward``'s in the file that defines ``ACT2FN``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracer.api import explain_trace
from tracer.join.bindings import activations_named, defines_activations

ACTIVATIONS = """
import torch
from torch import nn


class SiLUActivation(nn.Module):
    def forward(self, x):
        return nn.functional.silu(x)


class GELUActivation(nn.Module):
    def forward(self, x):
        return nn.functional.gelu(x)


ACT2CLS = {"silu": SiLUActivation, "gelu": GELUActivation}
ACT2FN = {name: cls() for name, cls in ACT2CLS.items()}
"""
EXPERTS = """
import torch


def experts_forward(self, x, weights):
    gate, up = (x @ self.gate_up).chunk(2, dim=-1)
    hidden = self.act_fn(gate) * up
    out = hidden @ self.down
    return out * weights.unsqueeze(-1)
"""
# Classes that bind ``act_fn`` as transformers' do: by the config's name (and one with a module)
MODELS = """
import torch
from torch import nn

from .activations import ACT2FN
from .experts import experts_forward

{mlps}

class Experts(nn.Module):
    def __init__(self, hidden_act="silu"):
        super().__init__()
        self.gate_up = nn.Parameter(torch.randn(8, 16))
        self.down = nn.Parameter(torch.randn(8, 8))
        self.act_fn = ACT2FN[hidden_act]

    forward = experts_forward
"""
MLP = """
class MLP{i}(nn.Module):
    def __init__(self, hidden_act):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.act_fn = {value}

    def forward(self, x):
        return self.proj(self.act_fn(x))
"""


def test_the_file_that_defines_an_activation_table_or_getter(
    transformers_src: Path, sglang_root: Path
) -> None:
    transformers = [
        str(path.relative_to(transformers_src))
        for path in sorted((transformers_src / "transformers").rglob("*.py"))
        if defines_activations(path.read_text(errors="replace"))
    ]
    assert transformers == ["transformers/activations.py"]  # ACT2FN, ACT2CLS, get_activation
    assert defines_activations((sglang_root / "sglang/srt/layers/activation.py").read_text())  # get_act_fn
    assert defines_activations(ACTIVATIONS)
    assert defines_activations("def get_act_fn(name):\n    return ACTS[name]\n")
    assert not defines_activations(EXPERTS)
    assert not defines_activations("def act_quant(x):\n    return x\n")  # not a getter


@pytest.fixture(scope="module")
def package(write_package) -> Path:
    values = ["ACT2FN[hidden_act]"] * 9 + ["nn.GELU()"]  # a module is an activation too
    mlps = "\n".join(MLP.format(i=i, value=value) for i, value in enumerate(values))
    return write_package(
        "actpkg", {"activations": ACTIVATIONS, "experts": EXPERTS, "models": MODELS.format(mlps=mlps)}
    )


def test_a_chosen_activation_answers_in_its_own_line(
    package: Path, tmp_path: Path, profile_without_stacks, import_from_package
) -> None:
    import torch

    experts = import_from_package(package, "actpkg.models").Experts()
    x, weights = torch.randn(4, 8), torch.rand(4)
    trace = profile_without_stacks(lambda: experts(x, weights), tmp_path / "experts.json")
    analysis = explain_trace(trace, source=[package])
    silu = [f.origin for f in analysis.findings if f.origin.ops and f.origin.ops[0] == "aten::silu"]
    assert silu
    line = next(
        i for i, text in enumerate(ACTIVATIONS.strip("\n").splitlines(), 2) if "functional.silu" in text
    )
    for origin in silu:
        assert (origin.file, origin.line) == ("actpkg/activations.py", line), origin.candidates
        assert origin.answer == "ranked" and origin.confidence < 0.5  # still a ranking
        assert any("chosen by a config value" in e for e in origin.evidence), origin.evidence


# transformers' GELU classes: the same ``return self.act(input)`` in three classes of one file, each
# binding ``self.act`` its own way (a tanh GELU first, as in transformers' file)
GELUS = """
import functools

import torch
from torch import nn


class GELUTanh(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = functools.partial(nn.functional.gelu, approximate="tanh")

    def forward(self, input):
        return self.act(input)


class GELUActivation(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.functional.gelu

    def forward(self, input):
        return self.act(input)


class MishActivation(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.functional.mish

    def forward(self, input):
        return self.act(input)


ACT2CLS = {"gelu_pytorch_tanh": GELUTanh, "gelu": (GELUActivation, {}), "mish": MishActivation}
ACT2FN = {name: (cls if isinstance(cls, type) else cls[0])() for name, cls in ACT2CLS.items()}
"""
GELU_MODELS = """
import torch
from torch import nn

from .activations import ACT2FN

{mlps}
"""


def test_activations_named_by_the_op_in_transformers_table(transformers_src: Path) -> None:
    text = (transformers_src / "transformers/activations.py").read_text()
    assert activations_named(text, "gelu") == ["GELUActivation"]
    assert activations_named(text, "silu") == ["SiLUActivation"]
    assert activations_named(text, "scaled_dot_product_attention") == []
    assert activations_named("NAMES = {'gelu': GELUActivation}\n", "gelu") == []  # no activation table


def test_a_gelu_answers_in_the_class_the_table_names_gelu(
    write_package, tmp_path: Path, profile_without_stacks, import_from_package
) -> None:
    import torch

    mlps = "\n".join(MLP.format(i=i, value='ACT2FN["gelu"]') for i in range(10))
    package = write_package("gelupkg", {"activations": GELUS, "models": GELU_MODELS.format(mlps=mlps)})
    mlp = import_from_package(package, "gelupkg.models").MLP0("gelu")
    x = torch.randn(4, 8)
    trace = profile_without_stacks(lambda: mlp(x), tmp_path / "gelu.json")
    analysis = explain_trace(trace, source=[package])
    gelu = [f.origin for f in analysis.findings if f.origin.ops and f.origin.ops[0] == "aten::gelu"]
    assert gelu
    lines = GELUS.strip("\n").splitlines()
    forwards = [i for i, text in enumerate(lines, 2) if text.strip() == "return self.act(input)"]
    tanh, plain, mish = forwards
    for origin in gelu:
        assert (origin.file, origin.line) == ("gelupkg/activations.py", plain), origin.candidates
        assert origin.answer == "ranked" and origin.confidence < 0.5
        assert any("by the op's own name ('gelu')" in e for e in origin.evidence), origin.evidence
        assert f"gelupkg/activations.py:{tanh}" in origin.candidates  # it runs aten::gelu too: after
        assert f"gelupkg/activations.py:{mish}" not in origin.candidates  # the same text; it runs mish


def test_gpt_neox_gelu_answers_in_gelu_activation(nostack_scores) -> None:
    """transformers' GPT-NeoX forward on CPU, every frame stripped: 69% of its op time is
    ``aten::gelu``, run by ``GELUActivation.forward``'s ``return self.act(input)``. Before, that line
    was no candidate and the first of its same-text classes (``GELUTanh``) answered: 26.7% ranked
    first."""
    scores = nostack_scores("transformers/torch2.13/gpt_neox_forward")
    assert scores.rank1 >= 0.9
    assert scores.buckets[">=0.9"].answered_ns == 0
