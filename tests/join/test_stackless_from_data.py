"""Without stacks, a tensor made from Python data answers in the line that made it.

``torch.tensor(data)`` and ``x.new_tensor(data)`` run no op of their name: torch 2.13 and 2.14
record four top-level ops, ``empty``, ``to``, ``lift_fresh`` and ``detach_`` (``torch.as_tensor`` of
a list the first three). The join said such a call runs ``aten::tensor``, so a KV cache's lazy start
(transformers' ``torch.tensor([], dtype=..., device=...)``) was no candidate for its own ops, and a
cast elsewhere in the window took its ``to``."""

from __future__ import annotations

import pytest

from tests.join.package_source import assert_ranked_first, line_of, origins_of
from tracer.api import explain_trace
from tracer.join.program import BY_ATTRIBUTE, CALL, CallPoint
from tracer.join.stackless import STACKLESS, predicted_ops
from tracer.join.tokens import token_of
from tracer.model.events import Cat

CACHE = """
import torch
from torch import nn


class Cache:
    def __init__(self):
        self.keys = None

    def update(self, key):
        if self.keys is None:
            self.keys = torch.tensor([], dtype=key.dtype, device=key.device)
        self.keys = torch.cat([self.keys, key], dim=-2)
        return self.keys


class Attention(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.k_proj = nn.Linear(width, width)

    def forward(self, x):
        cache = Cache()
        key = torch.relu(self.k_proj(x)) * 2
        keys = cache.update(key)
        return torch.softmax(keys.sum(-1), dim=-1)
"""


def test_a_tensor_from_data_predicts_the_ops_it_records() -> None:
    point = CallPoint(1, 0, CALL, "tensor", callee=BY_ATTRIBUTE)
    assert predicted_ops(point) == ("aten::empty", "aten::to", "aten::lift_fresh", "aten::detach_")
    as_tensor = CallPoint(1, 0, CALL, "as_tensor", callee=BY_ATTRIBUTE)
    assert "aten::detach_" not in predicted_ops(as_tensor)


def test_one_call_explains_its_quiet_ops_but_one_cast_at_most() -> None:
    point = CallPoint(1, 0, CALL, "tensor", callee=BY_ATTRIBUTE)
    assert STACKLESS.repeat(point, token_of("aten::lift_fresh", Cat.CPU_OP)) is not None
    assert STACKLESS.repeat(point, token_of("aten::to", Cat.CPU_OP)) is None


@pytest.fixture(scope="module")
def cache_analysis(write_package, tmp_path_factory, profile_without_stacks, import_from_package):
    import torch

    package = write_package("cachepkg", {"cache": CACHE})
    attention = import_from_package(package, "cachepkg.cache").Attention(16)
    x = torch.randn(2, 4, 16)
    trace = profile_without_stacks(lambda: attention(x), tmp_path_factory.mktemp("cache") / "cache.json")
    return explain_trace(trace, source=[package])


@pytest.mark.parametrize("op", ["aten::lift_fresh", "aten::detach_"])
def test_the_lazy_start_answers_in_its_line(cache_analysis, op: str) -> None:
    line = line_of(CACHE, "torch.tensor([]")
    assert_ranked_first(origins_of(cache_analysis, op), "cachepkg/cache.py", line)
