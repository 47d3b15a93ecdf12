"""Traces the explain tests share: real CPU profiler runs of `cpu_model`, analyses of the H200 fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.explain.cpu_model import profile_model

LAYERS, STEPS = 4, 3


@pytest.fixture(scope="session")
def stack_trace(tmp_path_factory) -> Path:
    """4 layers x 3 ProfilerStep#N steps, with_stack=True, `model.layers.N` ranges."""
    return profile_model(tmp_path_factory.mktemp("cpu") / "stack.json", layers=LAYERS, steps=STEPS)


@pytest.fixture(scope="session")
def plain_trace(tmp_path_factory) -> Path:
    """5 forward passes, no Python frames, no ProfilerStep markers: steps only by repetition."""
    out = tmp_path_factory.mktemp("cpu") / "plain.json"
    return profile_model(out, layers=LAYERS, steps=5, with_stack=False, profiler_steps=False)


@pytest.fixture(scope="session")
def stack_attributions(stack_trace):
    from tracer.join import attribute, sites_for_trace
    from tracer.load import load_trace

    # Frames name the model file relative to its sys.path entry: `tests/explain/cpu_model.py` when run
    # from the repo root, `cpu_model.py` under pytest (which puts tests/explain on sys.path).
    here = Path(__file__).resolve().parent
    roots = [here, here.parents[1]]
    trace = load_trace(stack_trace)
    return attribute(trace, sites_for_trace(trace, roots), source_roots=roots)


@pytest.fixture(scope="session")
def stack_analysis(stack_attributions):
    from tracer.explain import analyse

    return analyse(stack_attributions)


@pytest.fixture(scope="session")
def llama_trace(shared_gpu_traces) -> Path:
    return shared_gpu_traces / "hf_llama_generate_stack.json.gz"


@pytest.fixture(scope="session")
def deepseek_trace(shared_gpu_traces) -> Path:
    return shared_gpu_traces / "hf_deepseekv3_generate_stack.json.gz"


@pytest.fixture(scope="session")
def llama_analysis(llama_trace, transformers_src):
    from tracer.api import explain_trace

    return explain_trace(llama_trace, source=[transformers_src])
