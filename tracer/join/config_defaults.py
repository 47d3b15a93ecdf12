"""Which activation a model's code picks, and which layers it builds with a bias, when its config
keeps the defaults.

transformers' modelling files pick an activation by a config value
(``self.act = ACT2FN[config.activation_function]``, ``get_activation(config.hidden_act)``), and the
config class beside them gives that value its default (``activation_function: str = "gelu_new"``,
or ``hidden_act="silu"`` among ``__init__``'s parameters). Without Python frames, activations that
run the same ops (GPT-2's ``gelu_new`` and ``gelu_fast``, both ``tanh``; Gemma's ``gelu_pytorch_tanh``
and plain ``gelu``, both ``aten::gelu``) fit a window alike; the default says which one runs unless
the checkpoint's config changed it. Read from the text (regular expressions), not run: a default
given by an expression, or a value set in a config's body, is not read.

Layers alike: ``nn.Linear(..., bias=config.use_bias)`` is built with a bias when the config keeps
``use_bias: bool = True`` (StarCoder2's), which the ops' shapes then show as surely as they show a
literal ``bias=True``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import PurePath

# A table or getter of activations keyed by a config value: ``ACT2FN[config.hidden_act]``,
# ``get_activation(self.config.hidden_act)``, ``get_act_fn(config.hidden_act)``.
_BY_CONFIG = re.compile(r"\b(?:ACT2[A-Z]*|get_act\w*)[ \t]*[\[(][ \t]*(?:self\.)?config\.(\w+)[ \t]*[\])]")
# ... or by a literal key: ``ACT2FN["gelu_new"]``.
_BY_KEY = re.compile(r"""\b(?:ACT2[A-Z]*|get_act\w*)[ \t]*[\[(][ \t]*["']([\w.-]+)["'][ \t]*[\])]""")
# A layer's bias given by a config value: ``bias=config.use_bias``, ``bias=self.config.mlp_bias``.
_BIAS_BY_CONFIG = re.compile(r"\bbias[ \t]*=[ \t]*(?:self\.)?config\.(\w+)\b")
_CONFIG_FILE = re.compile(r"^config(uration)?(_\w+)?\.py$")


def activation_attributes(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """The config attributes a module picks activations by (``hidden_act``) and the table keys it
    names literally (``"gelu_new"``)."""
    return frozenset(_BY_CONFIG.findall(text)), frozenset(_BY_KEY.findall(text))


def is_config_file(path: str | PurePath) -> bool:
    """A module that holds config classes by transformers' naming (``configuration_gpt2.py``)."""
    return _CONFIG_FILE.match(PurePath(path).name) is not None


def config_defaults(texts: Iterable[str], attribute: str) -> frozenset[str]:
    """The string defaults the config modules `texts` give `attribute`: a class attribute
    (``hidden_act: str = "silu"``) or a parameter (``hidden_act="silu"``)."""
    pattern = re.compile(rf"""\b{re.escape(attribute)}[ \t]*(?::[^=\n]*)?=[ \t]*["']([\w.-]+)["']""")
    return frozenset(value for text in texts for value in pattern.findall(text))


def flag_default(texts: Iterable[str], attribute: str) -> bool | None:
    """The boolean default the config modules `texts` give `attribute` (``use_bias: bool = True`` or
    ``use_bias=True``); None when they give none, or both."""
    pattern = re.compile(rf"\b{re.escape(attribute)}[ \t]*(?::[^=\n]*)?=[ \t]*(True|False)\b")
    found = {value == "True" for text in texts for value in pattern.findall(text)}
    return found.pop() if len(found) == 1 else None


def bias_flags_on(text: str, config_texts: Iterable[str]) -> frozenset[str]:
    """The config attributes a module builds layers' biases by (``bias=config.use_bias``) whose
    default, in its config modules `config_texts`, is True."""
    attributes = set(_BIAS_BY_CONFIG.findall(text))
    if not attributes:
        return frozenset()
    configs = list(config_texts)
    return frozenset(a for a in attributes if flag_default(configs, a))


def default_activation_keys(text: str, config_texts: Iterable[str]) -> frozenset[str]:
    """The activation table keys a module's code picks when its config (the modules `config_texts`,
    beside it) keeps its defaults: the literal keys and each attribute's defaults; empty when the
    module picks none, or an attribute has no default or several."""
    attributes, keys = activation_attributes(text)
    if not attributes and not keys:
        return frozenset()
    configs = list(config_texts)
    found = set(keys)
    for attribute in attributes:
        defaults = config_defaults(configs, attribute)
        if len(defaults) == 1:
            found |= defaults
    return frozenset(found)


__all__ = [
    "activation_attributes",
    "bias_flags_on",
    "config_defaults",
    "default_activation_keys",
    "flag_default",
    "is_config_file",
]
