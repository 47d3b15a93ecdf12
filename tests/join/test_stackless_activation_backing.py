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

import ast
import shutil
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

INSTALLED = Path(transformers.__file__).parent
FILES = (
    "activations.py",
    "masking_utils.py",
    "cache_utils.py",
    "models/codegen/modeling_codegen.py",
    "models/codegen/configuration_codegen.py",
    "models/dab_detr/modeling_dab_detr.py",
    "models/dab_detr/configuration_dab_detr.py",
)


def _line_in_class(path: Path, owner: str, text: str) -> int:
    """The one line of class `owner` in `path` that holds `text`."""
    found = next(
        node
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.ClassDef) and node.name == owner
    )
    lines = path.read_text().splitlines()
    (line,) = [n for n in range(found.lineno, (found.end_lineno or found.lineno) + 1) if text in lines[n - 1]]
    return line


def _source(folder: Path) -> Path:
    root = folder / "src" / "transformers"
    for relative in FILES:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(INSTALLED / relative, root / relative)
    for package in (root, root / "models", root / "models" / "codegen", root / "models" / "dab_detr"):
        (package / "__init__.py").write_text("")
    return root


def _profile(folder: Path, with_stack: bool) -> Path:
    from transformers import CodeGenConfig, CodeGenForCausalLM

    torch.manual_seed(0)
    config = CodeGenConfig(n_layer=2, n_embd=64, n_head=4, rotary_dim=8, vocab_size=128, n_positions=64)
    model = CodeGenForCausalLM(config).eval()
    ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        model(ids)
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], with_stack=with_stack
        ) as profile:
            for _ in range(3):
                model(ids)
    trace = folder / ("stack.json" if with_stack else "nostack.json")
    profile.export_chrome_trace(str(trace))
    return trace


@pytest.fixture(scope="module")
def codegen(tmp_path_factory):
    from tracer.api import explain_trace

    folder = tmp_path_factory.mktemp("codegen")
    source = _source(folder)
    truth = explain_trace(_profile(folder, with_stack=True), source=[source])
    bare = explain_trace(_profile(folder, with_stack=False), source=[source])
    return source, truth, bare


def test_the_activation_is_backed_by_the_model_file_that_picks_it(codegen) -> None:
    source, truth, bare = codegen
    # CodeGen's default activation (``gelu_new``)
    gelu = _line_in_class(source / "activations.py", "NewGELUActivation", "torch.tanh(")
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
