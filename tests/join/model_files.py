"""The pieces of the model files that the no-stack tests write as packages (`write_package`), as
transformers' model files hold them: each model's own copy, its names prefixed (``{P}``)."""

from __future__ import annotations

OUTPUTS = """
from dataclasses import dataclass

import torch


@dataclass
class ModelOutput:
    hidden: torch.Tensor | None = None
"""
# the imports of a model file and its norm
HEADER_AND_NORM = """
import torch
from torch import nn

from .outputs import ModelOutput


class {P}Norm(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + 1e-6))
"""
# the model's causal LM head over its ``{P}Model``
CAUSAL_LM = """

class {P}ForCausalLM(nn.Module):
    def __init__(self, hidden=16, layers=2, vocab=64):
        super().__init__()
        self.model = {P}Model(hidden, layers)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, x):
        outputs = self.model(x)
        hidden = outputs.hidden
        return self.lm_head(hidden)
"""
# a dense MLP, its activation a ``torch.nn.functional`` name (``{activation}``)
DENSE_MLP = """

class {P}MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.up = nn.Linear(hidden, 2 * hidden, bias=False)
        self.down = nn.Linear(2 * hidden, hidden, bias=False)

    def forward(self, x):
        return self.down(nn.functional.{activation}(self.up(x)))
"""
