"""The fixture script, run now: its traces have the shape the committed ones have, whatever the load.

Times are not compared here (a loaded machine stretches the fast rank's cast); the committed traces
in tests/fixtures/ranks/ carry the timing claims.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.join.replay.conftest import marked_line
from tests.ranks.conftest import COMMITTED, SCRIPT, SOURCE
from tracer.explain.ranks import find_rank_traces
from tracer.ranks import explain_ranks

CAST = f"make_rank_traces.py:{marked_line(SCRIPT, r'# line:cast$')}"


def test_the_script_writes_what_was_committed(script_dir: Path) -> None:
    names = [(t.path.name, t.rank) for t in find_rank_traces(script_dir)]
    assert names == [(t.path.name, t.rank) for t in find_rank_traces(COMMITTED)]
    report = explain_ranks(script_dir, source=[SOURCE], workers=1)
    casts = []
    for result in report.ranks:
        assert result.analysis.steps == 3
        cast = next(f for f in result.analysis.findings if f.origin.location == CAST)
        assert cast.kernel == "aten::copy_" and cast.calls_per_step == 4  # once per layer
        assert len(result.collectives) == 12  # 4 layers x 3 steps
        assert result.collective_source == "gloo:/nccl: ranges"
        casts.append(cast.bytes_per_call)
    assert casts[1] == pytest.approx(6 * casts[0], rel=0.01)  # rank 1's pool is 6x larger
    assert report.consistency[1].startswith("same calls/step on all ranks for the top 5 findings")
