"""KERNELTRACE_PROFILE_CAPTURE: SGLang's CUDA-graph capture pass profiled into the per-rank capture trace.

The capture pass is SGLang's real `DecodeCudaGraphRunner._capture_one_stream`, hooked by
`HookRegistry`; on CPU only its per-shape CUDA-graph capture is a stand-in that runs a real SGLang
decode step (`tests.plugins.sglang_cpu.capture_runner`). The profiler, the trace file and its
loading are real.
"""

from __future__ import annotations

import logging
import re

import torch

from tests.plugins.sglang_cpu import LAYERS, SGLangDecode, capture_runner, hook_of, sglang_ranks, user_ranges
from tracer.explain import ranks
from tracer.join import attribute
from tracer.load import load_trace
from tracer.model.events import Cat
from tracer.plugins import sglang_capture

BACKEND_FILE = "sglang/srt/layers/attention/torch_native_backend.py"
CAST_LINES = {246, 247}
DECODE_RUNNER = "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner"
PREFILL_RUNNER = "sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner"


def test_capture_hooks_are_applied_to_the_real_graph_runners(loaded_plugin):
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner
    from sglang.srt.plugins.hook_registry import HookRegistry
    from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner

    targets = {f"{DECODE_RUNNER}._capture_one_stream", f"{PREFILL_RUNNER}._capture_one_stream"}
    assert set(sglang_capture.CAPTURE_TARGETS) == targets
    assert targets <= HookRegistry._patched
    assert hook_of(DecodeCudaGraphRunner._capture_one_stream) is sglang_capture.capture_profile_hook
    assert hook_of(PrefillCudaGraphRunner._capture_one_stream) is sglang_capture.capture_profile_hook
    # Draft/speculative decode runners inherit the hooked capture pass.
    assert EAGLEDraftCudaGraphRunner._capture_one_stream is DecodeCudaGraphRunner._capture_one_stream


def test_capture_profiling_is_off_unless_asked(loaded_plugin, monkeypatch):
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    monkeypatch.delenv("KERNELTRACE_PROFILE_CAPTURE", raising=False)
    before = {target: list(hooks) for target, hooks in HookRegistry._hooks.items()}
    assert loaded_plugin._register_capture_profiling(HookRegistry, HookType) == []
    assert {target: list(hooks) for target, hooks in HookRegistry._hooks.items()} == before


def test_the_capture_is_profiled_into_the_rank_capture_trace(
    loaded_plugin, unhooked_capture_outputs, tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path))
    decode = SGLangDecode()
    runner = capture_runner(decode)
    with caplog.at_level(logging.INFO, logger="kerneltrace"), sglang_ranks(tp_rank=1):
        assert runner._capture_one_stream() is None
    assert not torch.autograd._profiler_enabled()  # ours stopped
    assert len(runner.captured_outputs) == len(unhooked_capture_outputs) == 2
    assert all(
        torch.equal(a, b) for a, b in zip(runner.captured_outputs, unhooked_capture_outputs, strict=True)
    )

    written = tmp_path / "graph_capture_profile" / "cuda_graph_capture-DecodeCudaGraphRunner-TP-1.json.gz"
    assert sorted(p.name for p in written.parent.iterdir()) == [written.name]  # no partial file left
    assert any(f"capture trace saved to {written}" in r.getMessage() for r in caplog.records)
    trace = load_trace(written)
    assert trace.meta.record_shapes is True and trace.meta.with_stack is not True
    names = user_ranges(written)
    assert names.count("kt:fn:TorchNativeAttnBackend.forward_decode") == LAYERS * 2  # 2 shapes captured
    sites = {name.rsplit("@", 1)[1] for name in names if name.startswith("kt:site:")}
    assert {f"{BACKEND_FILE}:{line}" for line in CAST_LINES} <= sites
    # The capture-time cast ops join to the exact SGLang line (what replays will be attributed to).
    attributions = attribute(trace, None)
    table = trace.events
    casts = [
        row
        for row in table.rows(Cat.CPU_OP)
        if table.name[row] == "aten::copy_"
        and list((table.args[row] or {}).get("Input type", []))[:2] == ["c10::BFloat16", "c10::Float8_e4m3fn"]
    ]
    assert len(casts) == 2 * LAYERS * decode.batch * 2
    origins = {
        attributions.origins[attributions.origin_ids[list(attributions.op_rows).index(row)]] for row in casts
    }
    assert {(o.file, o.line, o.confidence) for o in origins} == {
        (BACKEND_FILE, line, 1.0) for line in CAST_LINES
    }

    # `kerneltrace explain DIR` attaches it to rank 1's trace (a decode trace as /start_profile writes).
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        decode.decode_step(0)
    prof.export_chrome_trace(str(tmp_path / "kt-TP-1-DECODE.trace.json.gz"))
    [found] = ranks.find_rank_traces(tmp_path)
    assert (found.rank, found.captures) == (1, (written,))


