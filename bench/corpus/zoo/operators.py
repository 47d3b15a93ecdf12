"""Operators between casts: `*`, `@`, `+`, `+=`, unary `-`, comparisons, and `.contiguous()`,
`.clone()`, `.copy_()`, `torch.cat`/`torch.stack` of casts."""

from __future__ import annotations

import torch

from bench.corpus.zoo.registry import shape


def gated_mlp(x: torch.Tensor, up: torch.Tensor, gate: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """Operators with no call frame of their own, between casts on the same and nearby lines."""
    h = x.to(torch.float32)
    a = h @ up.float()
    b = -(h @ gate.to(torch.float32))
    act = a * torch.sigmoid(b) + a
    act += h.mean() * 0.1
    keep = act > 0
    act = act * keep.to(act.dtype) - (act < -1).float()
    out = act.to(torch.bfloat16) @ down
    return out


@shape("operators_between_casts", "`*`, `@`, `+`, `+=`, unary `-`, `>`/`<` between `.to`/`.float` casts")
def build_operators(device: torch.device):
    x = torch.randn(4, 8, device=device, dtype=torch.bfloat16)
    up = torch.randn(8, 16, device=device, dtype=torch.bfloat16)
    gate = torch.randn(8, 16, device=device, dtype=torch.float16)
    down = torch.randn(16, 8, device=device, dtype=torch.bfloat16)

    def step(i: int):
        return gated_mlp(x * (1 + i), up, gate, down)

    return step


def pack_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """`torch.cat`/`torch.stack` whose arguments are casts: the casts run before the cat."""
    qk = torch.cat([q.to(torch.float32), k.float()], dim=-1)
    kv = torch.stack((k.to(torch.bfloat16), v.to(torch.bfloat16)), dim=0)
    return qk.sum() + kv.float().sum()


@shape("cat_stack_of_casts", "`torch.cat([a.to(...), b.float()])`, `torch.stack((a.to(), b.to()))`")
def build_cat_stack(device: torch.device):
    q = torch.randn(2, 4, 8, device=device, dtype=torch.bfloat16)
    k = torch.randn(2, 4, 8, device=device, dtype=torch.float16)
    v = torch.randn(2, 4, 8, device=device, dtype=torch.float16)

    def step(i: int):
        return pack_heads(q, k, v)

    return step


def layout_ops(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`.contiguous()`, `.clone()`, `.copy_()`, `.t().contiguous()`: copies that are not casts."""
    t = x.transpose(0, 1).contiguous()
    snapshot = t.clone()
    out.copy_(snapshot.to(out.dtype).t())
    tail = x.t().contiguous().clone()
    out[: tail.shape[1]].copy_(tail.t())
    return out


@shape("contiguous_clone_copy", "`.contiguous()`, `.clone()`, `.copy_()` (same and cross dtype)")
def build_layout(device: torch.device):
    x = torch.randn(6, 4, device=device, dtype=torch.float16)
    out = torch.zeros(6, 4, device=device, dtype=torch.bfloat16)

    def step(i: int):
        return layout_ops(x + i, out)

    return step
