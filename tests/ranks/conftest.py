"""Real per-rank traces of a 2-rank gloo run, written by the fixture script and committed.

The tests that compare the ranks' times read the committed traces: a run profiled during the test
session on a loaded CI machine once timed rank 0's small cast like rank 1's six-times-larger one
(twice, with different tests failing), and the traces then rightly showed no slower rank. The script
itself still runs in every session (`script_dir`), checked on what load cannot change: names, steps,
calls per step, bytes per call and the collectives.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "fixtures" / "ranks" / "make_rank_traces.py"
SOURCE = SCRIPT.parent  # the frames name the script relative to its folder
COMMITTED = SCRIPT.parent / "tp2"  # rank 1 holds the 6x pool
COMMITTED_RANK0_SLOW = SCRIPT.parent / "tp2_rank0_slow"  # rank 0 does


def _copy(committed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp(committed.name) / committed.name
    shutil.copytree(committed, out)
    return out


@pytest.fixture(scope="session")
def rank_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy(COMMITTED, tmp_path_factory)


@pytest.fixture(scope="session")
def rank_dir_rank0_slow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same run with rank 0 holding the large pool instead of rank 1: an AFTER for `diff`."""
    return _copy(COMMITTED_RANK0_SLOW, tmp_path_factory)


@pytest.fixture(scope="session")
def script_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Traces the script writes now, on this machine, under whatever load it has."""
    out = tmp_path_factory.mktemp("tp2_live")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"{SCRIPT.name} failed:\n{done.stdout}\n{done.stderr}")
    return out
