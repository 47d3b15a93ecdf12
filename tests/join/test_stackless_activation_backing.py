"""Without stacks, an activation's lines are backed by the model file that picks its activation by a
config value: transformers' ``activations.py`` holds a few ops of each layer, so few of the trace's
windows fit it on their own, and the ranking charged its lines as it charges another model's file that
one window fits by chance (the hold-out's CodeGen forward: a mul of ``NewGELUActivation`` answered in
``DabDetrEncoder.forward``, a file the model never runs). The model file that calls the activation
its config chose is what the rest of the trace fits: its share backs the activation's lines.

Run end to end on a real trace made here: a tiny ``CodeGenForCausalLM`` forward profiled on CPU
without stacks (and with stacks for the truth), the source a folder of the installed transformers'
own files: CodeGen's model and config, the modules it imports (activations, masking, cache) and
DAB-DETR's model, whose encoder fits one window of the GELU by chance."""

from __future__ import annotations

import pytest

from tests.join.package_source import TRANSFORMERS_HELPERS, explained_model, line_in_class

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

FILES = (
    *TRANSFORMERS_HELPERS,
    "models/codegen/modeling_codegen.py",
    "models/codegen/configuration_codegen.py",
    "models/dab_detr/modeling_dab_detr.py",
    "models/dab_detr/configuration_dab_detr.py",
)


@pytest.fixture(scope="module")
def codegen(tmp_path_factory):
    from transformers import CodeGenConfig, CodeGenForCausalLM

    config = CodeGenConfig(n_layer=2, n_embd=64, n_head=4, rotary_dim=8, vocab_size=128, n_positions=64)
    return explained_model(tmp_path_factory.mktemp("codegen"), FILES, lambda: CodeGenForCausalLM(config))


def test_the_activation_is_backed_by_the_model_file_that_picks_it(codegen) -> None:
    source, truth, bare = codegen
    # CodeGen's default activation (``gelu_new``)
    gelu = line_in_class(source / "activations.py", "NewGELUActivation", "torch.tanh(")
    # the truth: the GELU's ops ran at its line, by the stacks
    assert {
        f.origin.line for f in truth.findings if f.origin.file and f.origin.file.endswith("/activations.py")
    } == {gelu}
    answered = {
        (f.origin.file.split("transformers/", 1)[1], f.origin.line) for f in bare.findings if f.origin.file
    }
    # no op is answered in DAB-DETR's file, which the model never runs (the code before answered a
    # GELU's mul at its encoder's `object_queries * pos_scales`)
    assert not [a for a in answered if a[0].startswith("models/dab_detr/")]
    assert ("activations.py", gelu) in answered
    for finding in bare.findings:
        if finding.origin.file and finding.origin.file.endswith("/activations.py"):
            assert finding.origin.line == gelu
            said = next(e for e in finding.origin.evidence if e.startswith("#1 "))
            assert (
                "modeling_codegen.py, which picks its activation by a config value, holds the code the rest of the trace fits"
                in said
            )
