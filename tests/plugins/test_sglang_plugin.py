"""The SGLang plugin on real SGLang (0.5.23) and real torch: discovery, hooks, ranges, exact lines."""

from __future__ import annotations

import importlib.metadata
import logging
import os
from pathlib import Path

import torch

from tests.plugins.sglang_cpu import LAYERS, SGLangDecode, hook_of, user_ranges
from tracer.join import attribute
from tracer.load import load_trace
from tracer.model.events import Cat

BACKEND_FILE = "sglang/srt/layers/attention/torch_native_backend.py"
CAST_LINES = {246, 247}  # `per_req_key = per_req_key.to(per_req_query.dtype)` and the value's twin
POOL_FILE = "sglang/srt/mem_cache/memory_pool.py"
POOL_STORE_CAST_LINES = {2931, 2932}  # MHATokenToKVPool.set_kv_buffer: `cache_k = cache_k.to(self.dtype)`


def _line_text(sglang_root: Path, path: str, line: int) -> str:
    return (sglang_root / path).read_text().splitlines()[line - 1].strip()


def test_the_entry_point_is_installed():
    found = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="sglang.srt.plugins")}
    assert found.get("kerneltrace") == "tracer.plugins.sglang:register"


def test_sglang_allow_list_decides_whether_we_load(sglang_cpu, monkeypatch):
    from sglang.srt.plugins import GENERAL_PLUGINS_GROUP, load_plugins_by_group

    monkeypatch.setenv("SGLANG_PLUGINS", "someone_else")
    assert "kerneltrace" not in load_plugins_by_group(GENERAL_PLUGINS_GROUP)
    monkeypatch.setenv("SGLANG_PLUGINS", "kerneltrace")
    loaded = load_plugins_by_group(GENERAL_PLUGINS_GROUP)
    func, dist = loaded["kerneltrace"]
    assert func.__module__ == "tracer.plugins.sglang" and func.__name__ == "register"
    assert dist == "kerneltrace"


def test_off_by_default(sglang_cpu, monkeypatch):
    from sglang.srt.plugins.hook_registry import HookRegistry

    import tracer.plugins.sglang as plugin

    monkeypatch.delenv("KERNELTRACE", raising=False)
    monkeypatch.setitem(plugin._state, "registered", False)
    before = {target: list(hooks) for target, hooks in HookRegistry._hooks.items()}
    plugin.register()
    assert {target: list(hooks) for target, hooks in HookRegistry._hooks.items()} == before
    assert plugin._state["registered"] is False


def test_load_plugins_applies_our_hooks_to_real_sglang_classes(loaded_plugin):
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.model_executor.runner.eager_runner import EagerRunner
    from sglang.srt.plugins.hook_registry import HookRegistry

    ours = {
        target
        for target, hooks in HookRegistry._hooks.items()
        for _, _, source in hooks
        if source is not None and source.plugin_name == "kerneltrace"
    }
    assert {
        "sglang.srt.model_executor.model_runner.ModelRunner.forward",
        "sglang.srt.model_executor.runner.eager_runner.EagerRunner._execute_decode",
        "sglang.srt.model_executor.runner.eager_runner.EagerRunner._execute_extend",
        "sglang.srt.layers.attention.base_attn_backend.AttentionBackend.__init__",
        "sglang.srt.model_executor.model_runner.ModelRunner.load_model",
    } <= ours
    assert ours <= HookRegistry._patched  # applied, not just registered
    assert hook_of(ModelRunner.forward).__qualname__ == "kerneltrace_range_hook[ModelRunner.forward]"
    assert hook_of(EagerRunner._execute_decode).__qualname__ == (
        "kerneltrace_range_hook[EagerRunner._execute_decode]"
    )
    assert hook_of(ModelRunner.load_model).__name__ == "after_load_model"
    assert hook_of(AttentionBackend.__init__).__name__ == "after_backend_init"
    assert AttentionBackend.__init__.__wrapped__ is object.__init__


def test_calls_through_hooked_sglang_produce_our_ranges(loaded_plugin, cpu_profile, tmp_path):
    decode = SGLangDecode()
    with cpu_profile() as prof:
        decode.decode_step(0)
    out = tmp_path / "decode.json.gz"
    prof.export_chrome_trace(str(out))
    ranges = user_ranges(out)
    # The AROUND hook on AttentionBackend.__init__ wrapped the backend class's decode method.
    assert ranges.count("kt:fn:TorchNativeAttnBackend.forward_decode") == LAYERS
    sites = {name.rsplit("@", 1)[1] for name in ranges if name.startswith("kt:site:")}
    assert {f"{BACKEND_FILE}:{line}" for line in CAST_LINES} <= sites
    # set_kv_buffer's `cache_k.to(self.dtype)` store-side cast, in the real KV pool
    assert any(s.startswith("sglang/srt/mem_cache/memory_pool.py:") for s in sites)


