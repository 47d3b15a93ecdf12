"""SGLang plugin: named record_function ranges inside a running SGLang server, no SGLang edits.

Off by default. With ``KERNELTRACE=1`` in the server's environment (and ``kerneltrace`` allowed by
``SGLANG_PLUGINS`` when that list is set), SGLang's `load_plugins()` calls `register()` in each of
its processes, which:

- registers AROUND hooks (`sglang.srt.plugins.hook_registry.HookRegistry`) that wrap each forward
  pass in ``kt:fn:ModelRunner.forward``, and the eager/graph runners' decode and extend paths in
  ``kt:fn:EagerRunner._execute_decode`` and the like;
- wraps every attention backend's ``forward_decode``/``forward_extend`` (when the backend is built),
  each decoder layer's ``forward`` and each quantization method's ``apply`` (when the model is
  loaded) in ``kt:fn:<Class>.<method>`` ranges;
- puts ``kt:site:`` ranges around the statements of the hot sites (risk >= ``KERNELTRACE_MIN_RISK``,
  default 40) in SGLang's attention, quantization, MoE and KV-cache modules and in the model's own
  file, found by the static scanner as each module loads (or read from ``KERNELTRACE_SITES``).

The ranges are torch profiler ranges (`tracer.instrument.runtime`: torch's `_RecordFunctionFast`,
filed as ``cpu_op`` events named ``kt:...``), recorded only while a profiler runs, so SGLang's own
profiler (``/start_profile``, files under ``SGLANG_TORCH_PROFILER_DIR``) carries them. With
``KERNELTRACE_PROFILE_CAPTURE=1`` the plugin also profiles the CUDA-graph capture
(`tracer.plugins.sglang_capture`): the capture-time ops and ranges that graph replays are attributed
to, written to ``$SGLANG_TORCH_PROFILER_DIR/graph_capture_profile/`` per rank. Every hook is
fail-safe: a failure of ours is logged once and the original runs untouched.

Environment (read once, when SGLang loads the plugin):

- ``KERNELTRACE=1``: the plugin on (off by default: nothing is hooked);
- ``KERNELTRACE_PROFILE_CAPTURE=1``: profile each CUDA-graph capture pass into a capture trace;
- ``KERNELTRACE_MIN_RISK`` (default 40): site ranges only for sites at or above this risk;
- ``KERNELTRACE_SITES``: a ``kerneltrace scan --json`` file to take the sites from, instead of
  scanning modules as they load;
- ``KERNELTRACE_MODULES``: comma-separated module prefixes given site ranges (default: SGLang's
  attention, quantization, MoE and KV-cache packages);
- ``KERNELTRACE_SITE_RANGES=0``: function ranges only;
- ``KERNELTRACE_INDUCTOR=0``: leave Inductor alone. Otherwise (``--enable-torch-compile``) the plugin
  turns on Inductor's provenance tracking and PyTorch's structured trace into
  ``$SGLANG_TORCH_PROFILER_DIR/torch_trace/`` (`tracer.instrument.inductor`; a ``TORCH_TRACE`` of your
  own is kept), beside the traces, where `kerneltrace explain` finds which user lines each compiled
  kernel fused.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from typing import Any

from tracer.instrument.runtime import function_range, is_range_wrapper, named_range, warn_once
from tracer.model.ranges import function_range_name

logger = logging.getLogger("kerneltrace")

ENABLE_ENV = "KERNELTRACE"  # "1" turns the plugin on
MIN_RISK_ENV = "KERNELTRACE_MIN_RISK"  # site ranges only for sites at or above this risk
SITES_ENV = "KERNELTRACE_SITES"  # a `kerneltrace scan --json` file instead of scanning at load
SITE_RANGES_ENV = "KERNELTRACE_SITE_RANGES"  # "0": function ranges only
HOT_MODULES_ENV = "KERNELTRACE_MODULES"  # comma-separated module prefixes to give site ranges
INDUCTOR_ENV = "KERNELTRACE_INDUCTOR"  # "0": no Inductor provenance, no structured trace
PROFILER_DIR_ENV = "SGLANG_TORCH_PROFILER_DIR"  # where SGLang writes its traces (default /tmp)
DEFAULT_MIN_RISK = 40.0
HOT_MODULES = (
    "sglang.srt.layers.attention",
    "sglang.srt.layers.quantization",
    "sglang.srt.layers.moe",
    "sglang.srt.mem_cache",
)

# Forward-pass entry points of sglang 0.5.23 (targets absent in other versions are skipped).
STEP_TARGETS = (
    "sglang.srt.model_executor.model_runner.ModelRunner.forward",
    "sglang.srt.model_executor.model_runner.ModelRunner.forward_split_prefill",
    "sglang.srt.model_executor.runner.eager_runner.EagerRunner._execute_decode",
    "sglang.srt.model_executor.runner.eager_runner.EagerRunner._execute_extend",
    "sglang.srt.model_executor.runner.eager_runner.EagerRunner._execute_idle",
    "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner.execute",
    "sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner.execute",
)
BACKEND_INIT = "sglang.srt.layers.attention.base_attn_backend.AttentionBackend.__init__"
LOAD_MODEL = "sglang.srt.model_executor.model_runner.ModelRunner.load_model"
BACKEND_METHODS = ("forward_decode", "forward_extend")

_state: dict[str, Any] = {"registered": False, "instrumentation": None}


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def register() -> None:
    """SGLang's general-plugin entry point (`sglang.srt.plugins`): called with no arguments."""
    if not enabled() or _state["registered"]:
        return
    _state["registered"] = True
    try:
        _register()
    except Exception:  # never stop SGLang from starting
        logger.warning("kerneltrace: the SGLang plugin could not register its hooks", exc_info=True)


