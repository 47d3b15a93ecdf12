"""Fixtures of the static-scan tests: the rule set, and one cold scan of all of sglang per session."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tracer.static import ScanResult, load_rule_set, scan


@pytest.fixture(scope="session")
def rules():
    return load_rule_set()


@pytest.fixture(scope="session")
def sglang_package(sglang_root: Path) -> Path:
    return sglang_root / "sglang"


@pytest.fixture(scope="session")
def full_scan(sglang_package: Path, tmp_path_factory) -> tuple[ScanResult, Path]:
    """A cold scan of the whole installed sglang package into a fresh cache (slow: once per session)."""
    cache = tmp_path_factory.mktemp("kerneltrace-cache")
    started = time.perf_counter()
    result = scan([sglang_package], cache_dir=cache)
    assert time.perf_counter() - started < 600
    return result, cache
