"""Fixtures every test area shares: where the real inputs live."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import trace_models

REPO = Path(__file__).resolve().parents[1]
# The transformers traces first lived in ../shared/fixtures/gpu-traces; a copy is here so that a clone
# alone runs every test (tests/fixtures/transformers/README.md says how they were made).
SHARED_GPU_TRACES = REPO / "tests" / "fixtures" / "transformers"
OWN_GPU_TRACES = REPO / "tests" / "fixtures" / "gpu"
TRANSFORMERS_SRC = REPO / "build" / "src" / "transformers-5.17.0"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_gpu_traces() -> Path:
    """Real H200 traces of HuggingFace transformers models (torch 2.11, no CallFrom)."""
    return SHARED_GPU_TRACES


@pytest.fixture(scope="session")
def own_gpu_traces() -> Path:
    """Our own H200 captures (tests/fixtures/gpu/README.md says how they were made)."""
    return OWN_GPU_TRACES


@pytest.fixture(scope="session")
def transformers_src() -> Path:
    """transformers==5.17.0 unpacked by `make setup` (the code behind the shared GPU traces)."""
    if not (TRANSFORMERS_SRC / "transformers").is_dir():
        pytest.fail(f"{TRANSFORMERS_SRC} is missing: run `make setup`")
    return TRANSFORMERS_SRC


@pytest.fixture(scope="session")
def sglang_root() -> Path:
    """The installed sglang==0.5.23 package's parent directory (so paths read `sglang/srt/...`)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        pytest.fail("sglang is not installed: run `make setup`")
    return Path(spec.origin).resolve().parent.parent


def _cpu_profiler(**options):
    """torch.profiler on CPU, shapes recorded, without Python stacks (kerneltrace's ranges give the lines)."""
    import torch

    return torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, with_stack=False, **options
    )


@pytest.fixture
def cpu_profile():
    """torch.profiler on CPU, without Python stacks (kerneltrace's ranges give the lines)."""
    return _cpu_profiler


@pytest.fixture(scope="session")
def profile_without_stacks():
    """A function that profiles ``run()`` `calls` times on CPU without Python stacks (`_cpu_profiler`),
    under ``no_grad``, and writes the Chrome trace to `out`."""

    def profile(run, out: Path, calls: int = 3) -> Path:
        import torch

        with torch.no_grad(), _cpu_profiler() as profiler:
            for _ in range(calls):
                run()
        profiler.export_chrome_trace(str(out))
        return out

    return profile


# Real torch.profiler runs on CPU of tests/trace_models.py (the loader's and the join's tests read them).
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
    """The marked lines of tests/trace_models.py."""
    return trace_models.marker_lines()


@pytest.fixture(scope="session")
def cpu_fixtures() -> Path:
    """Committed CPU traces (tests/fixtures/cpu/README.md says how they were made)."""
    return REPO / "tests" / "fixtures" / "cpu"
