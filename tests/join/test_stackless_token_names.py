"""Without stacks, a call predicts its op by the name the trace's tokens give it.

`token_of` reads ``aten::bmm`` and ``aten::mm`` as ``aten::matmul`` (``a @ b`` records either), but a
call of ``torch.bmm(...)`` was said to run ``aten::bmm`` only: it could never fit its own op. Bloom's
attention (``torch.bmm(attention_probs_reshaped, value_layer)``) left the op unexplained, and a ViT
copy's attention, whose ``torch.matmul`` fits it, took Bloom's windows (and its lines) once its file
was aligned with them. So too ``GeLUFunction.apply(x)``: an autograd Function's call records an op named
after its class (Bloom's GELU), which no call was said to run (the ops its ``forward`` runs inside it
answer in the ``forward``'s lines)."""

from __future__ import annotations

import pytest

from tests.join.package_source import assert_ranked_first, line_of, origins_of
from tracer.api import explain_trace
from tracer.join.program import BY_ATTRIBUTE, CALL, CallPoint
from tracer.join.stackless import predicted_ops
from tracer.join.tokens import OPERATOR_ALIASES, token_of
from tracer.model.events import Cat

ATTENTION = """
import torch
from torch import nn


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(batch * self.heads, length, -1)
        k = k.reshape(batch * self.heads, length, -1)
        v = v.reshape(batch * self.heads, length, -1)
        scores = torch.baddbmm(torch.zeros(1), q, k.transpose(1, 2))
        probs = torch.softmax(scores, dim=-1)
        context = torch.bmm(probs, v)
        context = context.reshape(batch, length, width)
        flat = context.reshape(batch * length, width)
        mixed = flat.mm(self.out.weight.t())
        mixed = Doubled.apply(mixed)
        return self.out(mixed.reshape(batch, length, width))
"""


@pytest.mark.parametrize("name", ["bmm", "mm"])
def test_a_call_predicts_the_op_as_tokens_name_it(name: str) -> None:
    op = f"aten::{name}"
    assert op in OPERATOR_ALIASES  # the trace's op is read under another name ...
    point = CallPoint(1, 0, CALL, name, callee=BY_ATTRIBUTE)
    assert token_of(op, Cat.CPU_OP).name in predicted_ops(point)  # ... which its call predicts


def test_an_autograd_function_predicts_the_op_of_its_class() -> None:
    point = CallPoint(1, 0, CALL, "apply", callee=BY_ATTRIBUTE, receiver="GeLUFunction")
    assert predicted_ops(point) == ("GeLUFunction",)
    assert predicted_ops(CallPoint(1, 0, CALL, "apply", callee=BY_ATTRIBUTE, receiver="model")) != ("model",)


@pytest.fixture(scope="module")
def analysis(write_package, tmp_path_factory, profile_without_stacks, import_from_package):
    import torch

    package = write_package("bmmpkg", {"attention": ATTENTION})
    attention = import_from_package(package, "bmmpkg.attention").Attention(16, 2)
    x = torch.randn(2, 8, 16)
    with torch.no_grad():
        trace = profile_without_stacks(
            lambda: attention(x), tmp_path_factory.mktemp("bmm") / "attention.json"
        )
    return explain_trace(trace, source=[package])


@pytest.mark.parametrize(
    ("op", "call"),
    # (the ops inside an autograd Function's op answer in its ``forward``'s lines, as the stacks
    # do: test_stackless_autograd_function.py)
    [("aten::bmm", "torch.bmm("), ("aten::mm", "flat.mm("), ("Doubled", "return x * 2")],
)
def test_the_op_answers_in_the_line_that_called_it(analysis, op: str, call: str) -> None:
    assert_ranked_first(origins_of(analysis, op), "bmmpkg/attention.py", line_of(ATTENTION, call))


def _first_top_level_op(run) -> str:
    """The first op `run` records at the top level, by torch's own profiler (CPU)."""
    import torch

    with torch.profiler.profile() as profiler:
        run()
    events = sorted(profiler.events(), key=lambda e: (e.time_range.start, -e.time_range.end))
    return events[0].name


@pytest.mark.parametrize(
    ("name", "shape", "run"),
    [
        ("norm", (4, 8), lambda torch, x: x.norm(dim=-1)),
        ("norm", (4, 8), lambda torch, x: torch.norm(x, dim=-1)),
        ("norm", (4, 8), lambda torch, x: torch.linalg.norm(x, dim=-1)),
        ("vector_norm", (4, 8), lambda torch, x: torch.linalg.vector_norm(x, dim=-1)),
        ("normalize", (4, 8), lambda torch, x: torch.nn.functional.normalize(x, dim=-1)),
        ("rfft", (4, 8), lambda torch, x: torch.fft.rfft(x)),
        ("unique", (4, 8), lambda torch, x: torch.unique(x)),
        ("interpolate", (1, 4, 8), lambda torch, x: torch.nn.functional.interpolate(x, scale_factor=2.0)),
        (
            "interpolate",
            (1, 1, 4, 8),
            lambda torch, x: torch.nn.functional.interpolate(x, scale_factor=2.0, mode="bilinear"),
        ),
        ("matrix_norm", (4, 8), lambda torch, x: torch.linalg.matrix_norm(x)),
        ("ifft", (4, 8), lambda torch, x: torch.fft.ifft(x)),
        ("fftn", (4, 8), lambda torch, x: torch.fft.fftn(x)),
        ("irfft", (4, 8), lambda torch, x: torch.fft.irfft(x)),
        ("cross_entropy", (4, 8), lambda torch, x: torch.nn.functional.cross_entropy(x, x)),
        (
            "interpolate",
            (1, 1, 4, 8),
            lambda torch, x: torch.nn.functional.interpolate(x, size=(2, 4), mode="area"),
        ),
        (
            "interpolate",
            (1, 1, 4, 8),
            lambda torch, x: torch.nn.functional.interpolate(x, scale_factor=2.0, mode="bicubic"),
        ),
        (
            "interpolate",
            (1, 1, 4, 8),
            lambda torch, x: torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest-exact"),
        ),
        ("bmm", (1, 4, 4), lambda torch, x: torch.bmm(x, x)),
        ("mm", (4, 4), lambda torch, x: x.mm(x)),
    ],
)
def test_a_torch_function_predicts_the_op_it_records(name: str, shape: tuple, run) -> None:
    import torch

    x = torch.randn(*shape)
    op = _first_top_level_op(lambda: run(torch, x))
    assert token_of(op, Cat.CPU_OP).name in predicted_ops(CallPoint(1, 0, CALL, name, callee=BY_ATTRIBUTE)), (
        op
    )
