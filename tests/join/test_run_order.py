"""What source text runs, in order, read from text alone (`run_order`), and files ranked by running
a window's ops in that order (`FunctionSpellings.best_in_order`): picking files for the no-stack
alignment where every file spells the same names (issue 15)."""

from __future__ import annotations

import textwrap

from tracer.join.run_order import STORE, run_order
from tracer.join.spelling import FunctionSpellings, spellings


def _order(source: str) -> list[str]:
    return run_order(textwrap.dedent(source))


def test_a_call_runs_when_its_parenthesis_closes() -> None:
    # the receiver, then the arguments, then the call: q_proj, view, q_norm, transpose
    assert _order("q = self.q_norm(self.q_proj(x).view(shape)).transpose(1, 2)\n") == [
        "q_proj",
        "view",
        "q_norm",
        "transpose",
    ]


def test_a_binary_operator_runs_when_its_right_operand_ends() -> None:
    assert _order("y = x * torch.rsqrt(v + eps)\n") == ["+", "rsqrt", "*"]
    assert _order("y = self.weight * x.to(dtype)\n") == ["to", "*"]
    assert _order("y = a * b + c\n") == ["*", "+"]
    assert _order("y = x ** 2 @ w\n") == ["pow", "@"]


def test_what_runs_nothing_is_left_out() -> None:
    source = """
    # a comment: f(x) * g(y)
    @torch.no_grad()
    def forward(self, x, *args, **kwargs) -> torch.Tensor:
        '''A docstring that calls h(x).'''
        if (x is None):
            return -x
        name = f"{x(1)}" + "s(2)"
        return x.view(-1, *shape)
    """
    # the decorator's call, not the def's name nor ``if (``; unary ``-`` and ``*``, strings, comments
    assert _order(source) == ["no_grad", "+", "view"]


def test_a_store_into_a_subscript_runs_after_its_value() -> None:
    assert _order("cache[loc] = k.to(dtype)\nx[i] == y\n") == ["to", STORE]


def test_a_store_runs_after_all_of_its_value() -> None:
    assert _order("out[i] = a * b + c\n") == ["*", "+", STORE]


def test_python_at_work_runs_no_op() -> None:
    # Python's own callables and math's functions work on Python values; a tensor's abs is an op
    source = """
    n = len(x) - 1
    y = x * torch.tanh(x * math.sqrt(d)) + isinstance(x, int)
    z = abs(y)
    """
    assert _order(source) == ["-", "*", "tanh", "*", "+", "abs"]


def _groups(*ops: str) -> list[frozenset[str]]:
    return [frozenset(spellings(op)) for op in ops]


NORM = """
class {P}Norm(nn.Module):
    def forward(self, x):
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))
"""
# both attentions call the same names; only the first normalises the heads right after the linear
ATTENTION = """
class {P}Attention(nn.Module):
    def __init__(self, config):
        self.q_proj = nn.Linear(config.hidden, config.hidden)
        self.k_proj = nn.Linear(config.hidden, config.hidden)
        self.q_norm = {P}Norm(config.head_dim)
        self.k_norm = {P}Norm(config.head_dim)

    def forward(self, x):
        {body}
        return q @ k.transpose(-1, -2)
"""
HEADS_NORMED = "q = self.q_norm(self.q_proj(x).view(s)).transpose(1, 2); k = self.k_norm(self.k_proj(x))"
NORMED_LATER = (
    "q = self.q_proj(x).view(s).transpose(1, 2); k = self.k_proj(x); q, k = self.q_norm(q), self.k_norm(k)"
)


def test_files_rank_by_running_the_ops_in_their_order() -> None:
    """Qwen3's attention among ~100 decoder files that spell the same names: a window of a linear,
    then a norm's ops (``to pow mean add rsqrt mul``), then a linear again, is run in that order by
    the file that normalises each projection as it comes, and only one or two calls apart by the other."""
    texts = [
        NORM.format(P=p) + ATTENTION.format(P=p, body=body)
        for p, body in (("Later", NORMED_LATER), ("Heads", HEADS_NORMED))
    ]
    functions = FunctionSpellings(texts)
    window = _groups("aten::linear", "aten::to", "aten::pow", "aten::mean", "aten::add", "aten::rsqrt")
    window += _groups("aten::mul", "aten::mul", "aten::linear", "aten::to", "aten::pow")
    scores = functions.best_in_order(window)
    assert scores[1][0] > scores[0][0]
    assert scores[1][1] == texts[1].splitlines().index("    def forward(self, x):", 10) + 1  # its forward
    # by names alone, the two tie
    by_names = functions.best_functions(window, frozenset(spellings("aten::linear")))
    assert by_names[0][0] == by_names[1][0]
