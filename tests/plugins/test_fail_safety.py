"""The plugin under load with injected faults: SGLang's results never change, each failure is logged once.

Each scenario drives `ITERATIONS` rounds through hooked real SGLang code (0.5.23): the CUDA-graph
capture pass (`DecodeCudaGraphRunner._capture_one_stream`, profiled by our hook; its per-shape CUDA
capture is a CPU stand-in running a real decode step, see `capture_runner`) and a decode step
through `RadixAttention` -> the torch-native backend (our ``kt:fn:`` wrapper) -> the FP8 KV pool
(our site ranges and an AROUND range hook). Every output is compared with the unhooked run of the
same step (`reference_outputs`, taken before any hook was applied; `settle` makes a step's output
independent of what ran before it).
"""

from __future__ import annotations

import logging
import os

import pytest
import torch

from tests.plugins.sglang_cpu import SGLangDecode, capture_runner, settle, sglang_ranks, user_ranges
from tracer.instrument import runtime
from tracer.plugins import sglang as plugin
from tracer.plugins import sglang_capture

ITERATIONS = 30  # rounds of (a capture pass of 2 shapes + 1 decode step): with 6 settling, 96 steps
KEY_BUFFER = "sglang.srt.mem_cache.memory_pool.MHATokenToKVPool.get_key_buffer"
CAPTURE_NAME = "cuda_graph_capture-DecodeCudaGraphRunner-TP-1.json.gz"
TRACE_NOT_WRITTEN = "could not write the CUDA-graph capture trace"


def _fail(*args, **kwargs):
    raise RuntimeError("injected kerneltrace fault")


def _hook_bodies_raise(mp, profiler_dir):
    mp.setattr(plugin, "named_range", _fail)  # the AROUND range hook's first step
    mp.setattr(runtime, "named_range", _fail)  # the kt:fn: method wrappers' first step
    mp.setattr(plugin, "range_methods", _fail)  # the AttentionBackend.__init__ hook's work
    mp.setattr(sglang_capture, "capture_trace_path", _fail)  # the capture hook's preparation


def _trace_dir_is_a_file(mp, profiler_dir):
    profiler_dir.parent.mkdir(parents=True, exist_ok=True)
    profiler_dir.write_text("a file where SGLANG_TORCH_PROFILER_DIR should be a directory")


def _trace_dir_under_proc(mp, profiler_dir):
    mp.setenv("SGLANG_TORCH_PROFILER_DIR", f"/proc/{os.getpid()}/kerneltrace")


def _disk_full(mp, profiler_dir):
    """A link to /dev/full planted at the partial file's name (a shared /tmp): the write must fail
    (O_EXCL) rather than follow it, and leave the link alone."""
    trace_dir = profiler_dir / "graph_capture_profile"
    trace_dir.mkdir(parents=True)
    partial = sglang_capture.partial_path(trace_dir / CAPTURE_NAME)

    def before_each_round():
        if not partial.is_symlink():  # the failed write removed it
            partial.symlink_to("/dev/full")

    return before_each_round


def _classic_range_close_raises(monkeypatch, profiler_dir):
    """Only the classic range (torch without `_RecordFunctionFast`) closes in Python; torch's fast
    range closes in C, like every op inside it."""
    runtime._bind()
    monkeypatch.setattr(runtime, "_open_range", runtime.ProfiledRange)
    monkeypatch.setattr(runtime, "_close_user_range", _fail)


# scenario -> (inject(monkeypatch, profiler_dir) -> a per-round setup or None, the warnings expected
# exactly once, whether the capture trace is written)
SCENARIOS = {
    "torch-profiler-check-raises": (
        lambda mp, d: mp.setattr(runtime, "_profiler_enabled", _fail),
        ["could not ask torch whether a profiler is running"],
        True,
    ),
    "range-open-raises": (
        lambda mp, d: mp.setattr(runtime, "_open_range", _fail),
        ["could not open the range"],
        True,
    ),
    "range-close-raises": (
        _classic_range_close_raises,
        ["could not close the range"],
        True,
    ),
    "hook-bodies-raise": (
        _hook_bodies_raise,
        [
            "range hook for MHATokenToKVPool.get_key_buffer failed",
            "range wrapper kt:fn:TorchNativeAttnBackend.forward_decode failed",
            "could not add ranges to attention backend TorchNativeAttnBackend",
            "could not prepare to profile the CUDA-graph capture",
        ],
        False,
    ),
    "profiler-start-raises": (
        lambda mp, d: mp.setattr(torch.profiler.profile, "start", _fail),
        ["the profiler did not start for the CUDA-graph capture"],
        False,
    ),
    "trace-dir-is-a-file": (_trace_dir_is_a_file, [TRACE_NOT_WRITTEN], False),
    "trace-dir-under-proc": (_trace_dir_under_proc, [TRACE_NOT_WRITTEN], False),
    "disk-full": (_disk_full, [TRACE_NOT_WRITTEN], False),
}


