"""Findings on CUDA-graph traces: each graph launch is a step, and replayed kernels are sized by the
shapes of their capture-time op (H200 traces: tests/fixtures/gpu and this folder's fixtures)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.join.replay.conftest import HERE, marked_line
from tracer.api import explain_trace
from tracer.cli import main

GRAPH_FIXTURE = "cudagraph_decode_stack.json.gz"
MODEL = Path("examples/glm5_kv_cast/model.py")
TYPE_BYTES = {"c10::BFloat16": 2, "c10::Float8_e4m3fn": 1}


def capture_casts(path: Path) -> dict[int, int]:
    """An independent reading of the JSON: the FP8 -> BF16 `aten::copy_` calls recorded between
    cudaStreamBeginCapture and cudaStreamEndCapture, as {last dim of the pool: bytes read + written}."""
    with gzip.open(path) as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    begin = next(e["ts"] for e in events if e["name"] == "cudaStreamBeginCapture")
    end = next(e["ts"] for e in events if e["name"] == "cudaStreamEndCapture")
    found: dict[int, int] = {}
    for event in events:
        args = event.get("args", {})
        if event["name"] != "aten::copy_" or not begin <= event["ts"] <= end:
            continue
        (dst, src), (dst_type, src_type) = args["Input Dims"][:2], args["Input type"][:2]
        if (dst_type, src_type) == ("c10::BFloat16", "c10::Float8_e4m3fn"):
            found[src[-1]] = math.prod(dst) * TYPE_BYTES[dst_type] + math.prod(src) * TYPE_BYTES[src_type]
    return found


@pytest.fixture(scope="module")
def graph_trace(own_gpu_traces: Path) -> Path:
    return own_gpu_traces / GRAPH_FIXTURE


@pytest.fixture(scope="module")
def key_cast_line(repo_root: Path) -> int:
    return marked_line(repo_root / MODEL, r"k = self\.pool\.get_key_buffer\(layer_id\)\.to\(q\.dtype\)")


@pytest.fixture(scope="module")
def graph_findings(graph_trace: Path, repo_root: Path) -> dict:
    result = CliRunner().invoke(
        main, ["explain", str(graph_trace), "--source", str(repo_root), "--layers", "4", "--json"]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_each_graph_launch_is_one_step(graph_findings: dict, key_cast_line: int) -> None:
    """No ProfilerStep or other marker: the 4 `cudaGraphLaunch` replays of the decode step are the
    4 steps, so the key cast runs once per layer in each (not 0.94 per step over 17 repeats)."""
    assert graph_findings["steps"] == 4
    assert any(
        note.startswith("4 steps from CUDA graph launches") and "no step markers" in note
        for note in graph_findings["notes"]
    )
    cast = next(
        f for f in graph_findings["findings"] if f["origin"]["location"] == f"{MODEL}:{key_cast_line}"
    )
    assert cast["calls"] == 16 and cast["calls_per_step"] == 4
    assert cast["invariant"] == "4 calls/step = once per layer (4 layers)"


def test_replayed_cast_is_sized_by_its_capture_time_op(
    graph_findings: dict, graph_trace: Path, key_cast_line: int
) -> None:
    """The replayed kernel has no op of its own; the capture-time `aten::copy_` of the FP8 K pool
    (gpu-small: 65536 x 1 x 576) gives its bytes, while its time stays the replays' own."""
    expected = capture_casts(graph_trace)
    assert expected[576] == 65536 * 576 * (1 + 2)
    cast = next(
        f for f in graph_findings["findings"] if f["origin"]["location"] == f"{MODEL}:{key_cast_line}"
    )
    assert cast["origin"]["replay"] is True
    assert cast["bytes_per_call"] == expected[576] and cast["bytes_basis"] == "shapes"
    assert cast["shapes"] == ["aten::copy_ bf16[65536,1,576], fp8e4m3[65536,1,576]"]
    assert cast["gbps"] == pytest.approx(expected[576] * cast["calls"] / cast["total_ns"])
    assert 0.1 < cast["peak_fraction"] < 0.3  # ~1 TB/s of the H200's 4.8, as measured outside the profiler
    assert cast["waste"].startswith("cast 113 MB whole buffer fp8e4m3[65536,1,576] -> bf16")
    index = next(f for f in graph_findings["findings"] if f["shapes"] and "[65536,128]" in f["shapes"][0])
    assert index["bytes_per_call"] == expected[128]


def test_a_capture_in_a_second_trace_sizes_the_replays_too(replay_fixtures: Path) -> None:
    replays, capture = replay_fixtures / "split_replays.json.gz", replay_fixtures / "split_capture.json.gz"
    analysis = explain_trace(replays, source=[HERE], capture=capture)
    key_cast = f"make_replay_traces.py:{marked_line(HERE / 'make_replay_traces.py', r'# line:key_cast$')}"
    top = analysis.findings[0]
    assert top.origin.location == key_cast and top.origin.replay
    assert analysis.steps == 3 and top.calls_per_step == 2  # 2 blocks, 3 graph launches
    assert top.bytes_per_call == capture_casts(capture)[512] == 32768 * 512 * 3
