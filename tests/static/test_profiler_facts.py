"""What a real torch.profiler trace (CPU) shows for the sites the scanner maps: names and def lines."""

from __future__ import annotations

import importlib.util
import json
import re

from tracer.static import load_rule_set, scan_source

MODULE = """import functools
import torch


def deco(f):
    @functools.wraps(f)
    def wrapper(*args):
        return f(*args)
    return wrapper


@deco
def decorated(x, buf, idx):
    y = x.to(torch.float64)
    buf[idx] = y[: idx.numel()].float()
    z = torch.cat([x, x]).contiguous()
    return x.float(), z.view(torch.int32)
"""


def test_profiler_names_match_sites(tmp_path):
    import torch
    from torch.profiler import ProfilerActivity, profile

    path = tmp_path / "kt_profiled_mod.py"
    path.write_text(MODULE)
    spec = importlib.util.spec_from_file_location("kt_profiled_mod", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x, buf, idx = torch.randn(8, 4), torch.zeros(8, 4), torch.tensor([1, 2])
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        module.decorated(x, buf, idx)
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    frames = [e["name"] for e in events if e.get("cat") == "python_function"]
    ops = {e["name"] for e in events if e.get("cat") == "cpu_op"}

    sites = scan_source(MODULE, "kt_profiled_mod.py", load_rule_set()).sites
    (def_line,) = {s.def_line for s in sites}
    # CPython's co_firstlineno for a decorated function is the decorator's line (12), not `def` (13),
    # and that is the number the profiler prints: `kt_profiled_mod.py(12): decorated`
    assert def_line == 12
    assert any(re.search(rf"kt_profiled_mod\.py\({def_line}\): decorated$", f) for f in frames), frames
    # builtin calls appear as `<built-in method NAME of ...>` with NAME == Site.method
    builtins = {m.group(1) for f in frames if (m := re.match(r"<built-in method (\w+) of", f))}
    call_sites = [s for s in sites if s.method != "__setitem__"]
    assert {s.method for s in call_sites} == {"to", "float", "cat", "contiguous", "view"}
    assert {s.method for s in call_sites} <= builtins
    # a subscript store has no Python-level frame: `aten::index_put_` hangs off the function's frame
    assert not any("__setitem__" in f for f in frames)
    assert "aten::index_put_" in ops
    store = next(s for s in sites if s.method == "__setitem__")
    assert store.aten_ops[0] == "aten::index_put_" and store.rule == "KT306"
