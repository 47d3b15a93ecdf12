"""Control flow: one-armed branches, per-step calls, elif chains, ternaries, short-circuits, early
exits, data-dependent while loops and exceptions."""

from __future__ import annotations

import torch

from bench.corpus.zoo.registry import shape


class Projection(torch.nn.Module):
    """Upcasts for the matmul only when asked: each call runs one arm of the if/else."""

    def __init__(self, width: int, upcast: bool) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(width, width).to(torch.bfloat16))
        self.upcast = upcast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.upcast:
            x = x.to(torch.float32)
            weight = self.weight.to(torch.float32)
        else:
            weight = self.weight
            x = x.to(weight.dtype)
        out = x @ weight.t()
        return out.to(torch.bfloat16)


@shape("if_else_one_arm", "if/else where only one arm runs per call; which arm differs per layer")
def build_if_else(device: torch.device):
    layers = [Projection(16, upcast=(i % 3 == 0)).to(device) for i in range(4)]
    x = torch.randn(4, 16, device=device, dtype=torch.bfloat16)

    def step(i: int):
        h = x
        for layer in layers[: 2 + i % 3]:
            h = layer(h)
        return h

    return step


class DecodeHead(torch.nn.Module):
    """A bias added only on odd steps: every cast after it shifts in a count-based join."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(width).to(torch.bfloat16))
        self.scale = torch.nn.Parameter(torch.ones(width))

    def forward(self, hidden: torch.Tensor, step: int) -> torch.Tensor:
        logits = hidden.to(torch.float32)
        if step % 2:
            logits = logits + self.bias.to(torch.float32)
        logits = logits * self.scale
        probs = logits.softmax(dim=-1)
        return probs.to(hidden.dtype)


@shape("every_other_step", "a call that runs only on some steps (`if step % 2:`), casts after it")
def build_every_other_step(device: torch.device):
    head = DecodeHead(32).to(device)
    hidden = torch.randn(2, 32, device=device, dtype=torch.bfloat16)

    def step(i: int):
        return head(hidden, i)

    return step


def activation(x: torch.Tensor, kind: str) -> torch.Tensor:
    """An elif chain: one arm per call, every arm casting on its own line."""
    if kind == "gelu":
        out = torch.nn.functional.gelu(x.float())
    elif kind == "silu":
        out = torch.nn.functional.silu(x.to(torch.float32))
    elif kind == "relu2":
        out = torch.relu(x.float()).square()
    else:
        out = x.to(torch.float32)
    return out.to(x.dtype)


@shape("elif_chain", "an if/elif/elif/else chain, one arm per call, the arm varying per step")
def build_elif_chain(device: torch.device):
    x = torch.randn(4, 16, device=device, dtype=torch.float16)
    kinds = ["gelu", "silu", "relu2", "identity"]

    def step(i: int):
        return activation(x, kinds[i % 4]) + activation(x, kinds[(i + 1) % 4])

    return step


def mix(a: torch.Tensor, b: torch.Tensor, use_b: bool) -> torch.Tensor:
    """Ternaries: exactly one arm of each runs."""
    left = a.to(torch.float32) if use_b else a.float().neg()
    right = b.float() if use_b else torch.zeros_like(left)
    scale = 0.5 if left.shape[0] > 2 else 2.0
    return (left * scale + right).to(a.dtype if use_b else torch.bfloat16)


@shape("ternary", "conditional expressions (`x if c else y`), one arm evaluated per call")
def build_ternary(device: torch.device):
    a = torch.randn(4, 8, device=device, dtype=torch.float16)
    b = torch.randn(4, 8, device=device, dtype=torch.bfloat16)

    def step(i: int):
        return mix(a, b, use_b=bool(i % 2))

    return step


def clip_scores(scores: torch.Tensor, mask: torch.Tensor | None, cap: float | None) -> torch.Tensor:
    """`and`/`or`: the right operand's call runs only when the left one does not decide."""
    scores = scores.float()
    if mask is not None and mask.to(torch.bool).any():
        scores = scores.masked_fill(~mask.to(torch.bool), float("-inf"))
    limit = cap or scores.abs().amax().item()
    scores = torch.clamp(scores, -limit, limit)
    return scores.to(torch.bfloat16)


@shape("and_or_short_circuit", "`a and b` / `x or y` whose right side (a cast, an op) runs only sometimes")
def build_and_or(device: torch.device):
    scores = torch.randn(4, 8, device=device, dtype=torch.float16)
    masks = [
        None,
        torch.ones(4, 8, device=device, dtype=torch.uint8),
        torch.zeros(4, 8, device=device, dtype=torch.uint8),
    ]

    def step(i: int):
        return clip_scores(scores, masks[i % 3], None if i % 2 else 3.0)

    return step


def pick_tokens(logits: torch.Tensor, budget: int) -> torch.Tensor:
    """Early return, break and continue in one function."""
    if budget == 0:
        return logits.argmax(dim=-1).to(torch.int32)
    probs = logits.float().softmax(dim=-1)
    kept = []
    for row in range(probs.shape[0]):
        if row % 2 == 1 and budget < 3:
            continue
        top = probs[row].max()
        if top.item() > 0.999:
            break
        kept.append(probs[row].to(torch.float16))
        if len(kept) >= budget:
            break
    out = torch.stack(kept) if kept else probs[:1].half()
    return out.sum(dim=-1).to(torch.int32)


@shape("early_exit", "early return, break and continue: later calls run or not per step")
def build_early_exit(device: torch.device):
    logits = torch.randn(5, 16, device=device, dtype=torch.bfloat16)

    def step(i: int):
        return pick_tokens(logits, i % 4)

    return step


def renormalize(weights: torch.Tensor, tol: float) -> torch.Tensor:
    """A while loop whose trip count depends on the data, then casts after it."""
    w = weights.to(torch.float32)
    rounds = 0
    while (w.sum(dim=-1) - 1).abs().max() > tol and rounds < 6:
        w = w / w.sum(dim=-1, keepdim=True)
        w = (w * 1.01).to(torch.bfloat16).to(torch.float32)
        rounds += 1
    w = w.clamp_min(0)
    return w.to(weights.dtype)


@shape("while_data_dependent", "a while loop with a data-dependent trip count, casts inside and after")
def build_while(device: torch.device):
    weights = [torch.rand(3, 8, device=device, dtype=torch.float16) * (k + 1) for k in range(4)]

    def step(i: int):
        return renormalize(weights[i % 4], tol=0.05 if i % 2 else 0.5)

    return step


def safe_scale(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """try/except where some calls raise (a shape mismatch) and the handler casts instead."""
    try:
        out = x.float() * scale.to(torch.float32)
    except RuntimeError:
        out = x.to(torch.float32) * scale.float().mean()
    finally:
        x = x.detach()
    return out.to(torch.bfloat16)


@shape("try_except", "try/except/finally where some steps raise inside the try")
def build_try_except(device: torch.device):
    x = torch.randn(4, 8, device=device, dtype=torch.float16)
    scales = [
        torch.randn(8, device=device, dtype=torch.bfloat16),
        torch.randn(3, device=device, dtype=torch.bfloat16),
    ]

    def step(i: int):
        return safe_scale(x, scales[i % 2])

    return step