def test_sglang_own_capture_profiling_gets_our_ranges_and_no_second_profiler(
    loaded_plugin, unhooked_capture_outputs, tmp_path, monkeypatch, caplog
):
    """``--enable-profile-cuda-graph``: SGLang's `_capture` runs its profiler around the capture pass
    (here the same `profile(...)` call SGLang makes) and exports it with its own function."""
    from sglang.srt.utils.profile_utils import export_cuda_graph_capture_trace
    from torch.profiler import ProfilerActivity, profile

    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path))
    monkeypatch.setenv("SGLANG_ENABLE_CUDA_GRAPH_CAPTURE_TRACE", "1")
    monkeypatch.setattr(sglang_capture, "_noted", set())
    runner = capture_runner(SGLangDecode())
    runner.enable_profile_cuda_graph = True
    with caplog.at_level(logging.INFO, logger="kerneltrace"), sglang_ranks(tp_rank=0):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            runner._capture_one_stream()
            assert torch.autograd._profiler_enabled()  # SGLang's profiler still records: not stopped by us
        assert not (tmp_path / "graph_capture_profile").exists()  # nothing written by us
        export_cuda_graph_capture_trace(prof, runner_name=runner._profile_runner_name())
    assert all(
        torch.equal(a, b) for a, b in zip(runner.captured_outputs, unhooked_capture_outputs, strict=True)
    )
    written = tmp_path / "graph_capture_profile" / "cuda_graph_capture-DecodeCudaGraphRunner-TP-0.json.gz"
    names = user_ranges(written)
    assert names.count("kt:fn:TorchNativeAttnBackend.forward_decode") == LAYERS * 2
    assert any(name.endswith(f"@{BACKEND_FILE}:246") for name in names)
    assert [r.getMessage() for r in caplog.records if "--enable-profile-cuda-graph" in r.getMessage()] == [
        (
            "kerneltrace: SGLang profiles the CUDA-graph capture itself (--enable-profile-cuda-graph); our "
            "ranges are in its trace (written with SGLANG_ENABLE_CUDA_GRAPH_CAPTURE_TRACE=1)"
        )
    ]


def test_a_profiler_already_recording_is_left_running(loaded_plugin, tmp_path, monkeypatch):
    """A recapture during /start_profile: the capture goes into that profile, ours never starts."""
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path))
    runner = capture_runner(SGLangDecode())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof, sglang_ranks(1):
        runner._capture_one_stream()
        assert torch.autograd._profiler_enabled()
    prof.export_chrome_trace(str(tmp_path / "outer.json"))
    assert (
        user_ranges(tmp_path / "outer.json").count("kt:fn:TorchNativeAttnBackend.forward_decode")
        == LAYERS * 2
    )
    assert not (tmp_path / "graph_capture_profile").exists()


def test_capture_trace_names_match_sglang_and_explain(loaded_plugin, tmp_path, monkeypatch):
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner
    from sglang.srt.utils import profile_utils

    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path))
    assert sglang_capture.CAPTURE_DIR == ranks.CAPTURE_DIR == profile_utils.GRAPH_CAPTURE_PROFILE_DIRNAME
    assert sglang_capture.CAPTURE_PREFIX == ranks.CAPTURE_PREFIX
    decode_runner = capture_runner(SGLangDecode())
    decode_runner.model_runner.is_draft_worker = True  # SGLang prefixes a draft worker's base runner
    prefill_runner = object.__new__(PrefillCudaGraphRunner)
    with sglang_ranks(tp_rank=3):
        names = [
            sglang_capture.capture_trace_path(decode_runner).name,
            sglang_capture.capture_trace_path(decode_runner, 1).name,  # a PD-multiplexed stream
            sglang_capture.capture_trace_path(prefill_runner).name,
        ]
    assert names == [
        "cuda_graph_capture-DraftDecodeCudaGraphRunner-TP-3.json.gz",
        "cuda_graph_capture-DraftDecodeCudaGraphRunner-stream_1-TP-3.json.gz",
        "cuda_graph_capture-PrefillCudaGraphRunner-TP-3.json.gz",
    ]
    assert all(re.search(ranks._CAPTURE_RANK, name)["rank"] == "3" for name in names)
    assert sglang_capture.capture_trace_dir() == tmp_path / "graph_capture_profile"
    partial = sglang_capture.partial_path(tmp_path / names[0])
    assert partial.name.startswith(".") and not partial.name.endswith((".json", ".json.gz"))
