"""Every command: a bad file, option or command is one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

GPU_TRACE = "tests/fixtures/gpu/cudagraph_decode_stack.json.gz"


def kerneltrace(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tracer", *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )




@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("explain", "/no/such/trace.json"), "/no/such/trace.json"),
        (("explain", GPU_TRACE, "--source", "/no/such/dir"), "/no/such/dir"),
        (("graph", GPU_TRACE, "--top", "zero"), "--top"),
        (("diff", GPU_TRACE), "AFTER"),
        (("scan", "/no/such/code"), "/no/such/code"),
        (("rules", "--explain", "KT999"), "KT999"),
        (("no-such-command",), "no-such-command"),
    ],
)
def test_one_line_and_exit_2(repo_root, args, names):
    result = kerneltrace(*args, cwd=repo_root)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kerneltrace: error: ") and names in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["", "scan", "rules", "explain", "graph", "report", "annotate", "diff", "profile"])
def test_help_everywhere(command):
    result = kerneltrace(*([command] if command else []), "--help")
    assert result.returncode == 0 and result.stdout.startswith("Usage: kerneltrace")
