"""Without stacks, a torch function written in Python answers for the private op it runs.

``torch.nn.functional.grouped_mm(...)`` records ``aten::_grouped_mm`` (checked on torch 2.13's CPU
profiler), and a call named ``grouped_mm`` was said to run only ``aten::grouped_mm``. So in
transformers' ``_grouped_mm`` helper (``integrations/moe.py``, every MoE model's experts) the line
that ran was no candidate, and the fallback's call below it, a block of unknown ops, took the op."""

from __future__ import annotations

import pytest

from tests.join.package_source import assert_ranked_first, line_of, origins_of
from tracer.api import explain_trace
from tracer.join.program import BY_ATTRIBUTE, CALL, CallPoint
from tracer.join.stackless import predicted_ops

EXPERTS = """
import torch
from torch import nn


def _fallback(input, weight, offs):
    out, start = [], 0
    for expert, end in enumerate(offs.tolist()):
        out.append(input[start:end] @ weight[expert])
        start = end
    return torch.cat(out)


def grouped(input, weight, offs):
    if hasattr(torch.nn.functional, "grouped_mm"):
        return torch.nn.functional.grouped_mm(input.to(weight.dtype), weight, offs=offs)
    return _fallback(input.to(weight.dtype), weight, offs)


class Experts(nn.Module):
    def __init__(self, experts, width):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(experts, width, width, dtype=torch.bfloat16))

    def forward(self, x, offs):
        h = torch.relu(x) * 2
        return grouped(h, self.weight, offs).sum(-1)
"""


def test_a_call_may_run_the_private_op_of_its_name() -> None:
    point = CallPoint(1, 0, CALL, "grouped_mm", callee=BY_ATTRIBUTE)
    assert "aten::_grouped_mm" in predicted_ops(point)


@pytest.fixture(scope="module")
def grouped_origins(write_package, tmp_path_factory, profile_without_stacks, import_from_package) -> list:
    import torch

    package = write_package("grouppkg", {"experts": EXPERTS})
    experts = import_from_package(package, "grouppkg.experts").Experts(2, 16)
    x, offs = torch.randn(64, 16, dtype=torch.bfloat16), torch.tensor([32, 64], dtype=torch.int32)
    trace = profile_without_stacks(lambda: experts(x, offs), tmp_path_factory.mktemp("grouped") / "moe.json")
    analysis = explain_trace(trace, source=[package])
    return origins_of(analysis, "aten::_grouped_mm")


def test_grouped_mm_answers_in_the_line_that_called_it(grouped_origins: list) -> None:
    line = line_of(EXPERTS, "torch.nn.functional.grouped_mm(")
    assert_ranked_first(grouped_origins, "grouppkg/experts.py", line)
