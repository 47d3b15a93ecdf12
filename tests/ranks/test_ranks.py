"""`kerneltrace explain DIR` on real per-rank traces from a 2-process gloo run (rank 1 slower in the cast)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.join.replay.conftest import REPLAY_FIXTURES, marked_line
from tests.ranks.conftest import SCRIPT, SOURCE
from tracer.cli import main
from tracer.errors import InputError
from tracer.explain.ranks import find_rank_traces
from tracer.ranks import explain_ranks

CAST = f"make_rank_traces.py:{marked_line(SCRIPT, r'# line:cast$')}"


@pytest.fixture(scope="module")
def report(rank_dir: Path):
    return explain_ranks(rank_dir, source=[SOURCE])


def test_traces_are_found_by_their_sglang_names(rank_dir: Path) -> None:
    found = find_rank_traces(rank_dir)
    assert [(t.path.name, t.rank, t.parts) for t in found] == [
        ("1790000000.0-TP-0-DECODE.trace.json.gz", 0, "TP-0"),
        ("1790000000.0-TP-1-DECODE.trace.json.gz", 1, "TP-1"),
    ]


def _cast(result):
    """The rank's finding at the cast line."""
    return next(f for f in result.analysis.findings if f.origin.location == CAST)


def test_each_rank_is_explained_with_its_own_rank(report) -> None:
    assert [r.rank for r in report.ranks] == [0, 1]
    assert [r.analysis.rank for r in report.ranks] == [0, 1]  # distributedInfo agrees with the names
    for result in report.ranks:
        assert result.analysis.steps == 3
        # the hottest of the rank's own work (on a loaded machine the fast rank's wait in all_reduce can
        # outgrow its cast, as the consistency line then says: "communication aside")
        own = [f for f in result.analysis.findings if f.category != "communication"]
        assert own[0].origin.location == CAST
        assert own[0].calls_per_step == 4  # once per layer
        assert len(result.collectives) == 12  # 4 layers x 3 steps
        assert result.collective_source == "gloo:/nccl: ranges"
    slow, fast = report.ranks[1], report.ranks[0]
    # a 6x larger pool to cast: the bytes say so exactly; the time only roughly (a loaded machine
    # stretches both ranks' casts: 2x once fell to 1.2x while other work shared the cores)
    slow_bytes, fast_bytes = (_cast(r).bytes_per_call for r in (slow, fast))
    assert slow_bytes is not None and fast_bytes is not None
    assert slow_bytes == pytest.approx(6 * fast_bytes, rel=0.01)
    assert slow.own_work_per_step_ns > fast.own_work_per_step_ns
    assert fast.collective_ns > 2 * slow.collective_ns  # rank 0 waits for rank 1


def test_combined_findings_are_keyed_by_origin_across_ranks(report) -> None:
    top = next(f for f in report.combined if f.category != "communication")  # (a wait may outgrow it)
    assert top.location == CAST and top.kernel == "aten::copy_"
    assert [f.rank for f in top.ranks] == [0, 1]
    assert [f.calls_per_step for f in top.ranks] == [4, 4]
    assert top.ranks[1].per_step_ns > top.ranks[0].per_step_ns  # (its bytes: the test above)
    assert top.total_ns == sum(f.total_ns for f in top.ranks)


def test_consistency_is_stated_in_words(report) -> None:
    lines = report.consistency
    assert re.match(
        rf"same hot origin on all 2 ranks( \(communication aside\))?: {CAST} \(aten::copy_\)", lines[0]
    )
    assert lines[1].startswith("same calls/step on all ranks for the top 5 findings")
    assert lines[2].startswith("rank 1 is slower: ") and "communication excluded" in lines[2]
    assert lines[3].startswith(f"rank 1 is slower in {CAST} (aten::copy_)")
    assert lines[4].startswith("the other ranks wait for rank 1 in collectives")
    assert lines[5].startswith("rank 1 arrives last at the 12 collectives")
    assert "clocks aligned by baseTimeNanoseconds" in lines[5]
    assert lines[6].startswith("step starts differ by at most")


