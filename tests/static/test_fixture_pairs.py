"""Fixture pairs, TorchFix style: `fixtures/<family>/<case>.py` beside `<case>.txt`, which lists every
finding the scan must report in it as `line:col CODE` (line from 1, column from 0; `#` starts a
comment). One test walks every pair through both scan paths; a new case is two files, no code."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracer.static import load_rule_set, scan_source

FIXTURES = Path(__file__).with_name("fixtures")
RULES = load_rule_set()
CASES = sorted(FIXTURES.glob("*/*.py"))


def expected_findings(listing: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in listing.read_text().splitlines())
    return [line for line in lines if line]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.stem}" for c in CASES])
@pytest.mark.parametrize("prefilter", [True, False], ids=["fast", "reference"])
def test_fixture_pair(case: Path, prefilter: bool) -> None:
    result = scan_source(case.read_bytes(), f"{case.parent.name}/{case.name}", RULES, prefilter=prefilter)
    assert result.skipped is None and not result.notes
    found = [f"{site.line}:{site.col} {site.rule}" for site in result.sites]
    assert found == expected_findings(case.with_suffix(".txt"))


def test_every_family_and_rule_has_a_fixture() -> None:
    assert {case.with_suffix(".txt") for case in CASES} == set(FIXTURES.glob("*/*.txt"))
    assert {rule.family for rule in RULES.rules} == {case.parent.name for case in CASES}
    listed = {line.split()[1] for case in CASES for line in expected_findings(case.with_suffix(".txt"))}
    assert listed == {rule.code for rule in RULES.rules}
