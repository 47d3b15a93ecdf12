"""Pathological structure (a replay with each kernel on its own stream, args nested 1,000 deep) and the
issue's smaller items: load workers capped, timestamps of the wrong type named, missing durations noted,
docstrings never wrapped, `--peak-gbps nan` refused."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest
from trace_fuzz import run_cli, write_trace

from tracer.api import explain_trace
from tracer.errors import InputError
from tracer.load import load_trace
from tracer.load.parallel import worker_count


def _summary(analysis) -> list[tuple[str, str, int]]:
    return sorted((f.kernel, f.origin.location, f.calls) for f in analysis.findings)


def test_a_replay_with_each_kernel_on_its_own_stream(
    cudagraph_document: dict, repo_root: Path, tmp_path: Path
) -> None:
    """978 replayed kernels on 978 streams: merged greedily by start time (a beam over 978 streams
    took 67 s here); the origins are those of the one-stream trace."""
    document = copy.deepcopy(cudagraph_document)
    for number, event in enumerate(document["traceEvents"]):
        if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and isinstance(event.get("args"), dict):
            event["args"]["stream"] = event["tid"] = 1000 + number
    spread = write_trace(document, tmp_path / "streams.json")
    original = write_trace(cudagraph_document, tmp_path / "original.json")
    assert _summary(explain_trace(spread, source=(repo_root,))) == _summary(
        explain_trace(original, source=(repo_root,))
    )


def test_annotate_keeps_args_nested_1000_deep(cudagraph_document: dict, tmp_path: Path) -> None:
    events = copy.deepcopy(cudagraph_document["traceEvents"])
    deep = "[" * 1000 + "0" + "]" * 1000
    lines = []
    for event in events:
        if event.get("cat") == "kernel":
            event["args"]["deep"] = "@DEEP@"
        lines.append("  " + json.dumps(event).replace('"@DEEP@"', deep))
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(lines) + "\n]}")
    out = tmp_path / "annotated.json.gz"
    done = run_cli("annotate", str(path), "-o", str(out), text=True)
    assert done.returncode == 0, done.stderr
    import orjson

    written = orjson.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    kernels = [e for e in written if e.get("cat") == "kernel"]
    assert kernels and all("origin" in e["args"] and "deep" in e["args"] for e in kernels)


def test_load_workers_are_capped_by_cores_and_blocks(monkeypatch) -> None:
    import os

    monkeypatch.setenv("KERNELTRACE_LOAD_WORKERS", "64")
    assert worker_count(2 << 20) == 1  # one 8 MB block: nothing to share out
    assert worker_count(10 << 30) == min(64, os.cpu_count() or 1)
    monkeypatch.setenv("KERNELTRACE_LOAD_WORKERS", "lots")
    with pytest.raises(InputError, match="KERNELTRACE_LOAD_WORKERS: 'lots' is not a number of processes"):
        worker_count(1 << 30)


def test_timestamps_of_the_wrong_type_are_named(cudagraph_document: dict, tmp_path: Path) -> None:
    document = copy.deepcopy(cudagraph_document)
    for event in document["traceEvents"]:
        if "ts" in event:
            event["ts"] = str(event["ts"])
    path = write_trace(document, tmp_path / "string_ts.json")
    with pytest.raises(InputError) as caught:
        load_trace(path)
    assert "has a usable timestamp" in str(caught.value) and "none of its" in str(caught.value)


def test_duration_events_without_dur_are_noted(cudagraph_document: dict, tmp_path: Path) -> None:
    document = copy.deepcopy(cudagraph_document)
    dropped = 0
    for event in document["traceEvents"]:
        if event.get("ph") == "X" and event.get("cat") == "cpu_op":
            del event["dur"]
            dropped += 1
    trace = load_trace(write_trace(document, tmp_path / "no_dur.json"))
    assert f'{dropped} duration events have no usable "dur": read as instants (0 ns)' in trace.notes


def test_a_site_on_a_docstring_keeps_the_docstring(tmp_path: Path) -> None:
    from tracer.instrument.rewrite import rewrite_module
    from tracer.model.site import Site

    source = '"""Module doc."""\nimport torch\n\n\ndef f(x):\n    """Function doc."""\n    return x.to(torch.float16)\n'
    sites = [
        Site(
            path="m.py",
            line=1,
            col=0,
            kind="to",
            method="to",
            function="<module>",
            def_line=None,
            receiver="x",
        ),
        Site(path="m.py", line=6, col=4, kind="to", method="to", function="f", def_line=5, receiver="x"),
        Site(path="m.py", line=7, col=11, kind="to", method="to", function="f", def_line=5, receiver="x"),
    ]
    result = rewrite_module(source, sites, "m.py")
    namespace: dict = {"__kt_range__": __import__("contextlib").nullcontext}
    exec(result.compile("m.py"), namespace)
    assert (namespace["__doc__"], namespace["f"].__doc__) == ("Module doc.", "Function doc.")
    assert [s.site.line for s in result.skipped] == [1, 6] and [s.line for s in result.placed] == [7]


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_peak_bandwidth_must_be_a_finite_positive_number(own_gpu_traces: Path, value: str) -> None:
    done = run_cli(
        "explain", str(own_gpu_traces / "cudagraph_decode_stack.json.gz"), "--peak-gbps", value, text=True
    )
    assert done.returncode == 2 and "--peak-gbps" in done.stderr and done.stderr.count("\n") == 1


def test_ranges_nested_5000_deep_are_cut_with_a_note(
    cudagraph_document: dict, repo_root: Path, tmp_path: Path
) -> None:
    """The join builds each context chain from its prefixes: depth^2. Ranges beyond 256 in a thread
    are left out while loading (real profiles nest tens), and the rest is explained as before."""
    document = copy.deepcopy(cudagraph_document)
    timed = [e for e in document["traceEvents"] if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed) - 1
    end = max(e["ts"] + (e.get("dur") or 0) for e in timed) + 1
    cpu = next(e for e in timed if e.get("cat") == "cpu_op")
    for level in range(5000):
        document["traceEvents"].append(
            {"ph": "X", "cat": "user_annotation", "name": f"range{level}", "pid": cpu["pid"], "tid": cpu["tid"],
             "ts": start + level * 1e-3, "dur": end - start - 2 * level * 1e-3}
        )  # fmt: skip
    analysis = explain_trace(write_trace(document, tmp_path / "deep.json"), source=(repo_root,))
    assert any(note.startswith("left out 4744 events nested deeper") for note in analysis.notes)
    original = explain_trace(write_trace(cudagraph_document, tmp_path / "original.json"), source=(repo_root,))
    assert [(f.kernel, f.origin.location) for f in analysis.findings] == [
        (f.kernel, f.origin.location) for f in original.findings
    ]
