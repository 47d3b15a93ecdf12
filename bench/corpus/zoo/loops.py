"""Loops and inner scopes: per-layer trip counts, ModuleList loops, comprehensions, generator
expressions, lambdas and nested functions."""

from __future__ import annotations

import torch

from bench.corpus.zoo.registry import shape


class RefineBlock(torch.nn.Module):
    """A loop whose trip count differs per layer, with casts after it."""

    def __init__(self, width: int, rounds: int) -> None:
        super().__init__()
        self.rounds = rounds
        self.weight = torch.nn.Parameter(torch.randn(width, width).to(torch.bfloat16) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for _ in range(self.rounds):
            h = h @ self.weight
            h = h.to(torch.float32).tanh().to(torch.bfloat16)
        out = h.to(torch.float32)
        out = out + x.to(torch.float32)
        return out.to(torch.bfloat16)


@shape("loop_trip_count_per_layer", "a for loop running 0..3 times depending on the layer, casts after it")
def build_trip_count(device: torch.device):
    blocks = torch.nn.ModuleList(RefineBlock(8, rounds) for rounds in (0, 2, 1, 3)).to(device)
    x = torch.randn(4, 8, device=device, dtype=torch.bfloat16)

    def step(i: int):
        with torch.no_grad():
            h = x
            for block in blocks:
                h = block(h)
            return h

    return step


class Stack(torch.nn.Module):
    """A ModuleList loop with a cast between layers on every other layer, and one after the loop."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(width, width, dtype=torch.bfloat16) for _ in range(depth)
        )
        self.final = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            x = layer(x)
            if index % 2 == 1:
                x = x.float().relu().to(torch.bfloat16)
        return self.final(x.to(torch.float32))


@shape("modulelist_loop", "`for layer in self.layers:` with a conditional cast inside and a cast after")
def build_modulelist(device: torch.device):
    model = Stack(8, 5).to(device)
    x = torch.randn(3, 8, device=device, dtype=torch.bfloat16)

    def step(i: int):
        with torch.no_grad():
            return model(x)

    return step


def gather_heads(heads: list[torch.Tensor], weights: dict[str, torch.Tensor]) -> torch.Tensor:
    """List and dict comprehensions (their own frames on 3.11, inlined on 3.12) with casts."""
    upcast = [h.to(torch.float32) for h in heads]
    scaled = {name: w.float() * 2 for name, w in weights.items() if w.numel() > 1}
    total = sum(t.sum() for t in scaled.values())
    return torch.stack(upcast).mean(0) + total


@shape("comprehensions", "list/dict comprehensions and a generator expression that call torch")
def build_comprehensions(device: torch.device):
    heads = [torch.randn(4, 8, device=device, dtype=torch.bfloat16) for _ in range(3)]
    weights = {
        "a": torch.randn(8, device=device, dtype=torch.float16),
        "b": torch.randn(1, device=device, dtype=torch.float16),
        "c": torch.randn(2, 8, device=device, dtype=torch.float16),
    }

    def step(i: int):
        return gather_heads(heads[: 1 + i % 3], weights)

    return step


def running_stats(chunks: list[torch.Tensor]) -> torch.Tensor:
    """Generator expressions consumed by `sum`, `max`, `torch.stack(tuple(...))`."""
    total = sum(c.float().sum() for c in chunks)
    peak = max(c.abs().max().item() for c in chunks)
    means = torch.stack(tuple(c.to(torch.float32).mean(0) for c in chunks))
    return means * total / peak


@shape("generator_expressions", "generator expressions feeding sum/max/stack, one trip per chunk")
def build_genexpr(device: torch.device):
    chunks = [torch.randn(3, 8, device=device, dtype=torch.float16) for _ in range(4)]

    def step(i: int):
        return running_stats(chunks[: 2 + i % 3])

    return step


def apply_activations(x: torch.Tensor, which: int) -> torch.Tensor:
    """Lambdas stored in a table and called later: each lambda runs in its own frame."""
    table = [
        lambda t: t.float().sigmoid(),
        lambda t: t.to(torch.float32) * 2,
        lambda t: torch.nn.functional.silu(t.float()),
    ]
    first = table[which % 3](x)
    second = min([x.float(), first], key=lambda t: t.sum().item())
    return (first + second).to(x.dtype)


@shape("lambdas", "lambdas called from a table and as a sort key")
def build_lambdas(device: torch.device):
    x = torch.randn(4, 8, device=device, dtype=torch.bfloat16)

    def step(i: int):
        return apply_activations(x, i)

    return step


def attention_with_closure(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """A nested function (a closure over `causal`) called twice, and a nested helper defined per call."""
    scale = q.shape[-1] ** -0.5

    def scores(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        s = a.float() @ b.float().transpose(-1, -2) * scale
        if causal:
            n = s.shape[-1]
            s = s.masked_fill(
                torch.triu(torch.ones(n, n, dtype=torch.bool, device=s.device), 1), float("-inf")
            )
        return s

    def combine(weights: torch.Tensor) -> torch.Tensor:
        return (weights @ v.float()).to(v.dtype)

    first = scores(q, k).softmax(-1)
    second = scores(k, q).softmax(-1)
    return combine(first) + combine(second)


@shape("nested_functions", "nested functions and closures, each called from two lines")
def build_nested(device: torch.device):
    q = torch.randn(2, 4, 8, device=device, dtype=torch.bfloat16)
    k = torch.randn(2, 4, 8, device=device, dtype=torch.bfloat16)
    v = torch.randn(2, 4, 8, device=device, dtype=torch.float16)

    def step(i: int):
        return attention_with_closure(q, k, v, causal=bool(i % 2))

    return step
