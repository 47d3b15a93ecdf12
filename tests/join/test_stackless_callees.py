"""Without stacks, calls that do not name what they run still reach it: what the source binds names
and attributes to (`tracer/join/bindings.py`) is spliced into the caller by the stackless ranking.

Each case is a zoo shape whose recorded trace (torch 2.13, CPU) is scored with every Python frame
stripped; before these mechanisms its true lines were ranked first for 0-90% of its op time.
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from bench.corpus.scoring import CORPUS, find_corpus, score_trace
from tracer.join import bindings
from tracer.join.bindings import CALLED, LAMBDA, PARTIAL, TORCH_OP, Binding, module_bindings

# shape -> (the mechanism it needs, least share of its op time whose true line is ranked first)
SHAPES = {
    "property_cast": ("`self.weight` reads a @property that casts", 0.95),
    "callable_object": ("`up(x)`: an instance with __call__ bound in the enclosing function", 0.95),
    "partial_to": ("`partial(torch.Tensor.to, dtype=...)` runs aten::to where it is called", 0.95),
    "module_calls_between_casts": ("`self.proj(x)`: nn.Linear bound in __init__ runs aten::linear", 0.95),
    "tiny_decoder_generate": ("`self.mlp(x)`: the forward of the class __init__ bound", 0.95),
    "modulelist_loop": ("`for i, layer in enumerate(self.layers)` over a ModuleList of Linear", 0.85),
    "elif_chain": ("`kind == 'gelu'` compares a str: no op, skipping it costs nothing", 0.95),
    "super_forward": ("`super().forward(x)`: the base class's forward", 0.5),
    # before: 0% each (their ops ran in frames of their own, which no candidate function held)
    "generator_expressions": ("`sum(c.float().sum() for c in chunks)`: the generator's own frame", 0.9),
    "lambdas": ("`table[i](x)` of a local list of lambdas; `min(..., key=lambda t: ...)`", 0.95),
    "recursion": ("`tree_reduce(parts[:middle])`: the function's own program again, any depth", 0.7),
}


@pytest.fixture(scope="module")
def nostack_scores():
    traces = [t for t in find_corpus(CORPUS, ["zoo"]) if "/torch2.13/" in f"/{t.name}/" and t.group in SHAPES]
    return {t.group: score_trace(t, ("nostack",)).scores["nostack"] for t in traces}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_true_line_ranked_first_without_stacks(nostack_scores, shape: str) -> None:
    why, least = SHAPES[shape]
    score = nostack_scores[shape]
    assert score.rank1 is not None and score.rank1 >= least, f"{shape} ({why}): rank 1 {score.rank1:.1%}"
    assert score.top3 >= score.rank1


def test_rankings_stay_rankings(nostack_scores) -> None:
    """Better resolved calls claim no more: every answer is still below 0.5."""
    for shape, score in nostack_scores.items():
        assert score.buckets[">=0.9"].answered_ns == 0 and score.buckets["0.5-0.9"].answered_ns == 0, shape


def _bindings(source: str):
    return module_bindings(ast.parse(textwrap.dedent(source)))


def test_bindings_of_init_attributes_and_containers() -> None:
    found = _bindings(
        """
        class Layer(nn.Module):
            def __init__(self, width):
                self.mlp = Mlp(width).to(device)
                self.proj = nn.Linear(width, width)
                self.act = nn.SiLU() if fast else Gelu()
                self.layers = nn.ModuleList(Block(width) for _ in range(4))
        """
    )
    layer = found.classes["Layer"]
    assert layer.attributes["mlp"] == (Binding(CALLED, "Mlp"),)
    assert Binding(TORCH_OP, "linear", bias=True) in layer.attributes["proj"]  # torch's default bias
    assert {b.target for b in layer.attributes["act"]} == {"SiLU", "silu", "Gelu"}
    assert layer.elements["layers"] == (Binding(CALLED, "Block"),)


def test_bindings_of_locals_closures_partials_and_super() -> None:
    found = _bindings(
        """
        to32 = functools.partial(torch.Tensor.to, dtype=torch.float32)
        scale = partial(rescale, factor=2)

        def build():
            up, down = Scaler(2.0), Scaler(0.5)
            act = lambda t: t.float()

            def step(x):
                return down(up(act(x)))
            return step

        class Sub(Base):
            def forward(self, x):
                for i, layer in enumerate(self.layers):
                    x = layer(x)
                return super().forward(x)
        """
    )
    assert found.module["to32"] == (Binding(TORCH_OP, "to", dtype="torch.float32"),)
    assert found.module["scale"] == (Binding(PARTIAL, "rescale"),)
    step = next(scope for scope in found.functions.values() if "act" in scope and "up" in scope)
    assert step["up"] == (Binding(CALLED, "Scaler"),) and step["down"] == (Binding(CALLED, "Scaler"),)
    assert step["act"][0].kind == LAMBDA
    assert found.classes["Sub"].bases == ("Base",)
    assert len(found.super_calls) == 1


def test_bindings_of_imports_lambda_arguments_and_local_tables() -> None:
    found = _bindings(
        """
        from ...pytorch_utils import Conv1D
        from .utils import helper as aid
        try:
            from fast import kernel
        except ImportError:
            from slow import kernel

        def apply(x, which):
            table = [
                lambda t: t.float(),
                lambda t: t.half(),
            ]
            first = table[which](x)
            return min([x, first], key=lambda t: t.sum().item())
        """
    )
    assert found.imports["Conv1D"] == bindings.Imported(3, "pytorch_utils", "Conv1D")
    assert found.imports["aid"] == bindings.Imported(1, "utils", "helper")
    assert found.imports["kernel"] == bindings.Imported(0, "fast", "kernel")  # the first binding wins
    apply = next(scope for scope in found.functions.values() if "table" + bindings.ELEMENTS in scope)
    assert [b.kind for b in apply["table" + bindings.ELEMENTS]] == [LAMBDA, LAMBDA]
    assert list(found.lambda_arguments.values()) == [(15,)]  # min(...) is given the key lambda
