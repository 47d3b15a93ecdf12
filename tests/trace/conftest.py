"""Traces the trace tests share: real torch.profiler runs of tests/trace/trace_models.py on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import trace_models

HERE = Path(__file__).resolve().parent
CPU_FIXTURES = HERE.parent / "fixtures" / "cpu"


@pytest.fixture(scope="session")
def stack_trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 steps x 3 layers of `trace_models.Stack`, profiled with_stack=True."""
    path = tmp_path_factory.mktemp("cpu-traces") / "stack.json"
    trace_models.profile_stack(str(path), with_stack=True)
    return path


@pytest.fixture(scope="session")
def nostack_trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same run profiled with_stack=False: no python_function events at all."""
    path = tmp_path_factory.mktemp("cpu-traces") / "nostack.json"
    trace_models.profile_stack(str(path), with_stack=False)
    return path


@pytest.fixture(scope="session")
def model_lines() -> dict[str, int]:
    return trace_models.marker_lines()


@pytest.fixture(scope="session")
def cpu_fixtures() -> Path:
    return CPU_FIXTURES


def scan_sites(paths):
    """Static sites of `paths` from the project's scanner (tracer.static.scan)."""
    static = pytest.importorskip(
        "tracer.static", reason="the static scanner (tracer.static.scan) is not in yet"
    )
    if not hasattr(static, "scan"):
        pytest.skip("the static scanner (tracer.static.scan) is not in yet")
    return list(static.scan([Path(p) for p in paths]).sites)


@pytest.fixture(scope="session")
def model_sites() -> list:
    return scan_sites([HERE / "trace_models.py"])
