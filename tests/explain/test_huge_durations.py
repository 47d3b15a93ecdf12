"""Sums past 2**63 ns stay exact: the explain passes run on int64 columns but sum as Python ints."""

from __future__ import annotations

import gzip
import json

from tracer.explain import analyse
from tracer.join import attribute
from tracer.load import load_trace

HUGE_US = 1.1e15  # 1.1e18 ns per kernel, under the loader's 2**60 ns limit; 16 of them pass 2**63


def test_kernel_time_past_int64_is_summed_exactly(own_gpu_traces, tmp_path):
    document = json.loads(gzip.decompress((own_gpu_traces / "glm5_cast_whole_stack.json.gz").read_bytes()))
    kernels = [e for e in document["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    name = max({e["name"] for e in kernels}, key=lambda n: sum(1 for e in kernels if e["name"] == n))
    inflated = [e for e in kernels if e["name"] == name][:16]
    assert len(inflated) == 16
    for event in inflated:
        event["dur"] = HUGE_US
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(document))

    plain = analyse(attribute(load_trace(own_gpu_traces / "glm5_cast_whole_stack.json.gz")))
    analysis = analyse(attribute(load_trace(path)))
    assert analysis.total_ns == sum(f.total_ns for f in analysis.findings)
    assert analysis.total_ns > 16 * 10**18 > 2**63
    grown = sum(f.total_ns for f in analysis.findings if f.kernel == name)
    before = sum(f.total_ns for f in plain.findings if f.kernel == name)
    assert grown - before > 15 * 10**18  # the inflated calls counted (those inside the steps), unwrapped
    assert 0.0 <= analysis.gpu_busy_fraction <= 1.0