def _register() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    hooked = []
    for target in STEP_TARGETS:
        if _exists(target):
            HookRegistry.register(target, range_hook(_qualname(target)), HookType.AROUND)
            hooked.append(target)
    if _exists(BACKEND_INIT):
        HookRegistry.register(BACKEND_INIT, after_backend_init, HookType.AROUND)
        hooked.append(BACKEND_INIT)
    if _exists(LOAD_MODEL):
        HookRegistry.register(LOAD_MODEL, after_load_model, HookType.AROUND)
        hooked.append(LOAD_MODEL)
    hooked += _register_capture_profiling(HookRegistry, HookType)
    sites = _install_site_ranges()
    inductor = record_inductor_provenance()
    logger.info("kerneltrace: %d SGLang hooks registered; %s; %s", len(hooked), sites, inductor)


def record_inductor_provenance() -> str:
    """Inductor's provenance and the structured trace on, into the traces' directory (for compiled
    models: ``--enable-torch-compile``); unless ``KERNELTRACE_INDUCTOR=0``."""
    if os.environ.get(INDUCTOR_ENV, "1").strip() == "0":
        return "Inductor provenance off"
    from pathlib import Path

    from tracer.instrument.inductor import record_provenance

    recording = record_provenance(Path(os.environ.get(PROFILER_DIR_ENV) or "/tmp") / "torch_trace")
    switches = ", ".join(f"{k}={v}" for k, v in recording.switches.items()) or "no switch in this torch"
    return f"Inductor provenance ({switches}), structured trace in {recording.trace_dir}"


def _register_capture_profiling(registry: Any, hook_type: Any) -> list[str]:
    """AROUND hooks on the graph runners' capture pass, when ``KERNELTRACE_PROFILE_CAPTURE`` asks."""
    from tracer.plugins.sglang_capture import CAPTURE_TARGETS, capture_profile_hook, capture_profiling_enabled

    if not capture_profiling_enabled():
        return []
    hooked = [target for target in CAPTURE_TARGETS if _exists(target)]
    for target in hooked:
        registry.register(target, capture_profile_hook, hook_type.AROUND)
    return hooked


def _exists(target: str) -> bool:
    """Does `module.Class.attr` exist in this SGLang? (imports the module, as apply_hooks will)."""
    module_name, class_name, attribute = target.rsplit(".", 2)
    try:
        owner = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        logger.debug("kerneltrace: %s is not in this SGLang; not hooked", target)
        return False
    return attribute in vars(owner) or hasattr(owner, attribute)


def _qualname(target: str) -> str:
    return ".".join(target.rsplit(".", 2)[-2:])


