"""A real local Ray cluster, started once per session (2 CPUs, no dashboard) and shut down after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

STEPS = Path(__file__).resolve().parents[1] / "fixtures" / "steps"


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    ray = pytest.importorskip("ray")
    from tracer.engines.ray import cluster

    with cluster(num_cpus=2) as nodes:  # started here, stopped at the end of the session
        assert ray.is_initialized() and len(nodes) == 1
        yield nodes[0]
