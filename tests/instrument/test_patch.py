"""Installing site ranges: at import (hook), into loaded modules (code swap), and undoing it."""

from __future__ import annotations

import gc
import importlib
import sys

import torch

from tests.instrument.conftest import user_ranges
from tracer.instrument import SitePlan, SiteSelection, named_range
from tracer.instrument.patch import SiteInstrumentation, SiteRangeLoader
from tracer.instrument.runtime import HELPER_NAME, function_range


def _expected_names(sites, lines):
    return {f"kt:site:{s.id}@{s.path}:{s.line}" for s in sites if s.line in lines}


def test_a_module_imported_under_the_hook_is_compiled_with_its_ranges(
    sample_package, sample_sites, cpu_profile, tmp_path
):
    assert "ktsample.sites" not in sys.modules
    with SiteInstrumentation(SitePlan(sample_sites)) as instrumentation:
        module = importlib.import_module("ktsample.sites")
        assert isinstance(module.__loader__, SiteRangeLoader)
        assert module.__dict__[HELPER_NAME] is not None
        assert instrumentation.report.imported == ["ktsample.sites"]
        with cpu_profile() as prof:
            module.cast_then_fail(torch.ones(4), fail=False)
    out = tmp_path / "t.json"
    prof.export_chrome_trace(str(out))
    assert set(user_ranges(out)) == _expected_names(sample_sites, {5, 6})
    assert not list(sample_package.glob("__pycache__/sites.*.pyc"))  # no bytecode cache written


def test_a_loaded_module_gets_its_functions_swapped_and_restored(
    sample_package, sample_sites, cpu_profile, tmp_path
):
    module = importlib.import_module("ktsample.sites")
    function = module.cast_then_fail
    original_code = function.__code__
    kept_reference = module.cast_then_fail  # e.g. `from ktsample.sites import cast_then_fail` elsewhere
    instrumentation = SiteInstrumentation(SitePlan(sample_sites, selection=SiteSelection(min_risk=18)))
    instrumentation.install()
    try:
        assert instrumentation.report.patched == ["ktsample.sites"]
        assert function.__code__ is not original_code and kept_reference is function
        with cpu_profile() as prof:
            kept_reference(torch.ones(4), fail=False)
    finally:
        instrumentation.uninstall()
    assert function.__code__ is original_code
    out = tmp_path / "t.json"
    prof.export_chrome_trace(str(out))
    # min_risk 18 keeps the `.to` site (risk 20) and drops `.contiguous()` (15)
    assert set(user_ranges(out)) == _expected_names(sample_sites, {5})


def test_loaded_functions_are_found_even_when_frozen_out_of_the_collector(sample_package, sample_sites):
    """SGLang calls gc.freeze() after start-up; frozen objects are invisible to gc.get_objects()."""
    module = importlib.import_module("ktsample.sites")
    original_code = module.cast_then_fail.__code__
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    instrumentation = SiteInstrumentation(SitePlan(sample_sites))
    try:
        instrumentation.install()
        assert module.cast_then_fail.__code__ is not original_code
        assert HELPER_NAME in module.cast_then_fail.__code__.co_names
    finally:
        instrumentation.uninstall()
        if not frozen_before:
            gc.unfreeze()
    assert module.cast_then_fail.__code__ is original_code


def test_plan_matches_files_by_site_path_and_scans_module_prefixes(sample_package, sample_sites):
    plan = SitePlan(sample_sites)
    filename = str(sample_package / "sites.py")
    assert plan.may_hold("ktsample.sites") and not plan.may_hold("json")
    assert {s.line for s in plan.sites_for_file(filename)} == {s.line for s in sample_sites}
    lazy = SitePlan(scan_modules=("ktsample",), selection=SiteSelection(rules=("KT101",)))
    assert lazy.may_hold("ktsample.sites") and not lazy.may_hold("ktsamplex")
    assert [s.text for s in lazy.sites_for_file(filename, "ktsample.sites")] == ["x.to(torch.bfloat16)"]


def test_ranges_cost_nothing_but_a_check_without_a_profiler():
    assert named_range("kt:site:x") is named_range("kt:site:y")  # one shared no-op
    calls = []

    def add(a, b=0):
        calls.append((a, b))
        return a + b

    wrapped = function_range(add, "kt:fn:add")
    assert wrapped(1, b=2) == 3 and calls == [(1, 2)] and wrapped.__name__ == "add"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert type(named_range("kt:site:x")) is torch._C._profiler._RecordFunctionFast


def test_both_range_kinds_load_as_ranges(tmp_path, monkeypatch):
    """torch files a `_RecordFunctionFast` range as a cpu_op and `ProfiledRange` (the fallback) as a
    user_annotation: the loader reads both as the same range, around the same op."""
    import orjson

    from tracer.instrument import runtime
    from tracer.load import load_trace
    from tracer.model.events import Cat

    x = torch.randn(64, 64)
    runtime._bind()
    for kind, range_type in (("fast", None), ("classic", runtime.ProfiledRange)):
        if range_type is not None:
            monkeypatch.setattr(runtime, "_open_range", range_type)
        path = tmp_path / f"{kind}.json"
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            with named_range("kt:site:0a1b2c3d4e@pkg/mod.py:12"):
                x.to(torch.bfloat16)
        prof.export_chrome_trace(str(path))
        raw = [
            e for e in orjson.loads(path.read_bytes())["traceEvents"] if e.get("name", "").startswith("kt:")
        ]
        assert [e["cat"] for e in raw] == ["cpu_op" if kind == "fast" else "user_annotation"]
        events = load_trace(path).events
        rows = [r for r in range(len(events)) if events.name[r].startswith("kt:")]
        assert [Cat(events.cat[r]) for r in rows] == [Cat.USER_ANNOTATION]
        (row,) = rows
        inside = [
            events.name[r]
            for r in range(len(events))
            if events.cat[r] == Cat.CPU_OP
            and events.ts_ns[row] <= events.ts_ns[r] < events.ts_ns[row] + events.dur_ns[row]
        ]
        assert inside[:1] == ["aten::to"], kind
