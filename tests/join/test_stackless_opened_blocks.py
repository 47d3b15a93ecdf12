"""Without stacks, a helper that its caller reaches past the inlining depth (or the size cap) answers
with the ops its caller runs around it.

A caller aligned with the window puts the hot op in the block of a helper's call that it did not splice
in: transformers' ``_sample`` splices its first helpers, then reaches the 600-point cap, and its stop
check and step update stay blocks. A block rewards the ops it holds less than lines that name them, and
the helper aligned alone fits only its own few ops, so a line elsewhere that names the same ops with a
little of the context won (``unfinished.max() == 0`` in transformers' assisted decoding took the stop
check's ``eq``). The caller's best block that holds the hot op is opened: the helper spliced in at that
call alone, its lines judged with their caller's context. Here the check sits three calls below the
loop, past the depth of two."""

from __future__ import annotations

import pytest

from tests.join.package_source import assert_ranked_first, line_of, origins_of
from tracer.api import explain_trace

LOOP = """
import torch
from torch import nn


class Check:
    def run(self, unfinished, tokens):
        unfinished = unfinished & (tokens != 3)
        return unfinished, bool(unfinished.max() == 0)


class Stage:
    def __init__(self):
        self.check = Check()

    def run(self, unfinished, tokens):
        return self.check.run(unfinished, tokens)


class Step:
    def __init__(self):
        self.stage = Stage()

    def run(self, unfinished, tokens):
        return self.stage.run(unfinished, tokens)


class Decoder(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.head = nn.Linear(width, 8)
        self.step = Step()

    def forward(self, x, steps):
        unfinished = torch.ones(x.shape[0], dtype=torch.long)
        for _ in range(steps):
            logits = self.head(torch.tanh(x))
            tokens = logits.argmax(-1)
            unfinished, done = self.step.run(unfinished, tokens)
            if done:
                break
            x = x * 0.5
        return unfinished


def assisted(draft, unfinished):
    tokens = torch.tanh(draft).argmax(-1)
    unfinished = unfinished & (tokens != 3)
    finished = unfinished.max() == 0
    return unfinished, finished
"""


@pytest.fixture(scope="module")
def loop_analysis(write_package, tmp_path_factory, profile_without_stacks, import_from_package):
    import torch

    package = write_package("looppkg", {"loop": LOOP})
    decoder = import_from_package(package, "looppkg.loop").Decoder(16)
    x = torch.randn(2, 16)
    trace = profile_without_stacks(lambda: decoder(x, 4), tmp_path_factory.mktemp("loop") / "loop.json")
    return explain_trace(trace, source=[package])


def test_the_stop_check_past_the_depth_answers_for_its_eq(loop_analysis) -> None:
    line = line_of(LOOP, "bool(unfinished.max() == 0)")
    assert_ranked_first(origins_of(loop_analysis, "aten::eq"), "looppkg/loop.py", line)
