"""Graph replays of the H200 GLM-5-shaped decode step (tests/fixtures/gpu/cudagraph_decode_stack.json.gz).

The capture (242 launches) and 4 replays (242 kernels each, one correlation per replay, no External
id) are in one trace; inside the step, model.py's two whole-pool casts launch the same kernel name.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.join.replay.conftest import kernel_fits_op, marked_line, read_raw
from tracer.cli import main
from tracer.join import attribute, sites_for_trace
from tracer.join.replay.attribute import attribute_replays
from tracer.load import load_trace

FIXTURE = "cudagraph_decode_stack.json.gz"
MODEL = Path("examples/glm5_kv_cast/model.py")
COPY_KERNEL = "unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda"


@pytest.fixture(scope="module")
def graph_trace(own_gpu_traces: Path) -> Path:
    path = own_gpu_traces / FIXTURE
    if not path.exists():
        pytest.fail(f"{path} is missing (tests/fixtures/gpu/README.md says how it is captured)")
    return path


@pytest.fixture(scope="module")
def attributed(graph_trace: Path, repo_root: Path):
    trace = load_trace(graph_trace)
    sites = sites_for_trace(trace, [repo_root])
    attributions = attribute(trace, sites, source_roots=[repo_root])
    report = attribute_replays(trace, attributions, sites=sites, source_roots=[repo_root])
    return trace, attributions, report


@pytest.fixture(scope="module")
def model_lines(repo_root: Path) -> dict[str, int]:
    source = repo_root / MODEL
    return {
        "key_cast": marked_line(source, r"k = self\.pool\.get_key_buffer\(layer_id\)\.to\(q\.dtype\)"),
        "index_cast": marked_line(
            source, r"index_k = self\.backend\.pool\.get_index_k_buffer\(layer_id\)\.to\("
        ),
    }


def test_the_capture_and_every_replay_are_found(attributed) -> None:
    _, _, report = attributed
    assert len(report.captures) == 1
    assert report.captures[0].launches == 242
    assert report.captures[0].found_by == "cudaStreamBeginCapture..cudaStreamEndCapture"
    assert report.graph_launches == 4
    assert report.replay_kernels == 968
    (graph,) = report.graphs
    assert graph.method == "launch order"
    assert graph.launches == 4 and graph.capture == 0
    assert graph.confidence == pytest.approx(0.95)


def test_at_least_99_percent_of_replay_time_goes_to_the_right_capture_launch(attributed, graph_trace) -> None:
    """Checked against an independent reading of the JSON: kernel k of every replay is launch k of the
    capture, whose op (and so whose kernel family) it must match."""
    trace, attributions, report = attributed
    raw = read_raw(graph_trace)
    assert all(len(r.kernels) == len(raw.capture_ops) == 242 for r in raw.replays)
    for replay in raw.replays:  # the premise: position k's kernel is what capture op k computes
        assert all(kernel_fits_op(k["name"], op) for k, op in zip(replay.kernels, raw.capture_ops))
    expected_op = {}
    for replay in raw.replays:
        for position, kernel in enumerate(replay.kernels):
            expected_op[(replay.correlation, round(kernel["ts"] * 1000))] = raw.capture_ops[position]
    table = trace.events
    total = right = 0
    for row, origin_id in zip(attributions.gpu_rows, attributions.origin_ids):
        key = (table.correlation[row], table.ts_ns[row])
        if key not in expected_op:
            continue
        origin = attributions.origins[origin_id]
        total += table.dur_ns[row]
        if origin.replay and origin.ops and origin.ops[-1] == expected_op[key] and origin.frames:
            right += table.dur_ns[row]
    assert total == report.replay_ns
    assert right / total >= 0.99
    assert report.aligned_fraction == 1.0


def test_two_lines_launching_the_same_kernel_are_split_by_position(attributed, model_lines) -> None:
    """Both whole-pool casts run `unrolled_elementwise_kernel<direct_copy_kernel_cuda>`: the K pool
    (65536 x 576, grid 73728) from keys_cast_whole, the index-key pool (65536 x 128, grid 16384)
    from index_keys_cast_whole. Each must land on its own line, 4 per replay x 4 replays."""
    trace, attributions, _ = attributed
    table = trace.events
    by_grid: Counter = Counter()
    for row, origin_id in zip(attributions.gpu_rows, attributions.origin_ids):
        origin = attributions.origins[origin_id]
        if origin.replay and COPY_KERNEL in table.name[row]:
            by_grid[(table.args[row]["grid"][0], origin.file, origin.line)] += 1
    assert by_grid == {
        (73728, str(MODEL), model_lines["key_cast"]): 16,
        (16384, str(MODEL), model_lines["index_cast"]): 16,
    }


def test_replay_origins_carry_confidence_and_evidence(attributed, model_lines) -> None:
    _, attributions, _ = attributed
    cast = next(
        o
        for o in attributions.origins
        if o.replay and o.file == str(MODEL) and o.line == model_lines["key_cast"]
    )
    assert cast.confidence == pytest.approx(0.95)  # exact line (1.0) x alignment by launch order (0.95)
    assert cast.ops == ("aten::to", "aten::_to_copy", "aten::copy_")
    assert [f.function for f in cast.frames if f.file == str(MODEL)][-1] == "keys_cast_whole"
    assert "captured in this trace (242 launches)" in cast.evidence[0]
    assert "launch order" in cast.evidence[0]


def test_explain_prints_the_attributed_share(graph_trace: Path, repo_root: Path, model_lines) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["explain", str(graph_trace), "--source", str(repo_root), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["replay_fraction"] > 0.99
    top = data["findings"][0]
    assert top["origin"]["replay"] is True
    assert top["origin"]["location"] == f"{MODEL}:{model_lines['key_cast']}"
    second = data["findings"][1]
    assert second["origin"]["location"] == f"{MODEL}:{model_lines['index_cast']}"
    assert any(
        note.startswith("CUDA graph replays: 968 kernels of 4 graph launches")
        and "100.0% of replay time attributed to capture-time origins" in note
        for note in data["notes"]
    )
    text = runner.invoke(main, ["explain", str(graph_trace), "--source", str(repo_root), "--top", "3"])
    assert text.exit_code == 0, text.output
    assert "CUDA graph replays 100%" in text.output
    assert f"{MODEL}:{model_lines['key_cast']}" in text.output


def test_without_capture_markers_the_launches_that_never_ran_are_the_capture(
    graph_trace: Path, tmp_path: Path, repo_root: Path, model_lines
) -> None:
    """Some profilers drop cudaStreamBeginCapture/EndCapture: the same real trace without those two
    events must still yield the capture, from the launches whose kernels never ran at capture time."""
    import gzip

    with gzip.open(graph_trace) as handle:
        document = json.load(handle)
    names = ("cudaStreamBeginCapture", "cudaStreamEndCapture")
    document["traceEvents"] = [e for e in document["traceEvents"] if e.get("name") not in names]
    path = tmp_path / "no_markers.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump(document, handle)
    trace = load_trace(path)
    sites = sites_for_trace(trace, [repo_root])
    attributions = attribute(trace, sites, source_roots=[repo_root])
    report = attribute_replays(trace, attributions, sites=sites, source_roots=[repo_root])
    (capture,) = report.captures
    assert capture.found_by == "launches without GPU activity" and capture.launches == 242
    assert report.aligned_fraction == 1.0
    lines = Counter(
        o.line for o in (attributions.origins[i] for i in attributions.origin_ids) if o.replay and o.line
    )
    assert lines[model_lines["key_cast"]] == 16 and lines[model_lines["index_cast"]] == 16
