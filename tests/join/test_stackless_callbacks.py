"""Without stacks, a callable given as a value is found by the names it is called with.

transformers' ``StoppingCriteriaList.__call__`` runs ``for criteria in self: is_done = is_done |
criteria(input_ids, scores, **kwargs)``, and ``masking_utils.and_mask`` runs ``mask(batch_idx,
head_idx, q_idx, kv_idx)`` for each mask function it was given. Neither name is bound to anything
the source says: the call was a block that may run any op, and the criteria's and masks' ops went to
its line. A call of a local name whose positional arguments are all names may now run the functions
(and ``__call__`` / ``forward`` methods) of its own file whose positional parameters are those names."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.join.package_source import line_in, origins_of
from tracer.api import explain_trace
from tracer.join.program import BY_LOCAL, CALL, ModulePrograms, callback_arguments
from tracer.join.stackless import STACKLESS

CRITERIA = """
import torch


class MaxLengthCriteria:
    def __init__(self, max_length):
        self.max_length = max_length

    def __call__(self, input_ids, scores, **kwargs):
        is_done = input_ids.shape[1] >= self.max_length
        return torch.full((input_ids.shape[0],), is_done, dtype=torch.bool)


class EosTokenCriteria:
    def __init__(self, eos_token_id):
        self.eos_token_id = torch.tensor([eos_token_id])

    def __call__(self, input_ids, scores, **kwargs):
        return torch.isin(input_ids[:, -1:], self.eos_token_id).any(dim=-1)


class CriteriaList(list):
    def __call__(self, input_ids, scores, **kwargs):
        is_done = torch.zeros((input_ids.shape[0],), dtype=torch.bool)
        for criteria in self:
            is_done = is_done | criteria(input_ids, scores, **kwargs)
        return is_done


def step(logits, input_ids, stopping):
    next_tokens = torch.argmax(logits, dim=-1)
    input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
    finished = stopping(input_ids, logits)
    return input_ids, finished
"""


def test_a_call_of_a_local_name_passes_its_arguments_names() -> None:
    programs = ModulePrograms(ast.parse(CRITERIA), STACKLESS.skip)
    line = next(
        line
        for line, name, node in programs.functions()
        if name == "__call__" and programs.owner_of_node(node) == "CriteriaList"
    )
    program = programs.program(line, "__call__")
    assert program is not None
    [call] = [p for p in program.points if p.kind == CALL and p.name == "criteria"]
    assert call.callee == BY_LOCAL and call.arguments == ("input_ids", "scores")
    assert callback_arguments(ast.parse("f(x)", mode="eval").body) == ()  # one name says too little
    assert callback_arguments(ast.parse("f(x, y + 1)", mode="eval").body) == ()  # not all names


def test_the_criteria_answer_in_their_own_lines(
    write_package, tmp_path: Path, profile_without_stacks, import_from_package
) -> None:
    import torch

    package = write_package("criteriapkg", {"criteria": CRITERIA})
    module = import_from_package(package, "criteriapkg.criteria")
    stopping = module.CriteriaList([module.MaxLengthCriteria(64), module.EosTokenCriteria(2)])
    logits, input_ids = torch.randn(2, 32), torch.zeros((2, 4), dtype=torch.long)
    trace = profile_without_stacks(lambda: module.step(logits, input_ids, stopping), tmp_path / "stop.json")
    analysis = explain_trace(trace, source=[package])
    isin = line_in(package, "criteria.py", "torch.isin(")
    full = line_in(package, "criteria.py", "torch.full(")
    found = {op: origins_of(analysis, op) for op in ("aten::isin", "aten::full")}
    assert found["aten::isin"] and found["aten::full"]
    for origin in found["aten::isin"]:
        assert (origin.file, origin.line) == ("criteriapkg/criteria.py", isin), origin.candidates
    for origin in found["aten::full"]:
        assert (origin.file, origin.line) == ("criteriapkg/criteria.py", full), origin.candidates
