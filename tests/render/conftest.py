"""Real traces for the rendering tests: the H200 GLM-5 fixtures (with and without Python stacks, the
bug and its fix), the transformers Llama trace, and a CPU-only trace of the steps corpus."""

from __future__ import annotations

import pytest
from render_traces import BUG, CPU_ONLY, FIX, NOSTACK, REPO


@pytest.fixture(scope="session")
def glm5_bug():
    from tracer.api import explain_trace

    return explain_trace(BUG, source=[REPO])


@pytest.fixture(scope="session")
def glm5_fix():
    from tracer.api import explain_trace

    return explain_trace(FIX, source=[REPO])


@pytest.fixture(scope="session")
def glm5_ranked():
    """No Python frames: every line is a ranking of candidates."""
    from tracer.api import explain_trace

    return explain_trace(NOSTACK, source=[REPO / "examples"])


@pytest.fixture(scope="session")
def llama(transformers_src):
    """Holds exact, resolved and ambiguous origins."""
    from tracer.api import explain_trace

    return explain_trace(
        REPO / "tests" / "fixtures" / "transformers" / "hf_llama_generate_stack.json.gz",
        source=[transformers_src],
    )


@pytest.fixture(scope="session")
def cpu_only():
    from tracer.api import explain_trace

    return explain_trace(CPU_ONLY)
