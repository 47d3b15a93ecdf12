"""Real inputs the hardening tests damage: torch.profiler CPU traces, slices of the H200 traces."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
import trace_fuzz


@pytest.fixture(scope="session")
def cpu_trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding `cpu_stack.json`/`cpu_nostack.json`: real CPU profiles of 3 steps."""
    directory = tmp_path_factory.mktemp("hardening-cpu")
    trace_fuzz.profile_cpu_trace(directory / "cpu_stack.json", with_stack=True)
    trace_fuzz.profile_cpu_trace(directory / "cpu_nostack.json", with_stack=False)
    return directory


@pytest.fixture(scope="session")
def cpu_stack_trace(cpu_trace_dir: Path) -> Path:
    return cpu_trace_dir / "cpu_stack.json"


@pytest.fixture(scope="session")
def fuzz_seeds(cpu_trace_dir: Path, shared_gpu_traces: Path) -> list[tuple[str, dict]]:
    """Every real trace of the repository as a seed (GPU traces cut to short time slices)."""
    return trace_fuzz.load_seeds(cpu_trace_dir, random.Random(0), slices_per_file=1)


@pytest.fixture(scope="session")
def cudagraph_document(own_gpu_traces: Path) -> dict:
    """The real H200 CUDA-graph trace (0.1 MB gzipped), parsed: small enough to edit per test."""
    return json.loads(gzip.decompress((own_gpu_traces / "cudagraph_decode_stack.json.gz").read_bytes()))
