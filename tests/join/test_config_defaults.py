"""Without stacks, activations that run the same ops fit a window alike; the default of the config
beside the model file the trace ran says which one runs (`tracer.join.config_defaults`).

Read on transformers' own source (the installed 5.19.0, `make setup`'s): GPT-2 picks
``ACT2FN[config.activation_function]``, ``GPT2Config`` defaults it to ``"gelu_new"``
(``NewGELUActivation``, a ``tanh`` GELU like ``AccurateGELUActivation`` and ``FastGELUActivation``);
Gemma-2 picks ``config.hidden_activation``, ``"gelu_pytorch_tanh"`` (``GELUTanh``, an ``aten::gelu``
like ``GELUActivation``, which the table names by the op's own name).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tracer.join.config_defaults import (
    activation_attributes,
    bias_flags_on,
    config_defaults,
    default_activation_keys,
    flag_default,
    is_config_file,
)
from tracer.join.stackless import Candidate, _default_first, _DefaultActivation


def _transformers_models() -> Path:
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("transformers is not installed (make setup installs it)")
    return Path(next(iter(spec.submodule_search_locations))) / "models"


def _keys(model: str) -> frozenset[str]:
    folder = _transformers_models() / model
    configs = [p.read_text() for p in folder.iterdir() if is_config_file(p)]
    return default_activation_keys((folder / f"modeling_{model}.py").read_text(), configs)


def test_defaults_read_from_transformers_configs() -> None:
    assert _keys("gpt2") == {"gelu_new"}  # activation_function: str = "gelu_new"
    assert _keys("gemma2") == {"gelu_pytorch_tanh"}  # hidden_activation
    assert _keys("llama") == {"silu"}
    assert _keys("opt") == {"relu"}
    assert _keys("bloom") == frozenset()  # BloomGelu is its own module: no table, no pick


def _bias_flags(model: str) -> frozenset[str]:
    folder = _transformers_models() / model
    configs = [p.read_text() for p in folder.iterdir() if is_config_file(p)]
    return bias_flags_on((folder / f"modeling_{model}.py").read_text(), configs)


def test_layers_a_config_flag_builds_with_a_bias_by_default() -> None:
    """StarCoder2 builds every projection with ``bias=config.use_bias`` and its config keeps
    ``use_bias: bool = True``; Llama's ``attention_bias`` and ``mlp_bias`` are off by default."""
    assert _bias_flags("starcoder2") == {"use_bias"}
    assert _bias_flags("llama") == frozenset()
    as_field = "class C(PreTrainedConfig):\n    use_bias: bool = True\n    mlp_bias: bool = False\n"
    as_parameter = "class C(PretrainedConfig):\n    def __init__(self, use_bias=False, **kw):\n"
    assert flag_default([as_field], "use_bias") is True
    assert flag_default([as_field], "mlp_bias") is False
    assert flag_default([as_field, as_parameter], "use_bias") is None  # two configs disagree
    assert flag_default([as_field], "qkv_bias") is None  # not given
    model = "self.q = nn.Linear(a, b, bias=config.use_bias)\nself.up = nn.Linear(a, b, bias=self.config.mlp_bias)\n"
    assert bias_flags_on(model, [as_field]) == {"use_bias"}
    assert bias_flags_on(model, []) == frozenset()


def test_what_is_read_and_what_is_not() -> None:
    model = "self.act = ACT2FN[config.hidden_act]\nself.gate = get_activation('sigmoid')\n"
    assert activation_attributes(model) == ({"hidden_act"}, {"sigmoid"})
    as_parameter = "class C(PretrainedConfig):\n    def __init__(self, hidden_act='gelu', **kw):\n"
    as_field = 'class C(PreTrainedConfig):\n    hidden_act: str = "silu"\n'
    assert config_defaults([as_parameter], "hidden_act") == {"gelu"}
    assert config_defaults([as_field], "hidden_act") == {"silu"}
    # two configs beside the model disagree: no default is picked (the literal key still is)
    assert default_activation_keys(model, [as_parameter, as_field]) == {"sigmoid"}
    assert default_activation_keys(model, [as_field]) == {"silu", "sigmoid"}
    assert default_activation_keys("x = y.to(torch.float32)\n", [as_field]) == frozenset()
    assert is_config_file("models/gpt2/configuration_gpt2.py") and is_config_file("config.py")
    assert not is_config_file("models/gpt2/modeling_gpt2.py")


def test_the_default_activation_goes_first_among_look_alikes() -> None:
    """GPT-2's ``tanh`` windows fit the three tanh GELUs alike; ``AccurateGELUActivation`` was
    first by the 0.05 a ``math.sqrt`` call costs to skip. The config's default goes first, said."""
    home = "transformers/activations.py"
    accurate = Candidate(home, 164, -5.70, "AccurateGELUActivation.forward")
    fast = Candidate(home, 90, -5.66, "FastGELUActivation.forward")
    new = Candidate(home, 66, -5.65, "NewGELUActivation.forward")
    block = Candidate("transformers/models/gpt2/modeling_gpt2.py", 304, -4.1, "GPT2Block.forward")
    chosen = _DefaultActivation(
        "transformers/models/gpt2/modeling_gpt2.py",
        ("gelu_new",),
        frozenset({"NewGELUActivation"}),
        frozenset({home}),
    )
    ranked, (said,) = _default_first((accurate, fast, new, block), chosen)
    assert ranked == (new, accurate, fast, block)
    assert said.startswith("first `NewGELUActivation.forward`: transformers/models/gpt2/modeling_gpt2.py")
    assert '("gelu_new")' in said and "a checkpoint's config may name another" in said
    # far behind (past the tie margin), or a first answer that is no activation: nothing moves
    far = Candidate(home, 66, -5.2, "NewGELUActivation.forward")
    assert _default_first((accurate, far), chosen) == ((accurate, far), ())
    assert _default_first((block, new), chosen) == ((block, new), ())
    assert _default_first((accurate, new), None) == ((accurate, new), ())


def test_gpt2_gelu_windows_answered_by_the_configs_default(nostack_scores) -> None:
    """transformers' GPT-2 forward on CPU (torch 2.13) without stacks: 58.1% of the op time ranked
    first before (the GELU windows went to ``AccurateGELUActivation``), 74.3% with the default read.
    Still a ranking: no answer at 0.5 or more."""
    scores = nostack_scores("transformers/torch2.13/gpt2_forward")
    assert scores.rank1 >= 0.72
    assert scores.buckets[">=0.9"].answered_ns == 0 and scores.buckets["0.5-0.9"].answered_ns == 0
