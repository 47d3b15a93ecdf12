"""A small decode model whose attention casts the whole KV buffer every layer, or gathers first.

Real code for the graph tests: profiled on CPU with torch.profiler, so its own lines are the
origins the tests expect (found by the markers at the ends of the two key lines).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

WHOLE_CAST_MARK = "# origin: whole-buffer cast"
GATHER_CAST_MARK = "# origin: gather then cast"


class KVPool:
    """Per-layer key buffers stored in a narrow dtype (the FP8 pool of the founding case)."""

    def __init__(self, layers: int, tokens: int, dim: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.buffers = [
            torch.randn(tokens, dim, generator=generator).to(torch.bfloat16) for _ in range(layers)
        ]

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.buffers[layer_id]


class Attention(nn.Module):
    def __init__(self, pool: KVPool, layer_id: int, dim: int, gather_first: bool) -> None:
        super().__init__()
        self.pool, self.layer_id, self.gather_first = pool, layer_id, gather_first
        self.proj = nn.Linear(dim, dim)

    def forward(self, hidden: torch.Tensor, kv_indices: torch.Tensor) -> torch.Tensor:
        q = self.proj(hidden)
        k = (
            self.keys_gather_then_cast(q, kv_indices)
            if self.gather_first
            else self.keys_cast_whole(q, kv_indices)
        )
        return torch.softmax(q @ k.T, dim=-1) @ k

    def keys_cast_whole(self, q: torch.Tensor, kv_indices: torch.Tensor) -> torch.Tensor:
        return self.pool.get_key_buffer(self.layer_id).to(q.dtype)[kv_indices]  # origin: whole-buffer cast

    def keys_gather_then_cast(self, q: torch.Tensor, kv_indices: torch.Tensor) -> torch.Tensor:
        return self.pool.get_key_buffer(self.layer_id)[kv_indices].to(q.dtype)  # origin: gather then cast


class DecodeModel(nn.Module):
    def __init__(self, layers: int, tokens: int, dim: int, gather_first: bool) -> None:
        super().__init__()
        pool = KVPool(layers, tokens, dim)
        self.layers = nn.ModuleList(Attention(pool, i, dim, gather_first) for i in range(layers))

    def forward(self, hidden: torch.Tensor, kv_indices: torch.Tensor) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            with record_function(f"layer.{index}"):  # a scope per layer, as serving stacks add
                hidden = hidden + layer(hidden, kv_indices)
        return hidden


def marked_line(mark: str) -> int:
    """The 1-based line of this file that ends with `mark`."""
    for number, text in enumerate(Path(__file__).read_text().splitlines(), 1):
        if text.rstrip().endswith(mark):
            return number
    raise LookupError(mark)


def profile_decode(
    path: str | Path,
    *,
    gather_first: bool,
    layers: int = 4,
    steps: int = 3,
    tokens: int = 16384,
    dim: int = 64,
) -> Path:
    """Profile `steps` decode steps (after one warm-up step) on CPU; write the Chrome trace to `path`."""
    torch.manual_seed(0)
    model = DecodeModel(layers, tokens, dim, gather_first)
    hidden = torch.randn(1, dim)
    kv_indices = torch.arange(0, tokens, tokens // 64)
    with (
        torch.no_grad(),
        profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            with_stack=True,
            schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
        ) as prof,
    ):
        for _ in range(1 + steps):
            model(hidden, kv_indices)
            prof.step()
    prof.export_chrome_trace(str(path))
    return Path(path)
