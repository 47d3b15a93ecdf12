"""Frames that come and go unusually: generators that yield between casts, static and class
methods, recursion, and plain callable objects."""

from __future__ import annotations

import torch

from bench.corpus.zoo.registry import shape


def chunked_upcast(x: torch.Tensor, size: int):
    """A generator: its frame is resumed once per chunk, each time between the consumer's calls."""
    for start in range(0, x.shape[0], size):
        piece = x[start : start + size]
        yield piece.to(torch.float32)
    yield x.mean(0, keepdim=True).float()


def consume(x: torch.Tensor, size: int) -> torch.Tensor:
    total = torch.zeros(x.shape[-1], dtype=torch.float32, device=x.device)
    for piece in chunked_upcast(x, size):
        total = total + piece.sum(0).to(torch.float32)
    return total.to(torch.bfloat16)


@shape("generator_function", "a generator function yielding casts, resumed between the consumer's own casts")
def build_generator(device: torch.device):
    x = torch.randn(7, 4, device=device, dtype=torch.float16)

    def step(i: int):
        return consume(x, 2 + i % 3)

    return step


class Quantizer:
    """Static and class methods doing the work, called through the class and through an instance."""

    scale_dtype = torch.float32

    @staticmethod
    def absmax(x: torch.Tensor) -> torch.Tensor:
        return x.abs().amax(dim=-1, keepdim=True).to(torch.float32).clamp_min(1e-6)

    @classmethod
    def quantize(cls, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale = cls.absmax(x) / 127.0
        q = (x.to(cls.scale_dtype) / scale).round().clamp(-127, 127).to(torch.int8)
        return q, scale

    def dequantize(self, q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return (q.to(torch.float32) * scale).to(dtype)


@shape("static_class_methods", "@staticmethod and @classmethod calls (via the class and an instance)")
def build_quantizer(device: torch.device):
    x = torch.randn(4, 8, device=device, dtype=torch.bfloat16)
    quantizer = Quantizer()

    def step(i: int):
        q, scale = Quantizer.quantize(x * (i + 1))
        again, _ = quantizer.quantize(x)
        return quantizer.dequantize(q, scale, x.dtype) + again.to(x.dtype)

    return step


def tree_reduce(parts: list[torch.Tensor]) -> torch.Tensor:
    """Recursion: the same function's frames nest, each casting at a different depth."""
    if len(parts) == 1:
        return parts[0].to(torch.float32)
    middle = len(parts) // 2
    left = tree_reduce(parts[:middle])
    right = tree_reduce(parts[middle:])
    return (left + right).to(torch.bfloat16).float()


@shape("recursion", "a recursive function whose depth varies per step, casting at every level")
def build_recursion(device: torch.device):
    parts = [torch.randn(4, device=device, dtype=torch.float16) for _ in range(5)]

    def step(i: int):
        return tree_reduce(parts[: 1 + (i + 1) % 5])

    return step


class Scaler:
    """A plain object with `__call__` (not an nn.Module): no nn.Module frame, a Python frame only."""

    def __init__(self, factor: float, dtype: torch.dtype) -> None:
        self.factor = factor
        self.dtype = dtype

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x.to(torch.float32) * self.factor).to(self.dtype)


@shape("callable_object", "instances with `__call__` used like functions, two of them on one line")
def build_callable(device: torch.device):
    up, down = Scaler(2.0, torch.float32), Scaler(0.5, torch.bfloat16)
    x = torch.randn(4, 8, device=device, dtype=torch.float16)

    def step(i: int):
        return down(up(x)) + down(x) if i % 2 else up(down(x))

    return step
