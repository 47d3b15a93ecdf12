"""Without stacks, a custom op's module call answers in the class's own ``forward_native``: SGLang's
and vLLM's layers (``SiluAndMul``, ``RMSNorm``, the fused ops) inherit ``forward`` from a base
(``BaseFusedOp``, ``CustomOp``) that picks one of the class's ``forward_<platform>`` methods at run
time (``self._forward_method(...)``), which no name in the source resolves. The call of such a module
is the class's ``forward_native``, ``forward_cuda`` or ``forward_cpu``, each an alternative; before,
the base's dispatch was spliced in and the ops were answered in its lines or another file's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.join.package_source import line_of
from tracer.api import explain_trace

# A custom-op base as SGLang's `sglang/kernels/fused_op.py` writes it: the method is chosen once,
# by what the platform has, and called through an attribute
OPS = """
import torch
from torch import nn


class CustomOp(nn.Module):
    def __init__(self):
        super().__init__()
        self._forward_method = None

    def _resolve(self):
        if torch.cuda.is_available():
            return self.forward_cuda
        return self.forward_native

    def forward(self, *args, **kwargs):
        method = self._forward_method
        if method is None:
            method = self._forward_method = self._resolve()
        return method(*args, **kwargs)

    def forward_native(self, *args, **kwargs):
        raise NotImplementedError

    def forward_cuda(self, *args, **kwargs):
        return self.forward_native(*args, **kwargs)


class SiluAndMul(CustomOp):
    def forward_native(self, x):
        d = x.shape[-1] // 2
        return nn.functional.silu(x[..., :d]) * x[..., d:]


class RMSNorm(CustomOp):
    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward_native(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return (x * self.weight).to(dtype)
"""
MODEL = """
import torch
from torch import nn

from .ops import RMSNorm, SiluAndMul


class MLP(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = RMSNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(width, width)

    def forward(self, x):
        act = SiluAndMul()
        h = self.up(self.norm(x))
        return self.down(act(h)) + x
"""


@pytest.fixture(scope="module")
def package(write_package) -> Path:
    return write_package("dispatchpkg", {"ops": OPS, "model": MODEL})


@pytest.fixture(scope="module")
def origins(package: Path, tmp_path_factory, profile_without_stacks, import_from_package) -> dict:
    import torch

    mlp = import_from_package(package, "dispatchpkg.model").MLP(16)
    x = torch.randn(4, 16)
    trace = profile_without_stacks(lambda: mlp(x), tmp_path_factory.mktemp("dispatch") / "mlp.json")
    analysis = explain_trace(trace, source=[package])
    found: dict[str, list] = {}
    for finding in analysis.findings:
        if finding.origin.ops:
            found.setdefault(finding.origin.ops[0], []).append(finding.origin)
    return found


@pytest.mark.parametrize(
    ("op", "needles"),
    [
        ("aten::silu", ("functional.silu",)),
        ("aten::pow", ("x.pow(2)",)),
        ("aten::rsqrt", ("torch.rsqrt",)),
        ("aten::to", ("x.to(torch.float32)", ".to(dtype)")),  # float32 in: both casts run aten::to
    ],
)
def test_a_custom_ops_call_answers_in_its_forward_native(origins: dict, op: str, needles: tuple) -> None:
    assert origins.get(op), sorted(origins)
    lines = {line_of(OPS, needle) for needle in needles}
    for origin in origins[op]:
        assert origin.file == "dispatchpkg/ops.py" and origin.line in lines, (
            origin.location,
            origin.candidates,
        )
        assert origin.answer == "ranked" and origin.confidence < 0.5  # still a ranking
