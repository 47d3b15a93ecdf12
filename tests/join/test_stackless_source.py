"""Without stacks, what the source says decides which functions a window of ops is aligned with: the
files picked by what their functions spell (`tracer/join/spelling.py`), the classes and helpers a
file imports from another module (GPT-2's ``Conv1D`` from ``transformers/pytorch_utils.py``), and
which operators run no op (numbers, sizes and dtypes by their annotations and names)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from tracer.join.program import OPERATOR, ModulePrograms
from tracer.join.spelling import STORE, FunctionSpellings, spelled, spellings
from tracer.join.stackless import STACKLESS


def test_spellings_of_in_place_ops_and_subscript_stores() -> None:
    assert spellings("aten::copy_")[:2] == ("copy", "copy_")  # ``x.copy_(y)`` spells ``copy_``
    assert STORE in spellings("aten::index_put_")
    # a store into a slice runs aten::copy_ (``output[start:end] = out``: SGLang's torch-native
    # backend, picked 230th of 4,378 files without it), a scalar one aten::fill_
    assert STORE in spellings("aten::copy_") and STORE in spellings("aten::fill_")
    assert "[" in spellings("aten::masked_select")  # ``x[mask]``
    assert STORE in spelled("cache[loc] = k\n") and STORE not in spelled("if a[0] == b:\n    pass\n")


def test_a_big_file_is_picked_by_the_function_that_spells_the_window() -> None:
    """At file level a big module spells every common name and loses to a small file on BM25's length
    norm; by function, the one function that casts, views and stores through its helper wins."""
    names = ["view", "to", "reshape", "permute", "float", "half", "flatten", "squeeze"] * 6
    unrelated = "".join(
        f"def unrelated_{i}(x):\n    return x.{name}(1) + x.sum() * x.mean()\n\n"
        for i, name in enumerate(names)
    )
    pool = unrelated + textwrap.dedent(
        """
        def _store(cache, loc, k):
            cache[loc] = k

        def set_kv(self, loc, k):
            k = k.to(self.dtype).view(self.store_dtype)
            _store(self.cache, loc, k)
        """
    )
    small = "def cast(x):\n    return x.to(torch.float32).view(-1)\n"
    index = FunctionSpellings([pool, small])
    groups = [frozenset(spellings(op)) for op in ("aten::to", "aten::index_put_")]
    scores = _file_scores(index, groups, "aten::index_put_")
    assert scores[0] > scores.get(1, 0.0)


def _window_scores(texts: list[str], ops: list[str], hot: str) -> dict[int, float]:
    groups = [g for op in ops if (g := frozenset(spellings(op)))]
    return _file_scores(FunctionSpellings(texts), groups, hot)


def _file_scores(index: FunctionSpellings, groups: list, hot: str) -> dict[int, float]:
    """Per file, the score of its best function (`FunctionSpellings.best_functions`)."""
    return {
        file: score for file, (score, *_) in index.best_functions(groups, frozenset(spellings(hot))).items()
    }


def test_a_module_attribute_call_spells_what_the_module_runs() -> None:
    """``self.q_norm(self.q_proj(x))`` with ``self.q_norm = RMSNorm(...)`` built from a class of the
    same file and ``self.q_proj = nn.Linear(...)``: the forward spells the norm's ops and the Linear
    (Qwen3's attention, whose window holds its q/k norms' ops, scored as a function spelling neither)."""
    attention = textwrap.dedent(
        """
        class Attention(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.q_proj = nn.Linear(config.hidden, config.hidden, bias=False)
                self.q_norm = {norm}(config.head_dim)

            def forward(self, x):
                return self.q_norm(self.q_proj(x).view(shape)).transpose(1, 2)
        """
    )
    norm = textwrap.dedent(
        """
        class RMSNorm(nn.Module):
            def forward(self, x):
                return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))
        """
    )
    builds_here = norm + attention.format(norm="RMSNorm")
    imported = "from .norms import ImportedNorm\n" + attention.format(norm="ImportedNorm")
    helper_only = norm + "def project(x, w):\n    return x @ w\n"
    ops = ["aten::linear", "aten::view", "aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"]
    scores = _window_scores([builds_here, imported, helper_only], ops, "aten::linear")
    assert scores[0] > max(scores.get(1, 0.0), scores.get(2, 0.0))


def test_a_private_op_is_spelled_with_its_underscore() -> None:
    """``aten::_grouped_mm`` is called as ``torch._grouped_mm(...)`` (transformers' MoE experts): the
    op's name with its underscore is one of its spellings, so the experts' helper holds it."""
    assert "_grouped_mm" in spellings("aten::_grouped_mm")
    assert spellings("aten::copy_")[:2] == ("copy", "copy_")  # a trailing underscore: in place, as before
    experts = textwrap.dedent(
        """
        def _grouped_linear(x, weight, offs):
            return torch._grouped_mm(x.to(weight.dtype), weight, offs=offs)

        def experts_forward(self, x, ids):
            counts = torch.histc(ids.float(), bins=self.num_experts)
            offs = torch.cumsum(counts, dim=0)
            return _grouped_linear(self.act_fn(_grouped_linear(x, self.up, offs)), self.down, offs)
        """
    )
    dense = "def route(self, ids):\n    return torch.cumsum(torch.histc(ids.float(), bins=8), dim=0)\n"
    ops = ["aten::histc", "aten::cumsum", "aten::_grouped_mm", "aten::silu", "aten::_grouped_mm"]
    scores = _window_scores([experts, dense], ops, "aten::_grouped_mm")
    assert scores[0] > scores.get(1, 0.0)


def _operators(source: str) -> list[str]:
    programs = ModulePrograms(ast.parse(textwrap.dedent(source)), STACKLESS.skip)
    line, name, _ = next(f for f in programs.functions() if f[1] == "f")
    program = programs.program(line, name)
    assert program is not None
    return [p.name for p in program.points if p.kind == OPERATOR]


def test_numbers_sizes_and_dtypes_run_no_operator() -> None:
    found = _operators(
        """
        def f(self, x, layer_id: int, scale: Optional[float] = None, dtype: "torch.dtype | None" = None):
            if x.dtype != self.store_dtype:
                x = x.to(self.store_dtype)
            index = layer_id - 1
            limit = self.size + self.page_size
            rows = self.num_heads * self.head_dim
            return x * 2
        """
    )
    assert found == ["aten::mul"]  # only the tensor's


def test_arithmetic_on_sizes_is_scalar_like() -> None:
    """Arithmetic in the arguments of a call that takes sizes, and in a slice's bounds, is on ints:
    skipping it costs what a number's does (SGLang's ``forward_decode`` paid 0.6 for each)."""
    source = """
        def f(self, q, layer, x, block, j):
            q = q.reshape(-1, layer.tp_q_head_num * layer.qk_head_dim)
            o = q.new_empty((q.shape[0], layer.heads * layer.v_head_dim))
            tile = x[j * block : (j + 1) * block]
            if layer.tp_q_head_num != layer.tp_k_head_num:
                q = q * layer.scale
            return tile + o
        """
    programs = ModulePrograms(ast.parse(textwrap.dedent(source)), STACKLESS.skip)
    program = programs.program(*next((line, name) for line, name, _ in programs.functions() if name == "f"))
    assert program is not None
    found = [(p.line, p.name, p.scalar_like) for p in program.points if p.kind == OPERATOR]
    # line 3: ``*_num`` and ``*_dim`` names hold numbers, so that product runs no op at all; so does
    # the comparison on line 6
    assert found == [
        (4, "aten::mul", True),
        (5, "aten::mul", True),
        (5, "aten::add", True),
        (5, "aten::mul", True),
        (7, "aten::mul", False),  # a tensor's, by an attribute of unknown kind
        (8, "aten::add", False),
    ]


@pytest.fixture(scope="module")
def gpt2_forward(nostack_scores):
    return nostack_scores("transformers/torch2.13/gpt2_forward")


def test_gpt2s_conv1d_imported_from_another_module(gpt2_forward) -> None:
    """``self.c_attn = Conv1D(...)``, ``from ...pytorch_utils import Conv1D``: the attention's ops
    reach ``torch.addmm`` in ``Conv1D.forward`` (two files define a ``Conv1D``; the import says
    which). Before: 0% of the op time ranked first, 12.7% in the top 3; what is left is mostly
    which copy (DecisionTransformer's file holds GPT-2's blocks under other class names)."""
    assert gpt2_forward.rank1 >= 0.2
    assert gpt2_forward.top3 >= 0.4
    assert gpt2_forward.buckets[">=0.9"].answered_ns == 0  # still a ranking
