"""The annotated trace: origins in GPU events' args, everything else unchanged, still loadable."""

from __future__ import annotations

import gzip

import orjson
import pytest

from tracer.api import attribute_trace
from tracer.render.annotate import ADDED_KEYS, read_raw_trace, write_annotated_trace


@pytest.mark.parametrize("which", ["llama", "kv"])
def test_annotated_trace_round_trips_with_every_original_field(
    which, llama_trace, kv_traces, transformers_src, model_dir, tmp_path
):
    from tracer.load import load_trace

    path, root = (llama_trace, transformers_src) if which == "llama" else (kv_traces[0], model_dir)
    attributions = attribute_trace(str(path), source=(str(root),))
    trace = attributions.trace
    out = tmp_path / "annotated.json.gz"
    summary = write_annotated_trace(attributions, out)

    original = read_raw_trace(path)
    annotated = orjson.loads(gzip.decompress(out.read_bytes()))
    assert set(annotated) == set(original)
    for key in original:
        if key != "traceEvents":
            assert annotated[key] == original[key]
    assert len(annotated["traceEvents"]) == len(original["traceEvents"])
    changed = 0
    for before, after in zip(original["traceEvents"], annotated["traceEvents"], strict=True):
        assert set(before) <= set(after)
        for key, value in before.items():
            if key == "args":
                assert {k: after["args"][k] for k in value} == value
                extra = set(after["args"]) - set(value)
                assert extra <= set(ADDED_KEYS)
                changed += bool(extra)
            else:
                assert after[key] == value
    assert changed == summary.annotated > 0

    again = load_trace(out)
    assert len(again.events) == len(trace.events)
    assert list(again.events.name) == list(trace.events.name)


def test_annotated_kernels_name_the_line_that_launched_them(kv_traces, kv_analyses, model_dir, tmp_path):
    out = tmp_path / "annotated.json"
    write_annotated_trace(attribute_trace(str(kv_traces[0]), source=(str(model_dir),)), out)
    top = kv_analyses[0].findings[0]
    events = orjson.loads(out.read_bytes())["traceEvents"]
    origins = {
        e["args"]["origin"] for e in events if "origin" in e.get("args", {}) and e["name"] == top.kernel
    }
    assert top.origin.location in origins


def test_refuses_to_overwrite_its_input(kv_traces, model_dir):
    from tracer.errors import InputError

    attributions = attribute_trace(str(kv_traces[1]), source=(str(model_dir),))
    with pytest.raises(InputError, match="input trace"):
        write_annotated_trace(attributions, kv_traces[1])