@pytest.fixture(scope="module")
def hooked_sglang(loaded_plugin):
    """All our hooks in place before faults are injected: an AROUND range hook applied by
    HookRegistry on a method every decode step calls, and the backend's ``kt:fn:`` wrappers (added
    when the first backend is built)."""
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    if KEY_BUFFER not in HookRegistry._patched:
        HookRegistry.register(
            KEY_BUFFER, plugin.range_hook("MHATokenToKVPool.get_key_buffer"), HookType.AROUND
        )
        HookRegistry.apply_hooks()
    assert KEY_BUFFER in HookRegistry._patched
    SGLangDecode()
    assert runtime.is_range_wrapper(vars(TorchNativeAttnBackend)["forward_decode"])


def _assert_unchanged(runner, decode_outputs, reference_outputs, rounds):
    """Every capture-pass and decode output equals the unhooked run's output for the same step."""
    shapes = list(reversed(runner.capture_bs))  # the order SGLang captures them in
    steps = [bs % len(reference_outputs) for bs in shapes] * rounds
    assert len(runner.captured_outputs) == len(steps)
    assert all(
        torch.equal(out, reference_outputs[step])
        for out, step in zip(runner.captured_outputs, steps, strict=True)
    ), "a capture-pass output differs from the unhooked run"
    steps = list(range(len(reference_outputs))) + [r % len(reference_outputs) for r in range(rounds)]
    assert len(decode_outputs) == len(steps)
    assert all(
        torch.equal(out, reference_outputs[step]) for out, step in zip(decode_outputs, steps, strict=True)
    ), "a decode output differs from the unhooked run"


def _run_rounds(rounds, reference_outputs, before_each_round=None, profiler_stays=False):
    """`rounds` x (the capture pass, then a decode step) on a settled decode; returns runner, outputs."""
    decode = SGLangDecode()  # builds the backend through our (maybe faulty) AROUND hook
    decode_outputs = settle(decode)
    runner = capture_runner(decode)
    for round_index in range(rounds):
        if before_each_round is not None:
            before_each_round()
        assert runner._capture_one_stream() is None
        decode_outputs.append(decode.decode_step(round_index % len(reference_outputs)))
        assert torch.autograd._profiler_enabled() is profiler_stays  # ours never left running
    return runner, decode_outputs


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_injected_faults_never_change_sglang_results(
    scenario, loaded_plugin, hooked_sglang, reference_outputs, tmp_path, monkeypatch, caplog
):
    inject, expected_warnings, trace_written = SCENARIOS[scenario]
    profiler_dir = tmp_path / "profiles"
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(profiler_dir))
    monkeypatch.setattr(runtime, "_warned", set())
    monkeypatch.setattr(sglang_capture, "_noted", set())
    runtime._bind()
    before_each_round = inject(monkeypatch, profiler_dir)

    with caplog.at_level(logging.INFO, logger="kerneltrace"), sglang_ranks(tp_rank=1):
        runner, decode_outputs = _run_rounds(ITERATIONS, reference_outputs, before_each_round)

    _assert_unchanged(runner, decode_outputs, reference_outputs, ITERATIONS)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    for expected in expected_warnings:
        assert sum(expected in message for message in warnings) == 1, (expected, warnings)
    assert len(warnings) == len(expected_warnings), warnings  # logged once; nothing else went wrong
    trace_dir = profiler_dir / "graph_capture_profile"
    # (a link a scenario planted is its own: never ours to follow or remove)
    written = sorted(p.name for p in trace_dir.iterdir() if not p.is_symlink()) if trace_dir.is_dir() else []
    assert written == ([CAPTURE_NAME] if trace_written else []), written  # and no partial file
    saved = [r for r in caplog.records if "capture trace saved" in r.getMessage()]
    assert len(saved) == (ITERATIONS if trace_written else 0)


def test_a_profiler_running_all_along_is_never_disturbed(
    loaded_plugin, hooked_sglang, reference_outputs, tmp_path, monkeypatch, caplog
):
    """A /start_profile profiler records through every capture pass: ours never starts, nor stops it."""
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path))
    monkeypatch.setattr(sglang_capture, "_noted", set())
    rounds = ITERATIONS // 3
    outer = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
    with caplog.at_level(logging.INFO, logger="kerneltrace"), sglang_ranks(tp_rank=1), outer:
        runner, decode_outputs = _run_rounds(rounds, reference_outputs, profiler_stays=True)

    _assert_unchanged(runner, decode_outputs, reference_outputs, rounds)
    assert len([r for r in caplog.records if "already recording" in r.getMessage()]) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not (tmp_path / "graph_capture_profile").exists()
    out = tmp_path / "outer.json"
    outer.export_chrome_trace(str(out))
    names = user_ranges(out)
    # 2 layers x (2 captured shapes + 1 decode step) per round, plus the 6 settling steps
    assert names.count("kt:fn:TorchNativeAttnBackend.forward_decode") == 2 * (3 * rounds + 6)
    assert names.count("kt:fn:MHATokenToKVPool.get_key_buffer") == 2 * (3 * rounds + 6)
