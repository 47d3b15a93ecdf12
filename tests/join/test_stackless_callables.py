"""Without stacks, what a call of a callable the source builds or is handed runs:

- a layer built from a table of classes runs the forward of each class the table holds: transformers'
  Falcon, GPT-J and GPT-Neo build their attention as
  ``FALCON_ATTENTION_CLASSES[config._attn_implementation](config, layer_idx)``, and a decoder layer's
  ``self.self_attention(...)`` bound to nothing was a block of unknown ops that absorbed the ops of
  the layer's attention (the hold-out's Falcon forward answered 2.9% of its time, ``FalconLinear``'s
  ``input @ self.weight.T``, at the decoder layer's call of its attention);
- what a function returns when it returns a closure it defines (``and_masks(...)`` returns
  ``and_mask``), and a parameter's default (``mask_function: Callable = causal_mask_function``);
- an operator on parameters annotated ``int`` may run an op: the annotation is a hint
  (``causal_mask_function``'s ``kv_idx <= q_idx`` runs ``aten::le`` on tensors; its ``le`` was
  answered in a sliding window's mask, ``abs(q_idx - kv_idx) <= sliding_window``).

Run end to end on a real trace made here: a tiny ``FalconForCausalLM`` forward of a left-padded
batch (its mask made by ``and_masks(causal_mask_function, padding_mask_function(...))``), profiled on
CPU without stacks (and with stacks for the truth), the source a folder of the installed
transformers' own files: Falcon's model and config and the modules it imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.join.package_source import TRANSFORMERS_HELPERS, explained_model, line_in_class
from tracer.join.bindings import ACTIVATION, ALIAS, BUILT, TORCH_OP, Binding, bindings_of, default_parameters

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

FILES = (
    *TRANSFORMERS_HELPERS,
    "models/falcon/modeling_falcon.py",
    "models/falcon/configuration_falcon.py",
)


def _value(text: str) -> ast.expr:
    statement = ast.parse(text).body[0]
    assert isinstance(statement, ast.Assign)
    return statement.value


def test_an_element_of_a_table_called_binds_an_instance_of_its_classes() -> None:
    built = _value("self.attn = GPTJ_ATTENTION_CLASSES[config._attn_implementation](config, layer_idx)")
    assert bindings_of(built) == (Binding(BUILT, "GPTJ_ATTENTION_CLASSES"),)
    # a table of activation classes: the activation the config picks, as ``ACT2FN[...]``
    assert bindings_of(_value("self.act = ACT2CLS[config.hidden_act]()")) == (Binding(TORCH_OP, ACTIVATION),)
    # the table itself, not called: a function of it (unchanged)
    assert (
        bindings_of(_value("f = ALL_ATTENTION_FUNCTIONS[config._attn_implementation]"))[0].kind == "registry"
    )


def test_a_parameter_default_binds_what_it_names() -> None:
    function = ast.parse("def f(a, m=causal_mask_function, *, k=None, n=1, d=torch.float32): pass").body[0]
    assert isinstance(function, ast.FunctionDef)
    assert default_parameters(function.args) == {"m": (Binding(ALIAS, "causal_mask_function"),)}


@pytest.fixture(scope="module")
def falcon(tmp_path_factory):
    from transformers import FalconConfig, FalconForCausalLM

    config = FalconConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=128)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[0, :3] = 0  # left padding: the mask is made, not left to SDPA's is_causal
    return explained_model(
        tmp_path_factory.mktemp("falcon"),
        FILES,
        lambda: FalconForCausalLM(config),
        ids=(2, 8),
        attention_mask=mask,
    )


def _ops_at(result, line: int, file: str = "/modeling_falcon.py") -> set[str]:
    return {
        f.kernel_short
        for f in result.findings
        if f.origin.file and f.origin.file.endswith(file) and f.origin.line == line
    }


def _line_in_function(path: Path, name: str, text: str) -> int:
    """The one line of function `name` (at any depth) in `path` that holds `text`."""
    lines = path.read_text().splitlines()
    (line,) = [
        n
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name == name
        for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
        if text in lines[n - 1]
    ]
    return line


def test_the_attention_built_from_a_table_is_aligned_in_its_layer(falcon) -> None:
    source, truth, bare = falcon
    model = source / "models" / "falcon" / "modeling_falcon.py"
    matmul = line_in_class(model, "FalconLinear", "input @ self.weight.T")
    call = line_in_class(model, "FalconDecoderLayer", "= self.self_attention(")
    # the truth: FalconLinear's matmul ran at its line, none at the layer's call of its attention
    assert {"aten::_unsafe_view", "aten::resolve_conj"} <= _ops_at(truth, matmul)
    assert not _ops_at(truth, call)
    # without stacks: the same (the code before answered a view, an alias and the matmul's ops at
    # the call, a block of unknown ops)
    assert not _ops_at(bare, call)
    assert {"aten::_unsafe_view", "aten::resolve_conj"} <= _ops_at(bare, matmul)


def test_a_returned_closure_and_an_annotated_int_run_the_mask_ops(falcon) -> None:
    source, truth, bare = falcon
    masking = source / "masking_utils.py"
    causal = _line_in_function(masking, "causal_mask_function", "kv_idx <= q_idx")
    anded = _line_in_function(masking, "and_mask", "result = result & mask(")
    # the truth: the causal mask's comparison and the closure's `&` ran at their lines
    assert "aten::le" in _ops_at(truth, causal, "/masking_utils.py")
    assert "aten::bitwise_and" in _ops_at(truth, anded, "/masking_utils.py")
    # without stacks: the same (the code before answered the `le` in a sliding window's mask)
    assert "aten::le" in _ops_at(bare, causal, "/masking_utils.py")
    assert "aten::bitwise_and" in _ops_at(bare, anded, "/masking_utils.py")
    sliding = _line_in_function(masking, "inner_mask", "abs(q_idx - kv_idx) <= sliding_window")
    assert not _ops_at(bare, sliding, "/masking_utils.py")