def test_fp8_cast_is_attributed_to_the_real_sglang_line_without_stacks(
    loaded_plugin, cpu_profile, tmp_path, sglang_root
):
    decode = SGLangDecode()
    with cpu_profile() as prof:
        for step in range(2):
            decode.decode_step(step)
    out = tmp_path / "decode.json"
    prof.export_chrome_trace(str(out))
    trace = load_trace(out)
    assert trace.meta.with_stack is not True
    assert not trace.events.rows(Cat.PYTHON_FUNCTION)
    attributions = attribute(trace, None)
    table = trace.events

    # Without GPU activity the join attributes leaf CPU ops: the casts are among them.
    def copies(destination: str, source: str) -> list[int]:
        return [
            row
            for row in table.rows(Cat.CPU_OP)
            if table.name[row] == "aten::copy_"
            and list((table.args[row] or {}).get("Input type", []))[:2] == [destination, source]
        ]

    reads = copies("c10::BFloat16", "c10::Float8_e4m3fn")  # the backend's FP8 -> BF16 key/value casts
    assert len(reads) == 2 * LAYERS * decode.batch * 2  # key + value, per layer, per request, 2 steps
    assert {attributions_origin(attributions, row) for row in reads} == {
        (BACKEND_FILE, line, 1.0) for line in CAST_LINES
    }
    writes = copies("c10::Float8_e4m3fn", "c10::BFloat16")  # set_kv_buffer's BF16 -> FP8 store casts
    assert len(writes) == 2 * LAYERS * 2
    assert {attributions_origin(attributions, row) for row in writes} == {
        (POOL_FILE, line, 1.0) for line in POOL_STORE_CAST_LINES
    }
    assert _line_text(sglang_root, BACKEND_FILE, 246) == "per_req_key = per_req_key.to(per_req_query.dtype)"
    assert _line_text(sglang_root, POOL_FILE, 2931) == "cache_k = cache_k.to(self.dtype)"


def attributions_origin(attributions, op_row: int) -> tuple[str | None, int | None, float]:
    """The join's origin for a leaf CPU op (a CPU-only trace attributes leaf ops, not kernels)."""
    assert attributions.time_basis == "cpu"
    index = list(attributions.op_rows).index(op_row)
    origin = attributions.origins[attributions.origin_ids[index]]
    return (origin.file, origin.line, origin.confidence)


def test_sglang_own_profiler_carries_our_ranges(loaded_plugin, tmp_path, monkeypatch, sglang_root):
    """SGLang's profiler (the class behind /start_profile) writes a trace our explain reads exactly."""
    import torch.distributed as dist
    from sglang.srt.runtime_context import get_parallel
    from sglang.srt.utils.profile_utils import _ProfilerBase

    from tracer.api import explain_trace

    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path))
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    decode = SGLangDecode()
    with get_parallel().override(tp_rank=0, num_dp_ranks=1, pp_size=1, moe_ep_size=1):
        profiler = _ProfilerBase.create(
            activities=["CPU"],
            with_stack=False,
            record_shapes=True,
            output_dir=os.environ["SGLANG_TORCH_PROFILER_DIR"],
            output_prefix="",
            output_suffix="-decode",
            profile_id="kt",
            cpu_group=dist.group.WORLD,
            first_rank_in_node=True,
        )
        profiler.start()
        for step in range(2):
            decode.decode_step(step)
        profiler.stop()
    written = tmp_path / "kt-TP-0-decode.trace.json.gz"
    assert written.is_file()
    ranges = user_ranges(written)
    assert "kt:fn:TorchNativeAttnBackend.forward_decode" in ranges
    assert any(name.endswith(f"@{BACKEND_FILE}:246") for name in ranges)
    analysis = explain_trace(written)
    casts = [f for f in analysis.findings if f.origin.file == BACKEND_FILE]
    assert {f.origin.line for f in casts} == CAST_LINES
    assert all(f.origin.confidence == 1.0 for f in casts)


def test_outputs_are_bit_identical_to_unhooked_sglang(loaded_plugin, reference_outputs, cpu_profile):
    decode = SGLangDecode()
    with cpu_profile():
        profiled = [decode.decode_step(step) for step in range(len(reference_outputs))]
    assert all(torch.equal(a, b) for a, b in zip(profiled, reference_outputs, strict=True))