def test_parallel_and_serial_runs_agree(rank_dir: Path, report) -> None:
    serial = explain_ranks(rank_dir, source=[SOURCE], workers=1)
    assert serial.consistency[:4] == report.consistency[:4]
    assert [c.origin_key for c in serial.combined[:5]] == [c.origin_key for c in report.combined[:5]]


def test_explain_accepts_a_directory(rank_dir: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["explain", str(rank_dir), "--source", str(SOURCE), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert data["combined"][0]["location"] == CAST
    assert any(line.startswith("rank 1 is slower in") for line in data["consistency"])
    text = runner.invoke(main, ["explain", str(rank_dir), "--source", str(SOURCE)])
    assert text.exit_code == 0, text.output
    assert "cross-rank consistency:" in text.output and "rank 1 is slower" in text.output
    markdown = runner.invoke(main, ["explain", str(rank_dir), "--source", str(SOURCE), "--markdown"])
    assert markdown.exit_code == 0 and f"`{CAST}`" in markdown.output


def test_bad_directories_are_one_line_input_errors(tmp_path: Path, rank_dir: Path) -> None:
    runner = CliRunner()
    empty = runner.invoke(main, ["explain", str(tmp_path)])
    assert empty.exit_code == 2 and "no profiler traces" in empty.output
    for path in rank_dir.iterdir():
        shutil.copy(path, tmp_path / path.name)
        shutil.copy(path, tmp_path / path.name.replace("1790000000.0", "1790000099.5"))
    mixed = runner.invoke(main, ["explain", str(tmp_path)])
    assert mixed.exit_code == 2 and "2 profiling runs or stages mixed here" in mixed.output
    with pytest.raises(InputError):
        find_rank_traces(tmp_path / "missing")


def test_a_ranks_graph_capture_trace_is_attached(tmp_path: Path) -> None:
    """SGLang writes capture traces under graph_capture_profile/ per TP rank: each rank's replays are
    attributed with its own capture (real H200 replay and capture traces, named as SGLang names them)."""
    captures = tmp_path / "graph_capture_profile"
    captures.mkdir()
    for rank in (0, 1):
        shutil.copy(
            REPLAY_FIXTURES / "split_replays.json.gz",
            tmp_path / f"1790000000.0-TP-{rank}-DECODE.trace.json.gz",
        )
        shutil.copy(
            REPLAY_FIXTURES / "split_capture.json.gz",
            captures / f"cuda_graph_capture-CudaGraphRunner-TP-{rank}.json.gz",
        )
    found = find_rank_traces(tmp_path)
    assert [t.captures[0].name for t in found] == [
        "cuda_graph_capture-CudaGraphRunner-TP-0.json.gz",
        "cuda_graph_capture-CudaGraphRunner-TP-1.json.gz",
    ]
    report = explain_ranks(tmp_path, source=[REPLAY_FIXTURES.parent], workers=1)
    for result in report.ranks:
        assert result.analysis.replay_fraction == 1.0
        assert result.analysis.findings[0].origin.replay
        assert result.analysis.findings[0].origin.line is not None
    assert report.consistency[0].startswith("same hot origin on all 2 ranks: make_replay_traces.py:")
    assert "no rank is slower" in report.consistency[2]


def test_ranks_match_picks_one_run(tmp_path: Path, rank_dir: Path) -> None:
    for path in rank_dir.iterdir():
        shutil.copy(path, tmp_path / path.name)
        shutil.copy(path, tmp_path / path.name.replace("-DECODE", "-EXTEND"))
    result = CliRunner().invoke(
        main, ["explain", str(tmp_path), "--ranks-match", "EXTEND", "--source", str(SOURCE), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [Path(r["path"]).name for r in data["ranks"]] == [
        "1790000000.0-TP-0-EXTEND.trace.json.gz",
        "1790000000.0-TP-1-EXTEND.trace.json.gz",
    ]
