"""Layers and wrappers: decorators, context managers, `super().forward`, module calls between casts."""

from __future__ import annotations

import contextlib
import functools

import torch

from bench.corpus.zoo.registry import shape


def timed(fn):
    """A custom decorator: the wrapper's frame sits between the caller and the function."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        return result

    return wrapper


@timed
def scale_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    scaled = logits.to(torch.float32) / temperature
    return scaled.softmax(-1)


@torch.no_grad()
def greedy(probs: torch.Tensor) -> torch.Tensor:
    best = probs.argmax(-1)
    return best.to(torch.int32)


@shape("decorated_functions", "a custom `functools.wraps` decorator and `@torch.no_grad()` as a decorator")
def build_decorated(device: torch.device):
    logits = torch.randn(3, 16, device=device, dtype=torch.bfloat16)

    def step(i: int):
        probs = scale_logits(logits, 0.5 + i)
        return greedy(probs).float() + scale_logits(logits.half(), 1.0).sum()

    return step


@contextlib.contextmanager
def upcast_scope(tensors: list[torch.Tensor]):
    """A custom context manager whose enter and exit cast (`__enter__`/`__exit__` run torch code)."""
    saved = [t.to(torch.float32) for t in tensors]
    try:
        yield saved
    finally:
        for t, s in zip(tensors, saved):
            t.copy_(s.to(t.dtype))


def update_in_scope(params: list[torch.Tensor], grads: list[torch.Tensor], lr: float) -> None:
    with torch.no_grad():
        norms = torch.stack([g.float().norm() for g in grads])
    with upcast_scope(params) as fp32:
        for p, g in zip(fp32, grads):
            p.sub_(g.to(torch.float32) * lr)
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        norms = norms.to(torch.bfloat16)
    return norms


@shape("context_managers", "`with torch.no_grad()`, a custom @contextmanager that casts on enter and exit")
def build_context(device: torch.device):
    params = [torch.randn(8, device=device, dtype=torch.bfloat16) for _ in range(3)]
    grads = [torch.randn(8, device=device, dtype=torch.float16) for _ in range(3)]

    def step(i: int):
        return update_in_scope(params, grads[: 1 + i % 3], lr=0.01)

    return step


class Base(torch.nn.Linear):
    """`super().forward(...)` in a subclass, with casts before and after."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.to(self.weight.dtype))


class Scaled(Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y.to(torch.float32) * 0.5


@shape("super_forward", "`super().forward(x)` through two levels of subclasses of nn.Linear")
def build_super(device: torch.device):
    layer = Scaled(8, 8, dtype=torch.bfloat16).to(device)
    x = torch.randn(3, 8, device=device, dtype=torch.float32)

    def step(i: int):
        with torch.no_grad():
            return layer(x * i)

    return step


class Attention(torch.nn.Module):
    """Module calls interleaved with casts, as attention blocks write them."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = torch.nn.Linear(width, width, bias=False, dtype=torch.bfloat16)
        self.k_proj = torch.nn.Linear(width, width, bias=False, dtype=torch.bfloat16)
        self.v_proj = torch.nn.Linear(width, width, bias=False, dtype=torch.bfloat16)
        self.o_proj = torch.nn.Linear(width, width, bias=False, dtype=torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, width = x.shape
        q = self.q_proj(x).view(b, n, self.heads, -1).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.heads, -1).transpose(1, 2)
        v = self.v_proj(x.to(torch.bfloat16)).view(b, n, self.heads, -1).transpose(1, 2)
        q, k = q.to(torch.float32), k.to(torch.float32)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v.float(), is_causal=True)
        out = out.transpose(1, 2).reshape(b, n, width).to(x.dtype)
        return self.o_proj(out)


@shape(
    "module_calls_between_casts", "`self.q_proj(x)` module calls, SDPA and casts interleaved in one forward"
)
def build_attention(device: torch.device):
    attn = Attention(16, 2).to(device)
    x = torch.randn(2, 5, 16, device=device, dtype=torch.bfloat16)

    def step(i: int):
        with torch.no_grad():
            return attn(x)

    return step
