"""capture_gpu_steps.py (the GPU corpus the lead captures on an H200) runs, here as its CPU dry run,
and its decode_step trace is explained with the steps it ran."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.steps.conftest import CORPUS
from tracer.api import explain_trace


@pytest.mark.slow
def test_the_gpu_capture_script_dry_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(CORPUS / "capture_gpu_steps.py"),
            "--out",
            str(tmp_path),
            "--device",
            "cpu",
            "--layers",
            "3",
            "--steps",
            "3",
            "--cases",
            "gpu_graph_decode_step",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    truth = json.loads((tmp_path / "truth_gpu.json").read_text())["gpu_graph_decode_step"]
    analysis = explain_trace(tmp_path / truth["trace"])
    assert analysis.steps == truth["steps"] == 3
    assert analysis.step_method == "range 'decode_step'" and analysis.layers == 3
