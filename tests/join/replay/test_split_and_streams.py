"""Replay attribution on this folder's H200 traces: capture in a second trace, no capture at all,
a graph replayed over two streams, and two graphs replayed interleaved (fixtures/README.md)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.join.replay.conftest import HERE, kernel_fits_op, marked_line
from tracer.api import explain_trace
from tracer.cli import main
from tracer.join import attribute, sites_for_trace
from tracer.join.replay.attribute import attribute_replays
from tracer.load import load_trace

SCRIPT = HERE / "make_replay_traces.py"
FILE = "make_replay_traces.py"  # as the profiler's frames name it
COPY_KERNEL = "unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda"
KEY_GRID, INDEX_GRID = 32768, 4096  # 32768 x 512 and 32768 x 64 FP8 pools, 512 elements a block


@pytest.fixture(scope="module")
def lines() -> dict[str, int]:
    names = ("key_cast", "index_cast", "verify_norm", "verify_scale")
    return {name: marked_line(SCRIPT, rf"# line:{name}$") for name in names}


def attributed(path: Path, capture: Path | None = None):
    trace = load_trace(path)
    captures = [load_trace(capture)] if capture else []
    sites = {s.id: s for t in (trace, *captures) for s in sites_for_trace(t, [HERE])}
    attributions = attribute(trace, list(sites.values()), source_roots=[HERE])
    report = attribute_replays(trace, attributions, captures, sites=list(sites.values()), source_roots=[HERE])
    return trace, attributions, report


def replayed(trace, attributions):
    """(row, origin) of every replayed GPU activity."""
    return [
        (row, attributions.origins[o])
        for row, o in zip(attributions.gpu_rows, attributions.origin_ids)
        if attributions.origins[o].replay
    ]


def copy_lines(trace, attributions) -> Counter:
    table = trace.events
    return Counter(
        (table.args[row]["grid"][0], origin.line)
        for row, origin in replayed(trace, attributions)
        if COPY_KERNEL in table.name[row]
    )


def test_without_the_capture_replays_are_labelled_with_ranked_candidates(replay_fixtures, lines) -> None:
    trace, attributions, report = attributed(replay_fixtures / "split_replays.json.gz")
    assert report.captures == ()
    assert report.graph_launches == 3 and report.replay_kernels == 54
    assert report.aligned_ns == 0 and report.line_fraction == 0.0
    assert "no profiled capture" in report.summary()
    (graph,) = report.graphs
    assert graph.method == "none" and graph.capture is None
    rows = replayed(trace, attributions)
    assert len(rows) == 54
    assert all(origin.line is None and origin.confidence == 0.0 for _, origin in rows)
    copy = next(origin for row, origin in rows if COPY_KERNEL in trace.events.name[row])
    assert "capture was not profiled" in copy.evidence[0]
    # The static map ranks the sites lowering to this kernel family; both casts are among them.
    assert {f"{FILE}:{lines['key_cast']}", f"{FILE}:{lines['index_cast']}"} <= set(copy.candidates)
    assert copy.candidates[0] == f"{FILE}:{lines['key_cast']}"  # the riskiest first


def test_a_capture_in_a_second_trace_attributes_the_replays(replay_fixtures, lines) -> None:
    trace, attributions, report = attributed(
        replay_fixtures / "split_replays.json.gz", replay_fixtures / "split_capture.json.gz"
    )
    assert report.capture_traces == (str(replay_fixtures / "split_capture.json.gz"),)
    assert report.aligned_fraction == 1.0
    assert report.graphs[0].method == "launch order"
    assert copy_lines(trace, attributions) == {
        (KEY_GRID, lines["key_cast"]): 6,
        (INDEX_GRID, lines["index_cast"]): 6,
    }
    origin = next(o for _, o in replayed(trace, attributions) if o.line == lines["key_cast"])
    assert "split_capture.json.gz" in origin.evidence[0]


def test_explain_takes_the_capture_trace(replay_fixtures, lines) -> None:
    replays, capture = replay_fixtures / "split_replays.json.gz", replay_fixtures / "split_capture.json.gz"
    analysis = explain_trace(replays, source=[HERE], capture=capture)
    assert analysis.replay_fraction == 1.0
    assert analysis.findings[0].origin.location == f"{FILE}:{lines['key_cast']}"
    result = CliRunner().invoke(
        main, ["explain", str(replays), "--capture", str(capture), "--source", str(HERE), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["findings"][0]["origin"]["location"] == f"{FILE}:{lines['key_cast']}"
    assert data["replay_attributed_fraction"] == pytest.approx(analysis.replay_attributed_fraction)
    missing = CliRunner().invoke(
        main, ["explain", str(replays), "--capture", str(replay_fixtures / "nope.json.gz")]
    )
    assert missing.exit_code == 2
    assert "nope.json.gz" in missing.output and "Traceback" not in missing.output


def test_a_graph_replayed_over_two_streams_is_merged_back_into_capture_order(replay_fixtures, lines) -> None:
    """The driver spreads each replay over streams 7 and 143, and concurrent kernels start in a
    different order from one replay to the next: start time alone would mismatch them."""
    trace, attributions, report = attributed(replay_fixtures / "two_streams.json.gz")
    table = trace.events
    rows = replayed(trace, attributions)
    assert {table.tid[row] for row, _ in rows} == {7, 143}
    (graph,) = report.graphs
    assert graph.method == "stream merge" and graph.launches == 3
    assert report.aligned_fraction == 1.0
    assert all(kernel_fits_op(table.name[row], origin.ops[-1]) for row, origin in rows)
    assert copy_lines(trace, attributions) == {
        (KEY_GRID, lines["key_cast"]): 6,
        (INDEX_GRID, lines["index_cast"]): 6,
    }


def test_two_graphs_are_each_matched_to_their_own_capture(replay_fixtures, lines) -> None:
    trace, attributions, report = attributed(replay_fixtures / "two_graphs.json.gz")
    assert [c.launches for c in report.captures] == [18, 7]
    by_capture = {g.capture: g for g in report.graphs}
    assert by_capture[0].launches == 2 and by_capture[0].kernels == 36
    assert by_capture[1].launches == 2 and by_capture[1].kernels == 14
    table = trace.events
    verify_lines = {lines["verify_norm"], lines["verify_scale"]}
    for row, origin in replayed(trace, attributions):
        assert kernel_fits_op(table.name[row], origin.ops[-1])
        in_verify = any(f.function == "verify" for f in origin.frames)
        in_decode = any(f.function == "decode" for f in origin.frames)
        assert in_verify != in_decode
        if origin.line in verify_lines:
            assert in_verify
    assert copy_lines(trace, attributions)[(KEY_GRID, lines["key_cast"])] == 4


def test_a_replay_cut_short_is_placed_by_sequence_alignment(replay_fixtures) -> None:
    """A trace that ends inside a replay holds only its first kernels: keep the real rows of one
    replay but its last 5, and the rest must still find their capture launches."""
    trace, attributions, _ = attributed(replay_fixtures / "split_replays.json.gz", None)
    table = trace.events
    last = max(table.correlation[r] for r, _ in replayed(trace, attributions))
    cut = sorted(
        (r for r, _ in replayed(trace, attributions) if table.correlation[r] == last),
        key=table.ts_ns.__getitem__,
    )
    dropped = set(cut[-5:])
    fresh = attribute(trace, sites_for_trace(trace, [HERE]), source_roots=[HERE])
    keep = [i for i, row in enumerate(fresh.gpu_rows) if row not in dropped]
    for name in ("gpu_rows", "op_rows", "origin_ids"):
        column = getattr(fresh, name)
        setattr(fresh, name, type(column)(column.typecode, (column[i] for i in keep)))
    report = attribute_replays(trace, fresh, [load_trace(replay_fixtures / "split_capture.json.gz")])
    methods = sorted(g.method for g in report.graphs)
    assert methods == ["launch order", "sequence alignment"]
    partial = next(g for g in report.graphs if g.method == "sequence alignment")
    assert partial.kernels == 13 and partial.aligned_ns == partial.replay_ns
    for row, origin in zip(fresh.gpu_rows, fresh.origin_ids):
        if table.correlation[row] == last:
            assert kernel_fits_op(table.name[row], fresh.origins[origin].ops[-1])
