"""Without stacks, a one-op helper between unrelated code gets a weak ranking, said to be one.

SGLang's ``UnquantizedLinearMethod.apply`` is ``return F.linear(x, layer.weight, bias)``: no function
explains more of the ops around its ``aten::linear`` than the op itself, below the fit a ranking
needs, so the op had no line at all. Now the lines that explain at least the op are ranked, at a
confidence of `WEAK_CONFIDENCE` (0.05), with evidence that says the ranking is weak."""

from __future__ import annotations

import pytest

from tests.join.package_source import line_of
from tracer.api import explain_trace
from tracer.join.stackless import WEAK_CONFIDENCE

LAYERS = """
import torch.nn.functional as F


def project(x, weight, bias):
    return F.linear(x, weight, bias)


def embed(ids, table):
    return F.embedding(ids, table)
"""


@pytest.fixture(scope="module")
def origins(write_package, tmp_path_factory, profile_without_stacks, import_from_package) -> dict:
    import torch

    package = write_package("weakpkg", {"layers": LAYERS})
    layers = import_from_package(package, "weakpkg.layers")
    weight, bias = torch.randn(16, 32), torch.randn(16)
    x, ids = torch.randn(4, 32), torch.tensor([1, 3, 5])

    def step() -> None:
        for _ in range(4):
            layers.project(x, weight, bias)
            layers.embed(ids, weight)

    trace = profile_without_stacks(step, tmp_path_factory.mktemp("weak") / "weak.json")
    analysis = explain_trace(trace, source=[package])
    return {f.origin.ops[0]: f.origin for f in analysis.findings if f.origin.ops}


def test_a_one_op_helper_is_ranked_first_in_a_weak_ranking(origins: dict) -> None:
    for op, needle in (("aten::linear", "F.linear("), ("aten::embedding", "F.embedding(")):
        origin = origins[op]
        assert (origin.file, origin.line) == ("weakpkg/layers.py", line_of(LAYERS, needle)), origin.evidence
        assert origin.answer == "ranked" and origin.confidence == WEAK_CONFIDENCE
        assert any(e.startswith("a weak ranking: ") for e in origin.evidence), origin.evidence
