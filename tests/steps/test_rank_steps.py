"""Ranks on one definition of step: each 2-rank directory of the corpus gets every rank's true step
count by one method, the slower rank, and its per-call ratio within 10% of what the ranks measured;
ranks that disagree on the step count are told so first and compared per call."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests.steps.conftest import CORPUS, Case, cases
from tracer.explain.ranks import RankReport
from tracer.explain.ranks.consistency import step_methods_to_align
from tracer.ranks import explain_ranks

RANKS = [c for c in cases() if c.is_ranks]
CAST = "aten::to > aten::_to_copy > aten::copy_"  # the whole-pool cast, the only copy in a layer


@pytest.fixture(scope="module")
def reports() -> dict[str, RankReport]:
    return {case.name: explain_ranks(CORPUS / case.trace, workers=1) for case in RANKS}


@pytest.mark.parametrize("case", RANKS, ids=[c.name for c in RANKS])
def test_every_rank_gets_its_true_steps_the_same_way(case: Case, reports) -> None:
    report = reports[case.name]
    truth = case.steps if isinstance(case.steps, list) else [case.steps] * len(report.ranks)
    assert [r.analysis.steps for r in report.ranks] == truth
    assert len({r.analysis.step_method for r in report.ranks}) == 1
    assert all(r.analysis.steps_exact for r in report.ranks)
    for r in report.ranks:
        cast = next(f for f in r.analysis.findings if " > ".join(f.origin.ops) == CAST)
        assert cast.calls_per_step == case.layers
        assert cast.invariant == f"{case.layers} calls/step = once per layer ({case.layers} layers)"


@pytest.mark.parametrize("case", RANKS, ids=[c.name for c in RANKS])
def test_the_slower_rank_and_its_per_call_ratio(case: Case, reports) -> None:
    report = reports[case.name]
    slow, fast = case.truth["slower_rank"], 1 - case.truth["slower_rank"]
    assert any(line.startswith(f"rank {slow} is slower: ") for line in report.consistency), report.consistency
    where = next(line for line in report.consistency if line.startswith(f"rank {slow} is slower in "))
    assert CAST in where
    said = float(re.search(r"per call x([0-9.]+)", where).group(1))
    assert said == pytest.approx(case.truth["cast_per_call_ratio"], rel=0.10)
    cast = next(c for c in report.combined if c.origin_key == CAST or c.location == CAST)
    per_call = {f.rank: f.per_call_ns for f in cast.ranks}
    assert per_call[slow] / per_call[fast] == pytest.approx(case.truth["cast_per_call_ratio"], rel=0.10)


def test_ranks_that_disagree_on_the_steps_are_told_first_and_compared_per_call(reports) -> None:
    report = reports["ranks_uneven_steps"]
    first = report.consistency[0]
    assert first.startswith("the ranks disagree on the steps (rank 0: 6 (range 'decode_step'); rank 1: 7")
    assert not any("ms per step" in line or "work per step" in line for line in report.consistency)
    assert report.consistency[2].startswith(
        "calls differ only as the steps do: the same calls/step on every rank"
    )
    assert any("own work per set of calls every rank made" in line for line in report.consistency)
    assert not any(line.startswith("step starts differ") for line in report.consistency)


def test_ranks_that_agree_say_how_the_steps_were_found(reports) -> None:
    report = reports["ranks_decode_step"]
    assert report.consistency[-1] == "steps: 6 on every rank, found the same way (range 'decode_step')"
    assert any(line.startswith("step starts differ by at most") for line in report.consistency)


def test_ranks_found_another_way_are_explained_again_the_majority_way(reports) -> None:
    results = list(reports["ranks_decode_step"].ranks)
    other = replace(
        results[1], analysis=replace(results[1].analysis, step_method="repetition of the kernel sequence")
    )
    assert step_methods_to_align([results[0], other]) == {1: "range"}
    assert step_methods_to_align(results) == {}


def test_a_rank_whose_trace_lacks_the_step_ranges_is_still_compared_like_with_like(tmp_path: Path) -> None:
    # Rank 1 lost its decode_step ranges: asked to find them by range, it has none, so it keeps its
    # own (the kernel period); the ranks still agree on 6 steps, and the report says how each found them.
    source = CORPUS / "ranks_decode_step"
    for path in source.glob("*.json.gz"):
        if "-TP-1-" in path.name:
            data = json.loads(gzip.decompress(path.read_bytes()))
            data["traceEvents"] = [e for e in data["traceEvents"] if e.get("name") != "decode_step"]
            with gzip.open(tmp_path / path.name, "wt") as f:
                json.dump(data, f)
        else:
            shutil.copy(path, tmp_path / path.name)
    report = explain_ranks(tmp_path, workers=1)
    assert [r.analysis.steps for r in report.ranks] == [6, 6]
    assert report.consistency[-1].startswith(
        "steps: 6 on every rank, found in different ways (rank 0 by range"
    )
    assert "rank 1 by repetition of the kernel sequence" in report.consistency[-1]
