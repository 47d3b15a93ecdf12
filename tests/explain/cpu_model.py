"""A small multi-layer CPU model with a deliberate whole-buffer cast, profiled for real by the tests.

Each layer casts its whole FP8 key buffer to bf16 and then keeps only the live rows, the founding
case in miniature (SGLang's ``get_key_buffer(layer_id).to(q.dtype)``).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

POOL_ROWS = 4096  # slots per layer in the KV pool
LIVE_ROWS = 64  # rows the layer actually reads
HEAD_DIM = 64
HIDDEN = 64


class KVPool:
    """One FP8 key buffer of shape (POOL_ROWS, 1, HEAD_DIM) per layer."""

    def __init__(self, layers: int) -> None:
        self.buffers = [torch.randn(POOL_ROWS, 1, HEAD_DIM).to(torch.float8_e4m3fn) for _ in range(layers)]

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.buffers[layer_id]


class Layer(nn.Module):
    def __init__(self, layer_id: int, pool: KVPool) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.pool = pool
        self.proj = nn.Linear(HIDDEN, HEAD_DIM, bias=False)

    def forward(self, hidden: torch.Tensor, kv_indices: torch.Tensor) -> torch.Tensor:
        keys = self.pool.get_key_buffer(self.layer_id).to(hidden.dtype)  # the whole-buffer cast
        keys = keys[kv_indices]
        query = self.proj(hidden)
        scores = torch.einsum("bd,nd->bn", query, keys.squeeze(1))
        return hidden + scores.float().softmax(-1).to(hidden.dtype) @ keys.squeeze(1)


class Model(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.pool = KVPool(layers)
        self.layers = nn.ModuleList(Layer(i, self.pool) for i in range(layers))
        self.norm = nn.RMSNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, 256, bias=False)

    def forward(self, hidden: torch.Tensor, kv_indices: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            with record_function(f"model.layers.{i}"):
                hidden = layer(hidden, kv_indices)
        return self.head(self.norm(hidden)).argmax(-1)


def cast_line() -> int:
    """The line of the whole-buffer cast in this file."""
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, text in enumerate(lines, start=1) if "# the whole-buffer cast" in text)


def profile_model(
    out: Path, *, layers: int = 4, steps: int = 3, with_stack: bool = True, profiler_steps: bool = True
) -> Path:
    """Run `steps` forward passes under torch.profiler (CPU) and export the Chrome trace to `out`.

    With `profiler_steps`, a schedule makes the profiler mark each pass as ``ProfilerStep#N``.
    """
    torch.manual_seed(0)
    model = Model(layers).to(torch.bfloat16)
    hidden = torch.randn(1, HIDDEN, dtype=torch.bfloat16)
    kv_indices = torch.randperm(POOL_ROWS)[:LIVE_ROWS]
    options = {"schedule": schedule(wait=0, warmup=1, active=steps, repeat=1)} if profiler_steps else {}
    passes = steps + 1 if profiler_steps else steps
    with torch.inference_mode():
        model(hidden, kv_indices)  # warm up outside the profiler
        with profile(
            activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=with_stack, **options
        ) as prof:
            for _ in range(passes):
                model(hidden, kv_indices)
                if profiler_steps:
                    prof.step()
    prof.export_chrome_trace(str(out))
    return out
