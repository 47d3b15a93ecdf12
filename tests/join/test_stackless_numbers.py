"""Without stacks, what runs no op must cost nothing to skip, and what a helper names must be ops.

Three mechanisms, each checked on its own and on the corpus trace it fixed:

- Attributes a class (and its bases in the module) only ever sets to numbers are numbers:
  SGLang's ``self.k_buffer[layer_id - self.start_layer]`` (``self.start_layer = start_layer if
  start_layer is not None else 0``) runs no ``aten::sub``, nor does ``layer.layer_id - ...`` where
  ``layer: RadixAttention`` and ``RadixAttention`` sets ``self.layer_id`` from an ``int``. Each such
  subtraction cost a skipped op, and ``MHATokenToKVPool.set_kv_buffer`` lost every window of the
  kv_pool trace to functions elsewhere in the file (rank 1: 0%).
- The ops a helper names (a helper past the splicing depth is a block worth them) leave out Python
  arithmetic and subscripts of sizes: ``x.numel() // x.shape[-1] * weight.shape[0]`` names no
  ``aten::mul``, ``aten::select``. They made SGLang's linear helper a block that took the slices
  and multiplications of every activation window once its method was resolved (rank 1: 75% -> 0%).
- ``x.contiguous()`` of a contiguous tensor records nothing: skipping it costs what a call of no op
  costs.
"""

from __future__ import annotations

import ast

from tracer.join.program import CALL, OPERATOR, CallPoint, ModulePrograms, runs_on_numbers
from tracer.join.stackless import STACKLESS, runs_a_block, runs_no_op

POOL = """
class Pool:
    def __init__(self, start_layer: int | None = None, first: int | None = None, rows: int = 4):
        self.start_layer = start_layer if start_layer is not None else 0
        self.first = first or 0
        self.rows = rows
        self.count = 0
        self.buffers = []

    def bump(self):
        self.count += 1


class KeyPool(Pool):
    def get(self, layer_id: int):
        return self.buffers[layer_id - self.start_layer] * (self.rows - self.first)

    def scaled(self, layer_id: int):
        return self.buffers[0] - self.count
"""


def _operators(programs: ModulePrograms, line: int, name: str) -> list[tuple[str, bool]]:
    program = programs.program(line, name)
    assert program is not None
    return [(p.name, p.scalar_like) for p in program.points if p.kind == OPERATOR]


def test_attributes_only_set_to_numbers_are_numbers() -> None:
    programs = ModulePrograms(ast.parse(POOL), STACKLESS.skip)
    assert programs.scalar_attributes("KeyPool") == {
        "self.start_layer",
        "self.first",
        "self.rows",
        "self.count",
    }
    get = next(line for line, name, _ in programs.functions() if name == "get")
    scaled = next(line for line, name, _ in programs.functions() if name == "scaled")
    # the index and the factor are numbers: only the tensor product is an op
    assert _operators(programs, get, "get") == [("aten::mul", False)]
    # a tensor minus a number still runs aten::sub
    assert _operators(programs, scaled, "scaled") == [("aten::sub", False)]


# Bloom's MLP (transformers): a tensor-parallel branch on a config value. Its comparison ran no
# op, but was taken for a tensor's ``aten::gt``: skipping it cost every Bloom window 0.6 against a
# ViT copy's MLP, which took Bloom's MLP lines once ViT's file was aligned with them.
CONFIGURED = """
class MLP:
    def __init__(self, config):
        self.pretraining_tp = config.pretraining_tp
        self.dense = Linear(config.hidden_size, 4 * config.hidden_size)

    def forward(self, x, residual):
        x = self.dense(x)
        if self.pretraining_tp > 1 and self.config.slow_but_exact > 0:
            x = x * (self.config.hidden_size / self.pretraining_tp)
        if self.text_config.scale * 2 > x:
            x = x + 1
        return x + residual
"""


def test_what_a_config_holds_is_a_python_value() -> None:
    programs = ModulePrograms(ast.parse(CONFIGURED), STACKLESS.skip)
    assert "self.pretraining_tp" in programs.scalar_attributes("MLP")
    forward = next(line for line, name, _ in programs.functions() if name == "forward")
    # config values compared or combined run nothing; a tensor compared with one still runs aten::gt
    assert [name for name, _ in _operators(programs, forward, "forward")] == [
        "aten::mul",
        "aten::gt",
        "aten::add",
        "aten::add",
    ]


RAISING = """
def seq_length(layers, index):
    if index != 0:
        raise ValueError(f"layer {index} tracks no length")
    try:
        return layers[index].shape[0]
    except IndexError:
        raise RuntimeError("no layer") from None
"""


def test_raising_a_builtin_exception_runs_no_op() -> None:
    programs = ModulePrograms(ast.parse(RAISING), STACKLESS.skip)
    line = next(line for line, name, _ in programs.functions() if name == "seq_length")
    program = programs.program(line, "seq_length")
    assert program is not None
    raised = [p for p in program.points if p.kind == CALL and p.name in ("ValueError", "RuntimeError")]
    # (a block that may run any op took the generate loop's ``aten::eq`` into Cache.get_seq_length)
    assert len(raised) == 2 and all(runs_no_op(p) and not runs_a_block(p) for p in raised)


def test_python_arithmetic_names_no_op() -> None:
    def operator(text: str) -> ast.BinOp:
        node = ast.parse(text, mode="eval").body
        assert isinstance(node, ast.BinOp)
        return node

    assert runs_on_numbers(operator("x.numel() // x.shape[-1]"))
    assert runs_on_numbers(operator("len(xs) * 2"))
    assert not runs_on_numbers(operator("x * 2"))
    assert not runs_on_numbers(operator("x.view(x.shape[0], -1) * y"))


def test_a_contiguous_tensor_records_no_contiguous_op() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(4, 4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        x.contiguous()
        x.t().contiguous()
    names = [e.name for e in prof.events()]
    assert names.count("aten::contiguous") == 1  # only the transposed one copied
    point = CallPoint(1, 0, CALL, "contiguous", callee="attribute")
    assert STACKLESS.skip(point) <= 0.05


def test_the_kv_pool_writes_answer_in_set_kv_buffer(nostack_scores) -> None:
    for torch_version in ("torch2.13", "torch2.14"):
        assert nostack_scores(f"sglang/{torch_version}/kv_pool").rank1 >= 0.6  # was 0.0


def test_activations_keep_their_lines_beside_a_resolved_linear_helper(nostack_scores) -> None:
    assert nostack_scores("sglang/torch2.13/activations").rank1 >= 0.7
    assert nostack_scores("sglang/torch2.14/activations").rank1 >= 0.7
