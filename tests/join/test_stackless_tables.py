"""Without stacks, calls of a function looked up in a table: transformers' attention modules call
``ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager_attention_forward)(...)``,
and which backend runs (``sdpa_attention_forward``, flash, flex, the eager default) the config says,
not the source. Each function the table holds is an alternative of the call, and the dispatch is no
nesting level of its own: the backend's helpers (``repeat_kv``) are spliced in too, and their lines
answer in the backend's file, which the call says ran (not in a copy of ``repeat_kv`` elsewhere)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from tracer.join.bindings import ALIAS, REGISTRY, Binding, bindings_of, table_values


def _value(source: str) -> ast.expr:
    statement = ast.parse(textwrap.dedent(source)).body[0]
    assert isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None
    return statement.value


def test_a_lookup_in_a_table_binds_its_functions_and_the_default() -> None:
    looked_up = _value("f = ALL_ATTENTION_FUNCTIONS.get_interface(self.config.impl, eager_attention_forward)")
    assert bindings_of(looked_up) == (
        Binding(REGISTRY, "ALL_ATTENTION_FUNCTIONS"),
        Binding(ALIAS, "eager_attention_forward"),
    )
    assert bindings_of(_value("f = ALL_ATTENTION_FUNCTIONS[self.config.impl]")) == (
        Binding(REGISTRY, "ALL_ATTENTION_FUNCTIONS"),
    )
    assert bindings_of(_value("f = BACKENDS.get(name)")) == (Binding(REGISTRY, "BACKENDS"),)


def test_the_functions_a_table_holds() -> None:
    tree = ast.parse(
        textwrap.dedent(
            """
            class AttentionInterface(GeneralInterface):
                _global_mapping = {
                    "flash_attention_2": flash_attention_forward,
                    "sdpa": sdpa_attention_forward,
                    "paged|eager": eager_paged_attention_forward,
                }

            ALL_ATTENTION_FUNCTIONS: AttentionInterface = AttentionInterface()
            BACKENDS = {"a": run_a, "b": run_b, "c": 3}
            """
        )
    )
    assert table_values(tree, "ALL_ATTENTION_FUNCTIONS") == [
        "flash_attention_forward",
        "sdpa_attention_forward",
        "eager_paged_attention_forward",
    ]
    assert table_values(tree, "BACKENDS") == ["run_a", "run_b"]
    assert table_values(tree, "MISSING") == []


@pytest.fixture(scope="module")
def gemma2_forward(nostack_scores):
    return nostack_scores("transformers/torch2.13/gemma2_forward")


def test_the_attention_backends_helper_answers_in_the_backends_file(gemma2_forward) -> None:
    """Gemma2's forward on CPU: 72% of the op time is ``repeat_kv``'s reshape in
    ``integrations/sdpa_attention.py``, reached from Gemma2's attention through the table. Before:
    18.6% of the op time ranked first (Qwen3.5's gated delta net, a long function of many reshapes,
    fit the window best), 19.3% in the top 3."""
    assert gemma2_forward.rank1 >= 0.85
    assert gemma2_forward.buckets[">=0.9"].answered_ns == 0  # still a ranking
