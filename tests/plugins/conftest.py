"""Fixtures of the SGLang plugin tests: SGLang importable on CPU, reference outputs, the loaded plugin.

`make setup` installs sglang==0.5.23 (--no-deps) and requirements-sglang.txt. One module SGLang
imports at package level cannot be had on a CPU-only torch: torchvision (PyPI's wheels are CUDA
builds that do not load against torch's CPU wheel; SGLang imports it only for multimodal
preprocessing, which these tests never run). When it does not import, a stand-in package is put on
the import path: its attributes exist so that `import torchvision.transforms as T` succeeds, and
calling any of them raises ImportError. Nothing else is replaced.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
import types

import pytest

STAND_IN_VERSION = "0.0.0"


class _Unavailable:
    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args, **kwargs):
        raise ImportError(f"{self._name}: torchvision is not installed (CPU stand-in for the tests)")

    def __getattr__(self, attribute: str) -> _Unavailable:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Unavailable(f"{self._name}.{attribute}")


class _TorchvisionStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__version__ = STAND_IN_VERSION
        module.__getattr__ = _module_attribute(spec.name)
        return module

    def exec_module(self, module) -> None:
        pass


def _module_attribute(module_name: str):
    def attribute(name: str) -> _Unavailable:
        if name.startswith("__"):  # __file__, __spec__ ...: absent, as on any module without them
            raise AttributeError(name)
        return _Unavailable(f"{module_name}.{name}")

    return attribute


def _ensure_torchvision() -> None:
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 (a broken torchvision install raises anything: stand in for it)
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        sys.meta_path.append(_TorchvisionStandIn())


@pytest.fixture(scope="session")
def sglang_cpu():
    """SGLang's modules imported on CPU (sglang==0.5.23)."""
    _ensure_torchvision()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import sglang.srt.layers.attention.torch_native_backend
        import sglang.srt.mem_cache.memory_pool
        import sglang.srt.plugins  # noqa: F401
    return sys.modules["sglang"]


@pytest.fixture(scope="session")
def reference_outputs(sglang_cpu):
    """Decode outputs of the real SGLang attention path before any plugin touched SGLang."""
    from sglang.srt.plugins import hook_registry

    from tests.plugins.sglang_cpu import SGLangDecode, settle

    assert not hook_registry.HookRegistry._patched, "a hook was applied before the reference run"
    return settle(SGLangDecode())


@pytest.fixture(scope="session")
def unhooked_capture_outputs(sglang_cpu):
    """SGLang's CUDA-graph capture pass (on CPU: `capture_runner`) before any plugin touched SGLang."""
    from sglang.srt.plugins import hook_registry

    from tests.plugins.sglang_cpu import SGLangDecode, capture_runner, sglang_ranks

    assert not hook_registry.HookRegistry._patched, "a hook was applied before the reference run"
    runner = capture_runner(SGLangDecode())
    with sglang_ranks(0):
        assert runner._capture_one_stream() is None
    return runner.captured_outputs


@pytest.fixture(scope="session")
def loaded_plugin(reference_outputs, unhooked_capture_outputs):
    """`sglang.srt.plugins.load_plugins()` run with KERNELTRACE=1 and KERNELTRACE_PROFILE_CAPTURE=1:
    SGLang discovers and runs us."""
    from sglang.srt import plugins

    saved = {k: os.environ.get(k) for k in ("KERNELTRACE", "KERNELTRACE_PROFILE_CAPTURE", "SGLANG_PLUGINS")}
    os.environ["KERNELTRACE"] = "1"
    os.environ["KERNELTRACE_PROFILE_CAPTURE"] = "1"
    os.environ["SGLANG_PLUGINS"] = "kerneltrace"
    logging.getLogger("kerneltrace").setLevel(logging.INFO)
    try:
        plugins.load_plugins()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    import tracer.plugins.sglang as plugin

    assert plugin._state["registered"], "load_plugins() did not run tracer.plugins.sglang:register"
    yield plugin
    # Leave later test areas an import system without our hook (SGLang's applied hooks stay: they
    # are no-ops without a profiler, and HookRegistry has no way to take them off).
    if plugin._state["instrumentation"] is not None:
        plugin._state["instrumentation"].uninstall()
