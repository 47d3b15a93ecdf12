"""A seeded part of the fuzz classes of issue #17 in every test run (bench/fuzz_traces.py runs thousands):
bombs, rank directories with bad ranks, damaged scan caches, bad side inputs, odd file names and
pathological shapes each end in a result or a one-line error naming the right file."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import pytest
import robust_cases
import trace_fuzz

CASES_PER_CLASS = int(os.environ.get("KERNELTRACE_FUZZ_CLASS_CASES", "4"))


@pytest.mark.parametrize("kind", robust_cases.CLASSES)
def test_seeded_cases_of_each_class(fuzz_seeds, kind: str) -> None:
    rng = random.Random(f"issue-17-{kind}")  # the same cases on every run
    with tempfile.TemporaryDirectory() as directory:
        for number in range(CASES_PER_CLASS):
            case = robust_cases.make_case(kind, fuzz_seeds, rng, Path(directory), number)
            with trace_fuzz.time_bound(120):
                outcome = robust_cases.run_case(case)
            assert outcome.ok, f"{case.label}: {outcome.detail}"
