"""Real per-rank traces: a 2-rank gloo run profiled once per session by the fixture script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "fixtures" / "ranks" / "make_rank_traces.py"
SOURCE = SCRIPT.parent  # the frames name the script relative to its folder


@pytest.fixture(scope="session")
def rank_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tp2")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"{SCRIPT.name} failed:\n{done.stdout}\n{done.stderr}")
    return out


@pytest.fixture(scope="session")
def rank_dir_rank0_slow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same run with rank 0 holding the large pool instead of rank 1: an AFTER for `diff`."""
    out = tmp_path_factory.mktemp("tp2_rank0_slow")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "--slow-rank", "0"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"{SCRIPT.name} --slow-rank 0 failed:\n{done.stdout}\n{done.stderr}")
    return out
