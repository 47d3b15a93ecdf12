"""explain on the real H200 traces of HuggingFace generate() (../shared/fixtures/gpu-traces)."""

from __future__ import annotations

import json

import pytest

from tracer.explain import analyse
from tracer.join import attribute
from tracer.load import load_trace
from tracer.model.events import Cat, EventTable, Trace


def test_device_peak_and_totals(llama_analysis):
    assert llama_analysis.time_basis == "gpu"
    assert llama_analysis.device == "NVIDIA H200"
    assert llama_analysis.peak_gbps == 4800.0
    assert sum(f.share for f in llama_analysis.findings) == pytest.approx(1.0)
    assert llama_analysis.total_ns == sum(f.total_ns for f in llama_analysis.findings)
    # generate() on a tiny model under with_stack: the GPU mostly waits for Python.
    assert llama_analysis.gpu_busy_fraction < 0.05
    assert any("launch-bound" in note for note in llama_analysis.notes)


def test_steps_are_the_model_forwards_and_layers_the_decoder_modules(llama_analysis):
    # No ProfilerStep in a generate() trace: 12 calls of LlamaForCausalLM (1 prefill + 11 decode).
    assert llama_analysis.steps == 12
    assert any("12 steps from model forwards (LlamaForCausalLM_0)" in n for n in llama_analysis.notes)
    assert llama_analysis.layers == 8
    assert any("8 layers (from nn.Module LlamaDecoderLayer)" in n for n in llama_analysis.notes)


def test_kernels_are_categorised(llama_analysis):
    by_prefix = {}
    for finding in llama_analysis.findings:
        by_prefix.setdefault(finding.kernel.split("_")[0], set()).add(finding.category)
    assert by_prefix["nvjet"] == {"gemm"}
    assert by_prefix["cudnn"] == {"attention"}
    assert {f.category for f in llama_analysis.findings if f.kernel.startswith("Memcpy")} == {"memcpy"}
    assert llama_analysis.findings[0].category == "gemm"


def test_lm_head_gemm_runs_once_per_step_and_reads_its_weight(llama_analysis):
    lm_head = next(
        f for f in llama_analysis.findings if "aten::mm bf16[1,2048], bf16[2048,32000]" in f.shapes
    )
    assert lm_head.kernel == "nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT"
    assert lm_head.calls_per_step == 1
    assert lm_head.invariant == "1 call/step = once per step"
    assert lm_head.bytes_per_call == (2048 + 2048 * 32000 + 32000) * 2
    assert lm_head.bytes_basis == "estimate"
    assert lm_head.peak_fraction == pytest.approx(lm_head.gbps / 4800.0)
    assert 0.5 < lm_head.peak_fraction < 1.0


def test_rmsnorm_cast_has_its_line_and_per_layer_count(llama_analysis):
    cast = next(
        f for f in llama_analysis.findings if f.origin.key == "transformers/models/llama/modeling_llama.py:64"
    )
    assert cast.kernel_short == "unrolled_elementwise_kernel<direct_copy_kernel_cuda>"
    assert cast.category == "cast/copy"
    assert cast.origin.source.strip() == "hidden_states = hidden_states.to(torch.float32)"
    # 2 RMSNorms per decoder layer + the final norm.
    assert cast.invariant == "17 calls/step = twice per layer + 1 (8 layers)"
    assert cast.bytes_basis == "shapes"


def test_rotary_muls_run_twice_per_layer_on_each_line(llama_analysis):
    # apply_rotary_pos_emb: `q_embed = (q * cos) + (rotate_half(q) * sin)` and the same for k: two
    # muls on each line, each line run once per layer.
    muls = {
        f.origin.location: f
        for f in llama_analysis.findings
        if f.kernel_short == "elementwise_kernel<MulFunctor>"
        and f.origin.caller_frame.function == "apply_rotary_pos_emb"
    }
    assert set(muls) == {
        "transformers/models/llama/modeling_llama.py:158",
        "transformers/models/llama/modeling_llama.py:159",
    }
    for finding in muls.values():
        assert finding.invariant == "16 calls/step = twice per layer (8 layers)"


def test_moe_counts_from_the_config(deepseek_trace, tmp_path):
    # The fixture's README: 4 layers, the first dense, 16 routed experts, top-4.
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "num_hidden_layers": 4,
                "first_k_dense_replace": 1,
                "n_routed_experts": 16,
                "num_experts_per_tok": 4,
            }
        )
    )
    analysis = analyse(attribute(load_trace(deepseek_trace)), config=config)
    assert analysis.layers == 4
    invariants = {f.invariant for f in analysis.findings}
    assert "3 calls/step = once per MoE layer (3 of 4 layers)" in invariants
    topk = [
        f
        for f in analysis.findings
        if f.kernel_short == "gatherTopK" and "3 calls/step" in (f.invariant or "")
    ]
    assert topk and topk[0].invariant == "3 calls/step = once per MoE layer (3 of 4 layers)"


def _without_python_frames(trace: Trace) -> Trace:
    """The same real trace as if recorded without with_stack (python_function rows dropped)."""
    table, kept = trace.events, EventTable()
    for row, cat in enumerate(table.cat):
        if cat != Cat.PYTHON_FUNCTION:
            kept.add(
                Cat(cat),
                table.name[row],
                table.pid[row],
                table.tid[row],
                table.ts_ns[row],
                table.dur_ns[row],
                table.ext_id[row],
                table.correlation[row],
                table.py_id[row],
                table.py_parent[row],
                table.raw_index[row],
                table.args[row],
            )
    return Trace(meta=trace.meta, events=kept, notes=list(trace.notes))


def test_steps_by_kernel_repetition_without_frames(llama_trace):
    analysis = analyse(attribute(_without_python_frames(load_trace(llama_trace))))
    assert analysis.steps == 12
    assert any("repetition of the kernel sequence" in note for note in analysis.notes)
    assert sum(f.share for f in analysis.findings) == pytest.approx(1.0)
