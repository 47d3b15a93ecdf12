"""Without stacks, the ops an autograd Function's ``forward`` runs answer in its ``forward``'s lines.

``GeLUFunction.apply(x)`` records an op named after its class, and the ops of its ``forward`` nest in
that op. The windows held top-level ops only, so every op inside (Bloom's GELU: nine ``mul``/``add``/
``tanh``) took the window of the Function's op and answered at the ``apply`` line, where the stacks
say ``bloom_gelu_forward``'s line ran them (11% of the corpus's Bloom forward). Now an op Python code
runs inside (`runs_python`) is followed in the windows by the ops its code runs (`OpWindows`), and
the ``apply`` call splices in the class's ``forward`` after the Function's own op.

Run end to end on real traces made here: a package whose Functions nest (one calls another's
``apply``), and a tiny ``BloomForCausalLM`` with the installed transformers' own files as the source;
each profiled on CPU without stacks, and with stacks for the truth."""

from __future__ import annotations

import pytest

from tests.join.package_source import (
    TRANSFORMERS_HELPERS,
    explained_model,
    explained_with_and_without_stacks,
    line_in,
    line_of,
)
from tracer.join.nesting import runs_python
from tracer.join.program import BY_ATTRIBUTE, CALL, CallPoint
from tracer.join.stackless import predicted_ops, runs_a_block, runs_no_op

torch = pytest.importorskip("torch")

FUNCTIONS = """
import logging

import torch
from torch import nn

logger = logging.getLogger(__name__)


class Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x * 3.0
        return torch.tanh(y)


class Shifted(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        z = Scaled.apply(x)
        return torch.sigmoid(z) - 0.5


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        logger.debug("block of %d", x.shape[-1])
        h = torch.relu(self.proj(x))
        out = Shifted.apply(h)
        return torch.cumsum(out, dim=-1)
"""


@pytest.mark.parametrize(
    ("name", "runs"),
    [
        ("GeLUFunction", True),
        ("Shifted", True),
        ("aten::mul", False),
        ("MulBackward0", False),
        ("GeLUFunctionBackward", False),
        ("CompiledFunction", False),
        ("Torch-Compiled Region: 0/0", False),
        ("detach_", False),
    ],
)
def test_which_ops_python_code_runs_inside(name: str, runs: bool) -> None:
    assert runs_python(name) is runs


def test_a_message_logged_runs_no_op() -> None:
    for receiver, name in (("logger", "warning_once"), ("self.logger", "info"), ("warnings", "warn")):
        point = CallPoint(1, 0, CALL, name, callee=BY_ATTRIBUTE, receiver=receiver)
        assert runs_no_op(point) and not runs_a_block(point) and predicted_ops(point) == ()
    # a method of that name on anything else may run ops of its own
    assert runs_a_block(CallPoint(1, 0, CALL, "info", callee=BY_ATTRIBUTE, receiver="catalog"))


@pytest.fixture(scope="module")
def nested(write_package, tmp_path_factory, import_from_package):
    package = write_package("fnpkg", {"block": FUNCTIONS})
    block = import_from_package(package, "fnpkg.block").Block(16)
    x = torch.randn(4, 16)
    return explained_with_and_without_stacks(tmp_path_factory.mktemp("fn"), lambda: block(x), package)


def _under(finding, op: str) -> bool:
    """Whether the finding's op chain, the Functions' ops left out, starts with `op`."""
    return [o for o in finding.origin.ops if not runs_python(o)][:1] == [op]


def _lines(analysis, op: str) -> set[tuple[str, int | None]]:
    """Where the analysis's findings under `op` (`_under`) answered: (file in the package, line)."""
    return {
        ((f.origin.file or "").rpartition("fnpkg/")[2], f.origin.line)
        for f in analysis.findings
        if _under(f, op)
    }


@pytest.mark.parametrize(
    ("op", "outer", "needle"),
    [
        ("aten::mul", "Shifted", "y = x * 3.0"),
        ("aten::tanh", "Shifted", "return torch.tanh(y)"),
        ("aten::sigmoid", "Shifted", "return torch.sigmoid(z) - 0.5"),
        ("aten::cumsum", "aten::cumsum", "return torch.cumsum(out"),
    ],
)
def test_the_ops_of_a_functions_forward_answer_in_its_lines(nested, op: str, outer: str, needle: str) -> None:
    truth, bare = nested
    where = {("block.py", line_of(FUNCTIONS, needle))}
    assert _lines(truth, op) == where  # the stacks' answer
    assert _lines(bare, op) == where
    for finding in bare.findings:
        if _under(finding, op):
            assert finding.origin.ops[0] == outer  # (inside the Functions' ops)
            assert finding.origin.answer == "ranked" and finding.origin.confidence < 0.5


BLOOM_FILES = (
    *TRANSFORMERS_HELPERS,
    "models/bloom/modeling_bloom.py",
    "models/bloom/configuration_bloom.py",
)


@pytest.fixture(scope="module")
def bloom(tmp_path_factory):
    pytest.importorskip("transformers")
    from transformers import BloomConfig, BloomForCausalLM

    config = BloomConfig(n_layer=2, hidden_size=64, n_head=4, vocab_size=128)
    return explained_model(tmp_path_factory.mktemp("bloom"), BLOOM_FILES, lambda: BloomForCausalLM(config))


def test_blooms_gelu_answers_in_the_function_that_ran_it(bloom) -> None:
    source, truth, bare = bloom
    gelu = line_in(source, "models/bloom/modeling_bloom.py", "return x * 0.5 * (1.0 + torch.tanh(")
    inside = [f for f in truth.findings if f.origin.ops and f.origin.ops[0] == "GeLUFunction"]
    assert {f.origin.line for f in inside} == {gelu}  # the stacks' answer
    assert {f.kernel for f in inside} >= {"aten::mul", "aten::tanh"}
    answered = [f for f in bare.findings if f.origin.ops and f.origin.ops[0] == "GeLUFunction"]
    assert {f.kernel for f in answered} == {f.kernel for f in inside}
    assert {(f.origin.file, f.origin.line) for f in answered} == {
        ("transformers/models/bloom/modeling_bloom.py", gelu)
    }