# -- the hooks --------------------------------------------------------------------------------------
def range_hook(qualname: str) -> Callable[..., Any]:
    """An AROUND hook running the original inside ``kt:fn:<qualname>``; on our failure, just the original."""
    name = function_range_name(qualname)

    def kerneltrace_range_hook(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            scope = named_range(name)
        except Exception:
            warn_once(f"hook:{name}", "range hook for %s failed; calling the original", qualname)
            return original(*args, **kwargs)
        with scope:
            return original(*args, **kwargs)

    kerneltrace_range_hook.__qualname__ = f"kerneltrace_range_hook[{qualname}]"
    return kerneltrace_range_hook


def after_backend_init(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND `AttentionBackend.__init__`: build the backend, then range its class's decode/extend."""
    result = original(self, *args, **kwargs)
    try:
        range_methods(type(self), BACKEND_METHODS)
        _add_site_module(type(self).__module__)
    except Exception:
        warn_once("backend", "could not add ranges to attention backend %s", type(self).__name__)
    return result


def after_load_model(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND `ModelRunner.load_model`: load, then range decoder layers and quant methods, and
    give the model's own module its site ranges."""
    result = original(self, *args, **kwargs)
    try:
        model = getattr(self, "model", None)
        if model is not None:
            range_model(model)
            _add_site_module(type(model).__module__)
    except Exception:
        warn_once("model", "could not add ranges to the loaded model")
    return result


def range_methods(cls: type, names: tuple[str, ...]) -> list[str]:
    """Wrap each method `names` of `cls` where it is defined (once); returns the range names added."""
    added = []
    for name in names:
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or owner is object:
            continue
        raw = vars(owner)[name]
        if (
            is_range_wrapper(raw)
            or isinstance(raw, (staticmethod, classmethod, property))
            or not callable(raw)
        ):
            continue
        range_name = function_range_name(f"{owner.__qualname__}.{name}")
        setattr(owner, name, function_range(raw, range_name))
        added.append(range_name)
    return added


def range_model(model: Any) -> list[str]:
    """Ranges on each decoder layer class's ``forward`` (children of a ``*layers`` ModuleList) and on
    each quantization method's ``apply`` found on the model's modules."""
    from torch import nn

    added: list[str] = []
    layer_classes: set[type] = set()
    method_classes: set[type] = set()
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1].endswith("layers"):
            layer_classes.update(type(child) for child in module)
        quant_method = getattr(module, "quant_method", None)
        if quant_method is not None and not isinstance(quant_method, nn.Module):
            method_classes.add(type(quant_method))
    for cls in sorted(layer_classes, key=lambda c: c.__qualname__):
        added += range_methods(cls, ("forward",))
    for cls in sorted(method_classes, key=lambda c: c.__qualname__):
        added += range_methods(cls, ("apply",))
    return added


# -- site ranges ------------------------------------------------------------------------------------
def _install_site_ranges() -> str:
    if os.environ.get(SITE_RANGES_ENV, "1").strip() == "0":
        return "site ranges off"
    from tracer.instrument.patch import SiteInstrumentation
    from tracer.instrument.plan import SitePlan, SiteSelection

    min_risk = _min_risk()
    selection = SiteSelection(min_risk=min_risk)
    sites_file = os.environ.get(SITES_ENV)
    if sites_file:
        from pathlib import Path

        from tracer.api import read_sites
        from tracer.errors import InputError

        try:  # read like a trace: a FIFO or /dev/zero here must not hold up SGLang's start-up
            sites = read_sites(Path(sites_file))
        except InputError as err:
            logger.warning("kerneltrace: %s=%s: site ranges off", SITES_ENV, err)
            return "site ranges off (bad sites file)"
        plan = SitePlan(sites, selection=selection)
    else:
        modules = os.environ.get(HOT_MODULES_ENV)
        prefixes = tuple(m.strip() for m in modules.split(",") if m.strip()) if modules else HOT_MODULES
        plan = SitePlan(scan_modules=prefixes, selection=selection)
    instrumentation = SiteInstrumentation(plan).install()
    _state["instrumentation"] = instrumentation
    return f"min risk {min_risk:g}; {instrumentation.report.summary()} so far"


def _min_risk() -> float:
    text = os.environ.get(MIN_RISK_ENV, "").strip()
    try:
        value = float(text) if text else DEFAULT_MIN_RISK
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 100:  # also false for nan
        logger.warning(
            "kerneltrace: %s=%r is not a risk 0..100; using %g", MIN_RISK_ENV, text, DEFAULT_MIN_RISK
        )
        return DEFAULT_MIN_RISK
    return value


def _add_site_module(module_name: str) -> None:
    instrumentation = _state["instrumentation"]
    if instrumentation is None or os.environ.get(SITES_ENV):
        return
    if any(module_name == p or module_name.startswith(p + ".") for p in instrumentation.plan.scan_modules):
        return  # already covered (patched when loaded, or hooked at import)
    module = importlib.import_module(module_name)
    instrumentation.add_loaded_module(module)
    logger.info("kerneltrace: site ranges for %s; %s", module_name, instrumentation.report.summary())
