"""The model class a corpus trace ran, as its config's ``architectures`` would name it: what a user
passes with ``--config`` (the bench's ``named`` mode). Truth files of transformers traces name the
config class (``MistralConfig``); transformers' auto mappings, read from the traced source (not
imported: the bench reads the version the trace ran), give its model type and causal-LM class."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_CONFIG_CLASS = re.compile(r"\b(\w+Config)\b")
_PAIR = re.compile(r'\(\s*"([\w-]+)"\s*,\s*"(\w+)"\s*\)')
_CAUSAL_LM = re.compile(r"^MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = OrderedDict\((.*?)^\)", re.M | re.S)


def trace_architectures(document: dict[str, Any], dirs: Sequence[Path]) -> tuple[str, ...]:
    """The classes for a truth document (its ``architectures``, else the causal-LM class of the
    config class its ``about`` names, under the transformers package among `dirs`); empty for traces
    of no model (the zoo, SGLang's modules)."""
    named = document.get("architectures")
    if isinstance(named, list):
        return tuple(str(name) for name in named)
    found = _CONFIG_CLASS.search(str(document.get("about", "")))
    auto = next(
        (d / "models" / "auto" for d in dirs if (d / "models" / "auto" / "modeling_auto.py").is_file()), None
    )
    if found is None or auto is None:
        return ()
    types = {config: kind for path in auto.glob("*.py") for kind, config in _PAIR.findall(path.read_text())}
    causal = _CAUSAL_LM.search((auto / "modeling_auto.py").read_text())
    classes = dict(_PAIR.findall(causal.group(1))) if causal else {}
    kind = types.get(found.group(1))
    return (classes[kind],) if kind in classes else ()
