"""`tracer.instrument.profile` on the GLM-5 KV-cast example: exact lines without stacks, same results."""

from __future__ import annotations

import gzip
import io
import json

import pytest
import torch
from rich.console import Console

from examples.glm5_kv_cast import model as glm5
from tracer.errors import InputError
from tracer.instrument import SiteSelection, profile
from tracer.static import scan

MODEL_FILE = "examples/glm5_kv_cast/model.py"
STEP = "examples.glm5_kv_cast.model.DecodeModel.decode_step"
LAYER = "examples.glm5_kv_cast.model.DecoderLayer.forward"
WHOLE_CAST_LINE = 209  # k = self.pool.get_key_buffer(layer_id).to(q.dtype)
INDEX_CAST_LINE = 260  # index_k = self.backend.pool.get_index_k_buffer(layer_id).to(q.dtype)


@pytest.fixture(scope="module")
def model_sites(repo_root):
    return scan([repo_root / MODEL_FILE], cache_dir=False).sites


def _steps(model, count: int) -> list[torch.Tensor]:
    x = model.example_input()
    return [model.decode_step(x, step) for step in range(count)]


def test_profile_gives_exact_lines_without_stacks(model_sites, tmp_path):
    model = glm5.DecodeModel(glm5.PRESETS["tiny"])
    x = model.example_input()
    out = tmp_path / "trace.json.gz"
    console = Console(file=io.StringIO(), width=200)
    with profile(
        sites=model_sites, steps=2, warmup=1, out=out, step_function=STEP, console=console
    ) as session:
        for step in range(4):
            model.decode_step(x, step)
    assert session.steps_taken == 4
    data = json.loads(gzip.decompress(out.read_bytes()))
    names = [e.get("name", "") for e in data["traceEvents"]]
    assert sum(n.startswith("ProfilerStep#") for n in names) == 2
    assert not any(e.get("cat") == "python_function" for e in data["traceEvents"])
    casts = [
        f for f in session.analysis.findings if f.origin.file == MODEL_FILE and f.kernel == "aten::copy_"
    ]
    lines = {f.origin.line: f for f in casts}
    assert len(lines) == len(casts)
    assert {WHOLE_CAST_LINE, INDEX_CAST_LINE} <= set(lines)
    for line in (WHOLE_CAST_LINE, INDEX_CAST_LINE):
        finding = lines[line]
        assert finding.origin.confidence == 1.0 and finding.calls_per_step == 2  # tiny: 2 layers
        assert finding.origin.ops == ("aten::to", "aten::_to_copy", "aten::copy_")
        assert "kt:fn:DecodeModel.decode_step" in finding.origin.ranges
    printed = console.file.getvalue()
    assert f"{MODEL_FILE}:{WHOLE_CAST_LINE}" in printed
    assert glm5.DecodeModel.decode_step.__name__ == "decode_step"  # the step wrapper is gone again
    assert not hasattr(glm5.DecodeModel.decode_step, "__kerneltrace_original__")


@pytest.mark.parametrize("variant", glm5.VARIANTS)
def test_instrumented_model_is_bit_identical(model_sites, tmp_path, variant):
    plain = _steps(glm5.DecodeModel(glm5.PRESETS["tiny"], variant=variant), 5)
    model = glm5.DecodeModel(glm5.PRESETS["tiny"], variant=variant)
    with profile(
        sites=model_sites,
        out=tmp_path / "t.json",
        functions=[LAYER, "examples.glm5_kv_cast.model.AttentionBackend.forward_decode"],
        selection=SiteSelection(),
        explain=False,
    ) as session:
        instrumented = _steps(model, 5)
    assert session.report.placed  # the ranges were really there
    assert all(torch.equal(a, b) for a, b in zip(plain, instrumented, strict=True))


def test_too_few_steps_for_the_schedule_is_an_input_error(model_sites, tmp_path):
    model = glm5.DecodeModel(glm5.PRESETS["tiny"])
    with pytest.raises(InputError, match="1 step\\(s\\) ran, the schedule needs at least 3"):
        with profile(sites=model_sites, steps=1, warmup=2, out=tmp_path / "t.json", step_function=STEP):
            _steps(model, 1)


def test_bad_arguments_are_input_errors(tmp_path):
    with pytest.raises(InputError, match=r"must end in \.json"), profile(out=tmp_path / "trace.txt"):
        pass
    with pytest.raises(InputError, match="has no attribute 'nothing'"):
        with profile(out=tmp_path / "t.json", functions=["examples.glm5_kv_cast.model.DecodeModel.nothing"]):
            pass


def test_the_gpu_is_drained_once_just_before_the_recorded_steps(tmp_path, monkeypatch):
    """Earlier steps' kernels must not run into the recorded window without their launches. No GPU
    here: torch.cuda's answers are replaced after the profiler started (CPU activity only), and the
    synchronise calls are counted against the steps taken."""
    drained_at: list[int] = []
    with profile(steps=2, wait=1, warmup=1, out=tmp_path / "t.json") as run:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: drained_at.append(run.steps_taken))
        x = torch.randn(8, 8)
        for _ in range(5):
            x.to(torch.bfloat16)
            run.step()
        monkeypatch.undo()
    assert drained_at == [2]  # after wait 1 + warmup 1, before the 2 recorded steps
    assert run.trace_written
