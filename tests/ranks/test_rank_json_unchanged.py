"""`explain DIR --json` on the rank fixtures is what it was before the per-rank code moved to
`tracer.ranks` (issue 19): the outputs recorded then, in `fixtures/steps/ranks_json/`, byte for byte.

A change that means to alter this output re-records it (`python -m tracer explain
tests/fixtures/steps/NAME --json > tests/fixtures/steps/ranks_json/NAME.json` from the repository root)
and says why in its commit: when origins gained `fused` and `compiled` (issue 16; nothing else
changed); last, when the ranks' hot origin became their own work's, communication aside
(`ranks_uneven_steps`: rank 0's allreduce, waiting for rank 1, no longer reads as its hot origin)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tracer.cli import main

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "tests" / "fixtures" / "steps" / "ranks_json"


@pytest.mark.parametrize("fixture", sorted(p.stem for p in RECORDED.glob("*.json")))
def test_explain_json_of_a_rank_directory_is_unchanged(fixture: str, monkeypatch) -> None:
    monkeypatch.chdir(REPO)  # the recorded output names the traces relative to the repository
    result = CliRunner().invoke(main, ["explain", f"tests/fixtures/steps/{fixture}", "--json"])
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == (RECORDED / f"{fixture}.json").read_bytes()
