"""The join's tests: static sites of tests/trace_models.py, whose CPU runs the shared fixtures profile."""

from __future__ import annotations

from pathlib import Path

import pytest

TRACE_MODELS = Path(__file__).resolve().parents[1] / "trace_models.py"


def scan_sites(paths):
    """Static sites of `paths` from the project's scanner."""
    from tracer.static import scan

    return list(scan([Path(p) for p in paths]).sites)


@pytest.fixture(scope="session")
def model_sites() -> list:
    return scan_sites([TRACE_MODELS])
