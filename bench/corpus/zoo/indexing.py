"""Subscripts: tensor-index and slice loads, stores with casts, KV-cache updates, and a whole
buffer cast then indexed against an index then cast."""

from __future__ import annotations

import torch

from bench.corpus.zoo.registry import shape


class KVCache:
    """A paged KV cache in fp16: stores cast the new keys to the buffer's dtype, loads cast back."""

    def __init__(self, slots: int, heads: int, dim: int, device: torch.device) -> None:
        self.k = torch.zeros(slots, heads, dim, device=device, dtype=torch.float16)
        self.v = torch.zeros(slots, heads, dim, device=device, dtype=torch.float16)
        self.length = 0

    def update(self, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k[loc] = k.to(self.k.dtype)
        self.v[loc] = v.to(self.v.dtype)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        n = k.shape[0]
        self.k[self.length : self.length + n] = k
        self.v[self.length : self.length + n] = v.to(torch.float16)
        self.length += n

    def read(self, index: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[index].to(dtype), self.v[index].to(dtype)


@shape("kv_cache_update", "`buf[idx] = v.to(buf.dtype)`, `buf[:n] = v`, `buf[idx].to(dtype)`")
def build_kv_cache(device: torch.device):
    cache = KVCache(32, 2, 4, device)
    k = torch.randn(3, 2, 4, device=device, dtype=torch.bfloat16)
    v = torch.randn(3, 2, 4, device=device, dtype=torch.bfloat16)

    def step(i: int):
        loc = torch.tensor([i, i + 7, i + 13], device=device)
        cache.update(loc, k * i, v)
        cache.append(k.to(torch.float16), v)
        keys, values = cache.read(loc, torch.bfloat16)
        return keys.sum() + values.sum()

    return step


def read_pool(pool: torch.Tensor, index: torch.Tensor, dtype: torch.dtype, whole_first: bool) -> torch.Tensor:
    """The bug the project exists for: cast the whole buffer, then index; or index, then cast."""
    if whole_first:
        rows = pool.to(dtype)[index]
    else:
        rows = pool[index].to(dtype)
    window = pool[2:6].to(dtype)
    return rows.sum(0) + window.sum(0)


@shape(
    "whole_cast_vs_index_cast", "`pool.to(dt)[idx]` (whole buffer) vs `pool[idx].to(dt)`, then a slice cast"
)
def build_whole_vs_index(device: torch.device):
    pool = torch.randn(64, 8, device=device, dtype=torch.float16)
    index = torch.tensor([3, 9, 27, 40], device=device)

    def step(i: int):
        return read_pool(pool, index, torch.bfloat16, whole_first=bool(i % 2))

    return step


def select_rows(x: torch.Tensor, lengths: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Loads with tensor indexes, boolean masks, slices and `...`, and an index_put by mask."""
    last = x[torch.arange(x.shape[0], device=x.device), lengths - 1]
    picked = x[mask].float()
    head = x[:, :2, ...].to(torch.float32)
    x = x.clone()
    x[mask] = 0
    x[..., -1] = last.to(x.dtype)[:, -1:]
    return head.sum() + picked.sum() + x.float().sum()


@shape("subscript_loads_stores", "tensor-index, mask, slice and Ellipsis loads; mask and slice stores")
def build_subscripts(device: torch.device):
    x = torch.randn(3, 5, 4, device=device, dtype=torch.bfloat16)
    lengths = torch.tensor([5, 2, 3], device=device)
    mask = torch.tensor([[True, False, True, False, False]] * 3, device=device)

    def step(i: int):
        return select_rows(x, lengths, mask if i % 2 else ~mask)

    return step
