"""Without stacks, code the trace cannot tell apart: transformers' Mistral keeps copies of Llama's
norm, MLP and rotary code, and its attention differs from Llama's only in an argument that runs no
op, so a Mistral trace's ops fit Llama's file as well as Mistral's and the ranking answers in Llama's
(the corpus's Mistral forward, torch 2.13: 15.0% ranked first). The user knows which model ran: the
model's config.json (``--config``) names its class (``architectures``), and of the code that fits
alike, the file defining that class answers first (90.9% ranked first; the bench's ``named`` mode).
Run end to end: the corpus's real trace with every frame stripped, the installed transformers
package (2,700 files) as the source, a config.json as a user would pass it."""

from __future__ import annotations

import json

import pytest

from tracer.errors import InputError
from tracer.explain.structure import config_architectures
from tracer.model.origin import RANKED

MISTRAL = "transformers/models/mistral/modeling_mistral.py"


@pytest.fixture(scope="module")
def mistral_forward(tmp_path_factory):
    from bench.corpus.scoring import CORPUS, find_corpus, resolve_roots, source_dirs, strip_stacks
    from tracer.api import explain_trace

    trace = next(
        (
            t
            for t in find_corpus(CORPUS, ["transformers"])
            if t.name == "transformers/torch2.13/mistral_forward"
        ),
        None,
    )
    if trace is None:
        pytest.skip("the corpus's Mistral forward trace is missing")
    document = trace.truth_document()
    dirs = source_dirs(document, resolve_roots(document["source_roots"]))
    folder = tmp_path_factory.mktemp("mistral")
    config = folder / "config.json"
    config.write_text(
        json.dumps({"architectures": ["MistralForCausalLM"], "model_type": "mistral", "num_hidden_layers": 2})
    )
    return explain_trace(strip_stacks(trace.trace_path, folder), source=dirs, config=config)


def _finding(analysis, op: str, line: int):
    return next(
        f
        for f in analysis.findings
        if f.kernel == op and f.origin.line == line and f.origin.file.endswith(MISTRAL)
    )


def test_copies_answer_in_the_file_of_the_model_the_config_names(mistral_forward) -> None:
    in_models = [f for f in mistral_forward.findings if f.origin.file and "/models/" in f.origin.file]
    mistral = sum(f.total_ns for f in in_models if f.origin.file.endswith(MISTRAL))
    assert mistral >= 0.9 * sum(f.total_ns for f in in_models)  # without the config, most in Llama's file
    assert not [f for f in in_models if f.origin.file.endswith("llama/modeling_llama.py")]
    norm = _finding(mistral_forward, "aten::rsqrt", 194)  # MistralRMSNorm.forward, a copy of Llama's
    (said,) = [e for e in norm.origin.evidence if e.startswith("the config names")]
    assert said.startswith(f"the config names MistralForCausalLM, which {MISTRAL} defines: its line first")
    assert "transformers/models/llama/modeling_llama.py" in norm.origin.candidates[1]  # the copy, after it


def test_a_named_model_is_still_a_ranking(mistral_forward) -> None:
    assert all(f.origin.confidence < 0.5 for f in mistral_forward.findings)
    assert all(f.origin.answer == RANKED for f in mistral_forward.findings if f.origin.line is not None)


def test_config_architectures(tmp_path) -> None:
    def names(config: dict) -> tuple[str, ...]:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        return config_architectures(path)

    assert names({"architectures": ["MistralForCausalLM"], "num_hidden_layers": 32}) == (
        "MistralForCausalLM",
    )
    # a multimodal config: its own class, then its language model's
    both = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": {"architectures": ["Gemma3ForCausalLM"]},
    }
    assert names(both) == ("Gemma3ForConditionalGeneration", "Gemma3ForCausalLM")
    assert names({"architectures": "MistralForCausalLM"}) == ()  # not a list: names nothing
    assert names({"architectures": ["Mistral For CausalLM", 7, None, "LlamaForCausalLM"]}) == (
        "LlamaForCausalLM",
    )
    assert names({"num_hidden_layers": 2}) == ()
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="not a JSON model config"):
        config_architectures(tmp_path / "config.json")


def test_a_model_no_source_file_defines_is_said_and_changes_nothing(
    own_gpu_traces, repo_root, tmp_path
) -> None:
    """The founding case without stacks, its config naming a class the source does not define (a
    typo, or the wrong --source): a note says so, and the ranking is the trace's alone."""
    from tracer.api import explain_trace

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["GlmMoeDsaForCausalLM"], "num_hidden_layers": 78}))
    analysis = explain_trace(
        own_gpu_traces / "glm5_cast_whole_nostack.json.gz",
        source=[repo_root / "examples" / "glm5_kv_cast"],
        config=config,
    )
    assert analysis.findings[0].origin.location.endswith("glm5_kv_cast/model.py:209")
    assert (
        "the config names GlmMoeDsaForCausalLM, but no file under --source defines it: "
        "copies of shared code are ranked by the trace alone"
    ) in analysis.notes
