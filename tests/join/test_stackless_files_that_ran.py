"""Without stacks, which file ran is decided by the whole trace: a MoE model whose attention and
norms are the code of many dense models (transformers' Mixtral, and the ~100 Llama-like files around
it) is told by its router, which only its own file fits. The files that together fit the windows
(`_covering`: the router's windows pull the MoE file in) are aligned with every window. And the
``ModelOutput(...)`` a model returns (a ``@dataclass``) runs no op, so the ``lm_head`` linear after it
answers in the ``lm_head`` line, not in the constructor's (profiled on CPU without stacks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.join.model_files import CAUSAL_LM, DENSE_MLP, HEADER_AND_NORM, OUTPUTS
from tests.join.package_source import line_in
from tracer.api import explain_trace
from tracer.join.stackless import COVER_TIED, _covering

# Code every model of the package shares, as transformers' copies do (the names differ)
COMMON = (
    HEADER_AND_NORM
    + """

class {P}Attention(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.heads = 2
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        shape = (*x.shape[:-1], self.heads, -1)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        out = nn.functional.scaled_dot_product_attention(q, k, v{attention_argument})
        return self.o_proj(out.transpose(1, 2).reshape(x.shape))


class {P}Layer(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.input_norm = {P}Norm(hidden)
        self.attention = {P}Attention(hidden)
        self.post_norm = {P}Norm(hidden)
        self.mlp = {P}{mlp}(hidden)

    def forward(self, x):
        x = x + self.attention(self.input_norm(x))
        return x + self.mlp(self.post_norm(x))


class {P}Model(nn.Module):
    def __init__(self, hidden, layers):
        super().__init__()
        self.layers = nn.ModuleList([{P}Layer(hidden) for _ in range(layers)])
        self.norm = {P}Norm(hidden)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return ModelOutput(hidden=self.norm(x))
"""
    + CAUSAL_LM
)
MOE_BLOCK = """

class {P}Experts(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.router = nn.Linear(hidden, 4, bias=False)
        self.experts = nn.ModuleList([nn.Linear(hidden, hidden, bias=False) for _ in range(4)])

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        scores = torch.softmax(self.router(flat), dim=-1)
        weights, chosen = torch.topk(scores, 2, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(flat)
        for index, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == index)
            out.index_add_(0, rows, expert(flat[rows]) * weights[rows, slot, None])
        return out.reshape(x.shape)
"""
DENSE_MODELS = 14  # more than the files one window's spellings pick (`MAX_FILES`)
ACTIVATIONS = ("silu", "gelu", "relu", "mish", "elu", "selu", "softplus")


@pytest.fixture(scope="module")
def package(write_package) -> Path:
    modules = {"outputs": OUTPUTS}
    for i in range(DENSE_MODELS):
        prefix, activation = f"Dense{i}", ACTIVATIONS[i % len(ACTIVATIONS)]
        mlp = DENSE_MLP.format(P=prefix, activation=activation)
        modules[f"dense{i:02d}"] = COMMON.format(P=prefix, mlp="MLP", attention_argument="") + mlp
    # the MoE model's attention differs by one argument (Mixtral's ``sliding_window``): not a copy
    moe = COMMON.format(P="Moe", mlp="Experts", attention_argument=", scale=0.25") + MOE_BLOCK.format(P="Moe")
    return write_package("ktmoepkg", {**modules, "moe": moe})


@pytest.fixture(scope="module")
def analysis(package: Path, tmp_path_factory, profile_without_stacks, import_from_package):
    import torch

    torch.manual_seed(0)
    model, x = import_from_package(package, "ktmoepkg.moe").MoeForCausalLM(), torch.randn(1, 6, 16)
    out = tmp_path_factory.mktemp("files_that_ran_trace") / "moe.json"
    return explain_trace(profile_without_stacks(lambda: model(x), out), source=[package])


def _linear_origins(analysis) -> list:
    return [f.origin for f in analysis.findings if f.origin.ops and f.origin.ops[0] == "aten::linear"]


def _window(*files: str) -> set[str]:
    """The files a window fits (`_fits`)."""
    return set(files)


def test_the_files_that_together_fit_the_windows() -> None:
    """Dense files fit the shared code's windows, each more than the MoE file, which alone fits the
    router's: after the dense file that fits the most, the MoE file is picked (ranking by windows fit,
    it came last); up to `COVER_TIED` dense files tied with the first come with it (copies fit alike)."""
    dense = [f"dense{i}.py" for i in range(8)]
    shared = [_window(*dense, "moe.py") for _ in range(20)]
    generic = [_window(*dense) for _ in range(6)]  # common code the MoE model did not run
    router = [_window("moe.py") for _ in range(4)]
    picked = _covering([*shared, *generic, *router])
    assert picked == [*dense[:COVER_TIED], "moe.py"]
    assert _covering([*shared, *generic, _window("moe.py")]) == dense[:COVER_TIED]  # too few
    two = [_window("moe.py"), _window("moe.py")]  # OLMo's own LayerNorm, in a generate() trace
    assert _covering([*shared, *generic, *two]) == [*dense[:COVER_TIED], "moe.py"]


def test_files_tied_on_new_windows_go_by_all_the_windows_they_fit() -> None:
    """A model's own file that 2 windows no earlier pick fits, tied with as many files of other code
    that fit those 2 windows and no more: the model's file, which most windows fit in all, is picked
    (by name it came last, past `COVER_TIED`: Phi-3's file, in a `generate()` trace)."""
    dense = [f"dense{i}.py" for i in range(COVER_TIED)]
    shared = [_window(*dense, "zmodel.py") for _ in range(20)]
    generic = [_window(*dense) for _ in range(6)]
    others = [f"aa{i}.py" for i in range(COVER_TIED)]
    own = [_window("zmodel.py", *others) for _ in range(2)]
    assert _covering([*shared, *generic, *own]) == [*dense, "zmodel.py", *others[: COVER_TIED - 1]]


def test_a_model_whose_own_code_fits_two_windows_is_found(nostack_scores) -> None:
    """transformers' OLMo `generate()` on CPU, every frame stripped: OLMo's file holds copies of
    Llama's code but its own LayerNorm, which 2 windows fit and no file fit before it. With 3 windows
    asked of a pick, its file was never aligned with every window and its copies' files took its lines:
    42.9% of the op time ranked first (85.3% on a copy's line)."""
    scores = nostack_scores("transformers/torch2.13/olmo_generate")
    assert scores.rank1 >= 0.9
    assert scores.buckets[">=0.9"].answered_ns == 0  # still a ranking


def test_the_moe_files_attention_answers_not_a_dense_copys(analysis, package: Path) -> None:
    q_proj = line_in(package, "moe.py", "q = self.q_proj(x)")
    k_proj = line_in(package, "moe.py", "k = self.k_proj(x)")
    v_proj = line_in(package, "moe.py", "v = self.v_proj(x)")
    answered = {(o.file, o.line) for o in _linear_origins(analysis)}
    for line in (q_proj, k_proj, v_proj):
        assert ("ktmoepkg/moe.py", line) in answered, sorted(answered)
    dense = sorted(a for a in answered if a[0].startswith("ktmoepkg/dense"))
    assert not dense, dense


def test_the_lm_head_answers_past_a_returned_dataclass(analysis, package: Path) -> None:
    lm_head = line_in(package, "moe.py", "return self.lm_head(hidden)")
    returned = line_in(package, "moe.py", "return ModelOutput(")
    answered = {(o.file, o.line) for o in _linear_origins(analysis)}
    assert ("ktmoepkg/moe.py", lm_head) in answered, sorted(answered)
    assert ("ktmoepkg/moe.py", returned) not in answered
    for origin in _linear_origins(analysis):
        assert origin.answer == "ranked" and origin.confidence < 0.5  # still a ranking
