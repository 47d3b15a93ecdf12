"""Before/after a fix: the whole-buffer cast vanishes, the gather-then-cast origin appears."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from kv_cast_model import GATHER_CAST_MARK, WHOLE_CAST_MARK, marked_line

from tracer.explain.diff import FASTER, NEW, VANISHED, diff_analyses
from tracer.graph.diff import build_diff_graph
from tracer.render.dot import render_graph


def _row(rows, suffix):
    return next(row for row in rows if row.location.endswith(suffix))


def test_diff_reports_the_cast_vanishing_and_the_gather_appearing(kv_analyses):
    before, after = kv_analyses
    diff = diff_analyses(before, after)
    whole = _row(diff.origins, f"kv_cast_model.py:{marked_line(WHOLE_CAST_MARK)}")
    gather = _row(diff.origins, f"kv_cast_model.py:{marked_line(GATHER_CAST_MARK)}")

    assert diff.per == "step" and diff.before_steps == diff.after_steps == 3
    assert whole.change == VANISHED and whole.after_ns == 0 and whole.before_ns > 0
    assert whole.before_calls >= 4  # at least one cast per layer per step
    assert gather.change == NEW and gather.before_ns == 0 and gather.after_ns > 0
    # How much faster the fix runs is measured time on a shared CPU: bench/bench_diff_kv.py prints it.
    assert diff.step_ratio is not None and diff.after_gpu_ns > 0 and diff.before_gpu_ns > 0
    assert diff.origins[0].key == whole.key  # the biggest change comes first
    # the per-kernel rows of the vanished origin sum to the origin's row
    kernel_rows = [row for row in diff.kernels if row.key == whole.key]
    assert sum(row.before_ns for row in kernel_rows) == pytest.approx(whole.before_ns)


def test_diff_of_a_trace_with_itself_is_all_same(kv_analyses):
    before, _ = kv_analyses
    diff = diff_analyses(before, before)
    assert {row.change for row in diff.origins} == {"same"}
    assert diff.gpu_delta_ns == 0


def test_diff_graph_marks_vanished_and_new_nodes(kv_analyses, tmp_path):
    before, after = kv_analyses
    graph = build_diff_graph(before, after, top=10)
    changes = {
        attrs["location"].rsplit("/", 1)[-1]: attrs["change"]
        for _, attrs in graph.nodes(data=True)
        if attrs["kind"] == "site"
    }

    assert changes[f"kv_cast_model.py:{marked_line(WHOLE_CAST_MARK)}"] == VANISHED
    assert changes[f"kv_cast_model.py:{marked_line(GATHER_CAST_MARK)}"] == NEW
    assert graph.nodes["root"]["change"] == FASTER
    svg = render_graph(graph, tmp_path / "diff.svg")
    text = " ".join(ET.parse(svg).getroot().itertext())
    assert "vanished" in text and "new:" in text


def test_glm5_fix_on_the_h200_removes_the_whole_pool_cast(glm5_analyses, tmp_path):
    before, after = glm5_analyses
    diff = diff_analyses(before, after)
    whole = _row(diff.origins, "examples/glm5_kv_cast/model.py:209")
    gather = _row(diff.origins, "examples/glm5_kv_cast/model.py:214")

    assert diff.origins[0] is whole
    assert whole.change == VANISHED and whole.before_calls == 78 and whole.after_calls == 0
    assert 60e6 < whole.before_ns < 75e6  # ~854 us x 78 layers per step
    # line 214 runs once per layer and launches two kernels each time: the gather of the live rows,
    # then their cast. The origin's calls are the line's runs (as explain counts them), each kernel's its own.
    assert gather.change == NEW and gather.after_calls == 78
    kernels = [row for row in diff.kernels if row.key == "examples/glm5_kv_cast/model.py:214"]
    assert len(kernels) == 2 and all(row.after_calls == 78 for row in kernels)
    assert gather.after_ns < whole.before_ns / 50
    assert diff.after_gpu_ns < 0.2 * diff.before_gpu_ns  # the fix removes ~85% of the GPU's work

    graph = build_diff_graph(before, after, top=6)
    sites = {attrs["location"]: attrs for _, attrs in graph.nodes(data=True) if attrs["kind"] == "site"}
    assert sites["examples/glm5_kv_cast/model.py:209"]["change"] == VANISHED
    assert sites["examples/glm5_kv_cast/model.py:214"]["change"] == NEW
    text = " ".join(ET.parse(render_graph(graph, tmp_path / "glm5_diff.svg")).getroot().itertext())
    assert "66.58 ms → 673 µs/step (-99%)" in text