def test_a_failing_range_hook_leaves_results_intact(
    loaded_plugin, reference_outputs, cpu_profile, monkeypatch, caplog
):
    """Our hook raising inside SGLang: logged once, the original runs, results unchanged."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    import tracer.instrument.runtime as runtime
    import tracer.plugins.sglang as plugin

    def broken(name):
        raise RuntimeError("kerneltrace bug")

    target = "sglang.srt.mem_cache.memory_pool.MHATokenToKVPool.get_value_buffer"
    HookRegistry.register(target, plugin.range_hook("MHATokenToKVPool.get_value_buffer"), HookType.AROUND)
    HookRegistry.apply_hooks()
    assert hook_of(MHATokenToKVPool.get_value_buffer).__qualname__ == (
        "kerneltrace_range_hook[MHATokenToKVPool.get_value_buffer]"
    )
    monkeypatch.setattr(plugin, "named_range", broken)  # the AROUND hook's first step now raises
    monkeypatch.setattr(runtime, "_warned", set())

    def broken_record_function(name):  # and every range the site/function wrappers open, too
        raise RuntimeError("kerneltrace bug")

    runtime._bind()
    monkeypatch.setattr(runtime, "_open_range", broken_record_function)
    decode = SGLangDecode()
    with caplog.at_level(logging.WARNING, logger="kerneltrace"), cpu_profile():
        outputs = [decode.decode_step(step) for step in range(len(reference_outputs))]
    assert all(torch.equal(a, b) for a, b in zip(outputs, reference_outputs, strict=True))
    hook_warnings = [r for r in caplog.records if "MHATokenToKVPool.get_value_buffer" in r.getMessage()]
    enter_warnings = [r for r in caplog.records if "could not open the range" in r.getMessage()]
    assert len(hook_warnings) == 1 and len(enter_warnings) == 1  # logged once, though it failed every call


def test_a_failing_backend_hook_still_builds_a_working_backend(
    loaded_plugin, reference_outputs, monkeypatch, caplog
):
    import tracer.instrument.runtime as runtime
    import tracer.plugins.sglang as plugin

    def broken(*args, **kwargs):
        raise RuntimeError("kerneltrace bug")

    monkeypatch.setattr(plugin, "range_methods", broken)
    monkeypatch.setattr(runtime, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="kerneltrace"):
        decode = SGLangDecode()  # AttentionBackend.__init__ runs our AROUND hook, which now fails
        outputs = [decode.decode_step(step) for step in range(len(reference_outputs))]
    assert all(torch.equal(a, b) for a, b in zip(outputs, reference_outputs, strict=True))
    assert any("attention backend TorchNativeAttnBackend" in r.getMessage() for r in caplog.records)


def test_range_model_wraps_layer_forward_and_quant_apply(loaded_plugin, cpu_profile, tmp_path):
    """What the load_model hook does to a model: decoder layers' forward and quant methods' apply."""
    from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod
    from torch import nn

    import tracer.plugins.sglang as plugin

    class DemoDecoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)
            self.quant_method = UnquantizedLinearMethod()

        def forward(self, x):
            return self.quant_method.apply(self.proj, x)

    class DemoModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(DemoDecoderLayer() for _ in range(3))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    model = DemoModel()
    x = torch.randn(2, 8)
    expected = model(x)
    added = plugin.range_model(model)
    qualname = DemoDecoderLayer.__qualname__
    assert f"kt:fn:{qualname}.forward" in added
    assert "kt:fn:UnquantizedLinearMethod.apply" in added
    with cpu_profile() as prof:
        got = model(x)
    assert torch.equal(got, expected)
    out = tmp_path / "model.json"
    prof.export_chrome_trace(str(out))
    ranges = user_ranges(out)
    assert ranges.count(f"kt:fn:{qualname}.forward") == 3
    assert ranges.count("kt:fn:UnquantizedLinearMethod.apply") == 3


def test_environment_chooses_the_sites(loaded_plugin, monkeypatch, tmp_path, sglang_root):
    """KERNELTRACE_SITES (a `kerneltrace scan --json` file) and KERNELTRACE_MIN_RISK pick the ranges."""
    import orjson

    from tracer.static import scan

    plugin = loaded_plugin
    result = scan([sglang_root / BACKEND_FILE], cache_dir=False)
    sites_file = tmp_path / "sites.json"
    sites_file.write_bytes(orjson.dumps(result.to_dict()))
    monkeypatch.setitem(plugin._state, "instrumentation", None)
    monkeypatch.setenv("KERNELTRACE_SITE_RANGES", "0")
    assert plugin._install_site_ranges() == "site ranges off"
    monkeypatch.setenv("KERNELTRACE_SITE_RANGES", "1")
    monkeypatch.setenv("KERNELTRACE_SITES", str(sites_file))
    monkeypatch.setenv("KERNELTRACE_MIN_RISK", "50")
    plugin._install_site_ranges()
    instrumentation = plugin._state["instrumentation"]
    try:
        report = instrumentation.report
        assert {(s.path, s.line) for s in report.placed} == {
            (BACKEND_FILE, line) for line in (145, 146, *CAST_LINES)
        }
        assert all(s.risk >= 50 for s in report.placed)
    finally:
        instrumentation.uninstall()
