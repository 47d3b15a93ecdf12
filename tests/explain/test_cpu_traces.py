"""explain on real CPU profiler traces of tests/explain/cpu_model.py (the whole-buffer cast, in small)."""

from __future__ import annotations

import json

import pytest

from tests.explain.conftest import LAYERS, STEPS
from tests.explain.cpu_model import HEAD_DIM, LIVE_ROWS, POOL_ROWS, cast_line
from tracer.errors import InputError
from tracer.explain import analyse
from tracer.join import attribute
from tracer.load import load_trace


def test_top_finding_is_the_whole_buffer_cast_at_its_line(stack_analysis):
    top = stack_analysis.findings[0]
    assert stack_analysis.time_basis == "cpu"
    assert top.kernel == "aten::copy_"
    assert top.category == "cast/copy"
    assert top.origin.ops == ("aten::to", "aten::_to_copy", "aten::copy_")
    assert top.origin.file.endswith("cpu_model.py")
    assert top.origin.line == cast_line()
    assert "get_key_buffer(self.layer_id).to(hidden.dtype)" in top.origin.source
    assert top.share > 0.5


def test_calls_per_step_equal_the_layers_and_say_so(stack_analysis):
    top = stack_analysis.findings[0]
    assert stack_analysis.steps == STEPS
    assert stack_analysis.layers == LAYERS
    assert top.calls == LAYERS * STEPS
    assert top.calls_per_step == LAYERS
    assert top.invariant == "4 calls/step = once per layer (4 layers)"
    assert any("ProfilerStep#N" in note for note in stack_analysis.notes)
    assert any("4 layers (from ranges layers.N)" in note for note in stack_analysis.notes)


def test_bytes_per_call_come_from_the_real_shapes(stack_analysis):
    top = stack_analysis.findings[0]
    # read the FP8 pool (1 byte/element), write bf16 (2 bytes/element)
    assert top.bytes_per_call == POOL_ROWS * HEAD_DIM * (1 + 2)
    assert top.bytes_basis == "shapes"
    assert top.gbps == pytest.approx(top.bytes_per_call * top.calls / top.total_ns)
    assert top.peak_fraction is None  # no device peak on the CPU
    assert top.shapes == (f"aten::copy_ bf16[{POOL_ROWS},1,{HEAD_DIM}], fp8e4m3[{POOL_ROWS},1,{HEAD_DIM}]",)


def test_waste_flags_the_cast_then_index(stack_analysis):
    top = stack_analysis.findings[0]
    assert top.waste == (
        f"cast 786 KB whole buffer fp8e4m3[{POOL_ROWS},1,{HEAD_DIM}] -> bf16, "
        f"then aten::index kept {LIVE_ROWS} of {POOL_ROWS} rows (1.6%)"
    )
    # The small per-layer casts of the scores are not whole-buffer casts.
    others = [f for f in stack_analysis.findings[1:] if f.category == "cast/copy"]
    assert others and all(f.waste is None for f in others)


def test_shares_add_up_to_one(stack_analysis):
    assert sum(f.share for f in stack_analysis.findings) == pytest.approx(1.0)
    assert stack_analysis.findings == tuple(sorted(stack_analysis.findings, key=lambda f: -f.total_ns))


def test_layers_given_override_and_mismatch_is_stated(stack_attributions):
    assert (
        analyse(stack_attributions, layers=2).findings[0].invariant
        == "4 calls/step = twice per layer (2 layers)"
    )
    assert (
        analyse(stack_attributions, layers=3).findings[0].invariant
        == "4 calls/step: not a multiple of the 3 layers"
    )


def test_layers_from_a_config_file(stack_attributions, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 4, "n_routed_experts": 8, "num_experts_per_tok": 2}))
    analysis = analyse(stack_attributions, config=config)
    assert analysis.layers == 4
    assert any("4 layers (from config.json)" in note for note in analysis.notes)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(InputError, match="no layer count"):
        analyse(stack_attributions, config=bad)


def test_step_range_names_the_step(stack_attributions):
    # Each `model.layers.N` range as a step: the cast then runs once per step, and a step holding
    # one of the 4 layers is impossible: said so, and the count worded as approximate.
    analysis = analyse(stack_attributions, step_range="model.layers.")
    assert analysis.steps == LAYERS * STEPS
    assert analysis.findings[0].calls_per_step == 1
    assert analysis.findings[0].invariant == "~1 call/step = once per step"
    assert not analysis.steps_exact
    assert any("these steps look like layers" in line for line in analysis.step_evidence)
    with pytest.raises(InputError, match="no record_function range named 'decode'"):
        analyse(stack_attributions, step_range="decode")


def test_steps_by_repetition_without_markers_or_frames(plain_trace):
    analysis = analyse(attribute(load_trace(plain_trace)))
    assert analysis.steps == 5
    assert any("repetition of the kernel sequence" in note for note in analysis.notes)
    cast = next(f for f in analysis.findings if "fp8e4m3" in " ".join(f.shapes))
    assert cast.kernel == "aten::copy_"
    assert cast.waste is not None and f"kept {LIVE_ROWS} of {POOL_ROWS} rows" in cast.waste
