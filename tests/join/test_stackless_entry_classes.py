"""Without stacks, a model file's other entry classes: transformers' ``GPTBigCodeForSequenceClassification``
runs the same ``GPTBigCodeModel`` as ``GPTBigCodeForCausalLM`` and then one linear (``self.score``), so
the ops of the causal LM's ``self.lm_head`` fit the head's ``forward`` as well as the causal LM's, and
the ranking put the head's line first (the hold-out's GPT-BigCode forward: 4.7% of its truth time
at ``GPTBigCodeForTokenClassification``'s classifier). The config's ``architectures`` name the entry
class that ran: the others' lines go after the rest, still in the ranking.

Run end to end on a real trace made here: a tiny ``GPTBigCodeForCausalLM`` forward profiled on CPU
without stacks, the installed transformers' GPT-BigCode folder as the source, the model's own
``config.json``; its truth (which line ran the ``lm_head``) from the same model profiled with stacks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tracer.join.sites import SiteIndex
from tracer.join.source_lines import SourceLines
from tracer.join.stackless import StacklessRanker

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

MODEL = Path(transformers.__file__).parent / "models" / "gpt_bigcode"
MODELING = MODEL / "modeling_gpt_bigcode.py"


def _profile(folder: Path, with_stack: bool) -> Path:
    from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM

    torch.manual_seed(0)
    config = GPTBigCodeConfig(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64)
    model = GPTBigCodeForCausalLM(config).eval()
    ids = torch.randint(0, 128, (1, 8))
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.no_grad():
        model(ids)
        with torch.profiler.profile(activities=activities, with_stack=with_stack) as profile:
            for _ in range(3):
                model(ids)
    trace = folder / ("stack.json" if with_stack else "nostack.json")
    profile.export_chrome_trace(str(trace))
    config.architectures = ["GPTBigCodeForCausalLM"]
    config.save_pretrained(folder)
    return trace


def _class_lines(name: str) -> range:
    found = next(
        node
        for node in ast.parse(MODELING.read_text()).body
        if isinstance(node, ast.ClassDef) and node.name == name
    )
    return range(found.lineno, (found.end_lineno or found.lineno) + 1)


@pytest.fixture(scope="module")
def gpt_bigcode(tmp_path_factory):
    from tracer.api import explain_trace

    folder = tmp_path_factory.mktemp("gpt_bigcode")
    nostack, stack = _profile(folder, with_stack=False), _profile(folder, with_stack=True)
    truth = explain_trace(stack, source=[MODEL])
    named = explain_trace(nostack, source=[MODEL], config=folder / "config.json")
    return truth, named


def test_the_lm_head_answers_in_the_class_the_config_names(gpt_bigcode) -> None:
    truth, named = gpt_bigcode
    causal = _class_lines("GPTBigCodeForCausalLM")
    heads = [
        _class_lines(n) for n in ("GPTBigCodeForSequenceClassification", "GPTBigCodeForTokenClassification")
    ]
    # the truth: the lm_head's own ops, by the stacks (`logits = self.lm_head(hidden_states[...])`)
    (lm_head,) = {
        f.origin.line
        for f in truth.findings
        if f.origin.file and f.origin.line in causal and f.origin.confidence >= 0.8
    }
    assert "self.lm_head(" in MODELING.read_text().splitlines()[lm_head - 1]
    at_lm_head = [f for f in named.findings if f.origin.line == lm_head]
    assert at_lm_head, "no op without stacks answered at the lm_head"
    for finding in at_lm_head:
        said = [e for e in finding.origin.evidence if "(another entry class" in e]
        assert said and said[0].startswith("the config names GPTBigCodeForCausalLM, not `GPTBigCodeFor")
        # the head's own line is still ranked, after
        assert any(int(c.rsplit(":", 1)[1]) in heads[0] for c in finding.origin.candidates[1:])
    # no op is answered first in a head the config does not name
    first = [
        f.origin.line
        for f in named.findings
        if f.origin.file and f.origin.file.endswith("modeling_gpt_bigcode.py")
    ]
    assert not [line for line in first if any(line in head for head in heads)]


def test_the_classes_a_named_class_derives_from_are_named_too(tmp_path) -> None:
    """SGLang's ``MistralLarge3ForCausalLM(DeepseekV3ForCausalLM)`` runs the ``forward`` of the class
    it derives from: that class (and the one it derives from) is no other model's entry; Llama's is, and
    without a config none is."""
    import sglang

    models = Path(sglang.__file__).parent / "srt" / "models"
    ranker = StacklessRanker(SiteIndex(), SourceLines([models]), ("MistralLarge3ForCausalLM",))
    assert {"DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM"} <= ranker._named_classes()  # at any depth
    assert not ranker._other_entry("DeepseekV3ForCausalLM.forward")
    assert ranker._other_entry("LlamaForCausalLM.forward")
    assert not ranker._other_entry("DeepseekV2Model.forward")  # no entry class: the model it runs
    assert not StacklessRanker(SiteIndex(), SourceLines([models]))._other_entry("LlamaForCausalLM.forward")
