"""`graph`, `report` and `diff` on directories of real per-rank traces (2-process gloo runs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from tests.join.replay.conftest import marked_line
from tests.ranks.conftest import SCRIPT, SOURCE
from tracer.cli import main

CAST = f"make_rank_traces.py:{marked_line(SCRIPT, r'# line:cast$')}"


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_graph_draws_one_file_per_rank(rank_dir: Path, tmp_path: Path) -> None:
    result = run("graph", rank_dir, "--source", SOURCE, "-o", tmp_path / "g.svg")
    assert result.exit_code == 0, result.output
    for rank in (0, 1):
        svg = (tmp_path / f"g-rank{rank}.svg").read_text()
        assert svg.startswith("<?xml") and CAST in svg
        assert f"rank {rank}: wrote {tmp_path / f'g-rank{rank}.svg'}" in " ".join(result.output.split())
    assert not (tmp_path / "g.svg").exists()
    data = json.loads(run("graph", rank_dir, "--source", SOURCE, "--json").output)
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert all(r["graph"]["graph"]["hot_path"][0] == "root" and r["output"] is None for r in data["ranks"])


def test_default_names_come_from_the_directory(rank_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run("graph", rank_dir, "--source", SOURCE, "--top", "3")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{rank_dir.name}-rank0.svg",
        f"{rank_dir.name}-rank1.svg",
    ]


def test_report_writes_each_rank_and_a_combined_page(rank_dir: Path, tmp_path: Path) -> None:
    combined = tmp_path / "tp.report.html"
    result = run("report", rank_dir, "--source", SOURCE, "-o", combined, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["output"] == str(combined)
    assert [(r["rank"], Path(r["output"]).name) for r in data["ranks"]] == [
        (0, "tp-rank0.report.html"),
        (1, "tp-rank1.report.html"),
    ]
    for rank in (0, 1):
        page = (tmp_path / f"tp-rank{rank}.report.html").read_text()
        assert f"TP-{rank}-DECODE" in page and "<svg" in page and CAST in page
    page = combined.read_text()
    assert 'href="tp-rank0.report.html"' in page and 'href="tp-rank1.report.html"' in page
    assert "rank 1 is slower in " + CAST in page
    # rank 0's allreduce waits for rank 1 (its pool is 2x): under load that wait can outgrow the cast,
    # and the ranks are compared by their own work
    hot = data["consistency"][0]
    assert hot.startswith("same hot origin on all 2 ranks") and f": {CAST} (" in hot, hot


def test_diff_compares_each_rank_with_the_same_rank(
    rank_dir: Path, rank_dir_rank0_slow: Path, tmp_path: Path
) -> None:
    """BEFORE: rank 1 casts a 6x larger pool; AFTER: rank 0 does. Rank 1's cast gets faster."""
    result = run(
        "diff", rank_dir, rank_dir_rank0_slow, "--source", SOURCE, "--json", "-o", tmp_path / "d.svg"
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    for entry in data["ranks"]:
        assert f"TP-{entry['rank']}-" in Path(entry["before"]).name
        assert f"TP-{entry['rank']}-" in Path(entry["after"]).name
        assert Path(entry["output"]).name == f"d-rank{entry['rank']}.svg"
        assert Path(entry["output"]).stat().st_size > 0
    casts = {
        entry["rank"]: next(
            o for o in entry["diff"]["origins"] if o["location"] == CAST and o["kernel"] is None
        )
        for entry in data["ranks"]
    }
    # rank 1's pool got 6x smaller, rank 0's 6x larger: on a quiet machine rank 1's cast ~11x faster.
    # A busy machine once starved the AFTER run's small casts to within 6% of the large ones, so the
    # ranks are compared with each other: the load of each run stretches both ranks' casts alike.
    assert casts[1]["ratio"] < casts[0]["ratio"], casts
    for cast in casts.values():
        assert cast["before_calls"] == cast["after_calls"]  # same code, same calls per step
    assert data["notes"] == []
    text = run("diff", rank_dir, rank_dir_rank0_slow, "--source", SOURCE, "--top", "3")
    assert text.exit_code == 0, text.output
    assert "rank 0: " in text.output and "rank 1: " in text.output


def test_diff_pairs_by_rank_number_not_by_file_order(rank_dir: Path, tmp_path: Path) -> None:
    after = tmp_path / "after"
    after.mkdir()
    only = next(p for p in rank_dir.iterdir() if "-TP-1-" in p.name)
    shutil.copy(only, after / only.name.replace("1790000000.0", "1790000123.0"))
    result = run("diff", rank_dir, after, "--source", SOURCE, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [(r["rank"], Path(r["before"]).name) for r in data["ranks"]] == [
        (1, "1790000000.0-TP-1-DECODE.trace.json.gz")
    ]
    assert data["notes"] == [f"rank0 is only in {rank_dir} (BEFORE)"]


def test_diff_of_a_directory_and_a_file_is_a_one_line_error(rank_dir: Path) -> None:
    trace = next(rank_dir.iterdir())
    result = run("diff", rank_dir, trace)
    assert result.exit_code == 2
    assert (
        result.output.count("\n") == 1
        and "not a directory" in result.output
        and "Traceback" not in result.output
    )
