"""A workload for the recorder's own test: each torch call sits on a line marked ``# truth:NAME``.

Not a test module: tests/corpus/test_corpus_recorder.py records it and reads the truth back.
"""

from __future__ import annotations

import torch


def helper(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32)  # truth:helper


def work(x: torch.Tensor, step: int) -> torch.Tensor:
    y = x.float()  # truth:float
    if step % 2:
        y = y * 2  # truth:mul
    # fmt: off
    z = (
        y.sum(-1)  # truth:sum
        .to(torch.bfloat16)  # truth:to
    )
    # fmt: on
    return helper(z) + helper(y).mean()  # truth:add


def build(device: torch.device):
    x = torch.ones(3, 4, device=device, dtype=torch.float16)

    def step(i: int):
        return work(x, i)

    return step
