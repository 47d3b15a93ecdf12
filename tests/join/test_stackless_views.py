"""Without stacks, a view op answers only where the source can take that view.

Two mechanisms failed on code nobody here wrote:
- A truth test (``... if isinstance(k, int) else k``, ``if t:``) was allowed to run any view op, so
  Mixtral's ``aten::alias`` of ``hidden_states[:, slice_indices, :]`` tied with the line before it,
  the ``slice(...) if isinstance(...)`` that takes no view, and the line before won (transformers'
  ``*ForCausalLM.forward``). A test now runs only what reading a value runs (``is_nonzero``, ``item``).
- A bounded slice was said to run ``aten::slice`` only; one spanning its whole dim runs
  ``aten::alias`` (SGLang's rotary ``key[..., : self.rotary_dim]`` where the rotary dim is the head's).
"""

from __future__ import annotations

import pytest

from tests.join.package_source import line_of
from tracer.api import explain_trace
from tracer.join.stackless import STACKLESS
from tracer.join.tokens import Cat, token_of

HEAD = """
import torch
from torch import nn


class Head(nn.Module):
    def __init__(self, width, vocab):
        super().__init__()
        self.lm_head = nn.Linear(width, vocab, bias=False)

    def forward(self, hidden_states, logits_to_keep=0):
        hidden_states = torch.tanh(hidden_states * 2) + 1
        slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        return self.lm_head(hidden_states[:, slice_indices, :])


class Rotary(nn.Module):
    def __init__(self, head_size, rotary_dim):
        super().__init__()
        self.head_size = head_size
        self.rotary_dim = rotary_dim

    def forward(self, key):
        key = torch.sigmoid(key)
        key_rot = key[..., : self.rotary_dim]
        return torch.cos(key_rot) * 2
"""


@pytest.fixture(scope="module")
def alias_lines(write_package, tmp_path_factory, profile_without_stacks, import_from_package):
    """The lines the no-stack ranking puts first for `aten::alias`, in a trace of one module."""
    import torch

    package = write_package("viewspkg", {"head": HEAD})
    module = import_from_package(package, "viewspkg.head")
    runs = {
        "Head": (module.Head(16, 32), torch.randn(2, 3, 16)),
        "Rotary": (module.Rotary(8, 8), torch.randn(3, 2, 8)),  # the rotary dim is the head's
    }

    def lines(name: str) -> set[tuple[str | None, int | None]]:
        layer, x = runs[name]
        trace = profile_without_stacks(lambda: layer(x), tmp_path_factory.mktemp("views") / f"{name}.json")
        analysis = explain_trace(trace, source=[package])
        found = [f.origin for f in analysis.findings if f.origin.ops and f.origin.ops[0] == "aten::alias"]
        assert found and all(o.answer == "ranked" and o.confidence < 0.5 for o in found)  # rankings
        return {(o.file, o.line) for o in found}

    return lines


def test_the_alias_of_a_subscript_answers_in_its_line_not_in_the_test_before(alias_lines) -> None:
    assert alias_lines("Head") == {("viewspkg/head.py", line_of(HEAD, "hidden_states[:, slice_indices, :]"))}


def test_a_slice_spanning_its_dim_runs_alias(alias_lines) -> None:
    assert alias_lines("Rotary") == {("viewspkg/head.py", line_of(HEAD, "key[..., : self.rotary_dim]"))}


def test_a_truth_test_runs_no_view() -> None:
    import ast

    from tracer.join.program import VIEWS, ModulePrograms

    programs = ModulePrograms(ast.parse(HEAD), STACKLESS.skip)
    line = line_of(HEAD, "slice_indices = slice(")
    forward = next(at for at, name, _ in programs.functions() if name == "forward" and at < line)
    points = [p for p in programs.program(forward, "forward").points if p.kind == VIEWS]
    test = next(p for p in points if p.line == line)
    subscript = next(p for p in points if p.line == line + 1)
    alias, truth = token_of("aten::alias", Cat.CPU_OP), token_of("aten::is_nonzero", Cat.CPU_OP)
    assert STACKLESS.match(test, alias) is None and STACKLESS.match(test, truth) is not None
    assert STACKLESS.match(subscript, alias) is not None
