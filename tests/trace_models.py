"""Small CPU models whose casts sit on known lines: the trace tests profile them and look for these lines.

Line numbers matter: tests find them by the marker comments (``# cast:NAME``), so edits stay safe.
"""

from __future__ import annotations

import re

import torch
from torch.profiler import record_function


class TwoCasts(torch.nn.Module):
    """Two `.to()` calls that differ only by line, a `.float()` beside a `.to()`, a cat and a store."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor, pool: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        a = x.to(torch.bfloat16)  # cast:first_to
        b = x.to(torch.bfloat16)  # cast:second_to
        c = a.float() + b.to(torch.float64).float()  # cast:float_beside_to
        with record_function("kv_gather"):
            pool_bf16 = pool.to(torch.bfloat16)  # cast:whole_pool
            kv = pool_bf16[idx]
        y = self.proj(c)  # cast:proj (not a cast: a module call, found in the source)
        both = torch.cat([y, kv.float()], dim=0)  # cast:cat
        pool[idx] = kv.to(pool.dtype)  # cast:store
        return both


class Stack(torch.nn.Module):
    """The same module, run as N layers: the origins must not multiply by N."""

    def __init__(self, layers: int = 3) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(TwoCasts() for _ in range(layers))

    def forward(self, x: torch.Tensor, pool: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        out = x
        for layer in self.layers:
            out = layer(x, pool, idx)
        return out


class Trained(torch.nn.Module):
    """A cast inside a model that trains: its backward (ToCopyBackward0) copies again."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.to(torch.float64)  # cast:trained
        return (self.proj(x) * wide.sum()).sum()


def profile_training_step(path: str) -> None:
    """Profile one forward + backward of `Trained` on CPU (with stacks) and write the trace."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = Trained()
    x = torch.randn(4, 16, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        model(x).backward()
    prof.export_chrome_trace(path)


def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(8, 32), torch.randn(64, 32, dtype=torch.float16), torch.arange(0, 16, 2)


def profile_stack(path: str, *, with_stack: bool, steps: int = 2, layers: int = 3) -> None:
    """Profile `steps` steps of `Stack` on CPU and write the Chrome trace to `path`."""
    from torch.profiler import ProfilerActivity, profile

    model = Stack(layers)
    x, pool, idx = inputs()
    with torch.no_grad():
        model(x, pool, idx)  # warm-up outside the profile
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=with_stack) as prof:
            for _ in range(steps):
                model(x, pool, idx)
                prof.step()
    prof.export_chrome_trace(path)


def marker_lines() -> dict[str, int]:
    """``{"first_to": 21, ...}``: the line of each ``# cast:NAME`` comment in this file."""
    marker = re.compile(r"# cast:(\w+)")
    lines = {}
    with open(__file__, encoding="utf-8") as handle:
        for number, text in enumerate(handle, 1):
            found = marker.search(text.rstrip())
            if found:
                lines[found[1]] = number
    return lines
