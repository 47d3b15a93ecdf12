"""Every command: a bad file, option or command is one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

GPU_TRACE = "tests/fixtures/gpu/cudagraph_decode_stack.json.gz"


def kerneltrace(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tracer", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
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


@pytest.mark.parametrize(
    "command", ["", "scan", "rules", "explain", "graph", "report", "annotate", "diff", "profile"]
)
def test_help_everywhere(command):
    result = kerneltrace(*([command] if command else []), "--help")
    assert result.returncode == 0 and result.stdout.startswith("Usage: kerneltrace")


def test_a_bug_of_ours_is_one_line_and_exit_3(repo_root, monkeypatch):
    """Fault injection (a renderer raising, as a bug would): one line naming the exception and where in
    kerneltrace it happened, exit code 3, no traceback; KERNELTRACE_DEBUG=1 lets the traceback through."""
    from click.testing import CliRunner

    import tracer.render.table
    from tracer.cli import DEBUG_ENV, main

    def broken(*args, **kwargs):
        raise ZeroDivisionError("injected")

    monkeypatch.setattr(tracer.render.table, "print_table", broken)
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    result = CliRunner().invoke(main, ["explain", str(repo_root / GPU_TRACE)])
    assert result.exit_code == 3
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert lines[0].startswith("kerneltrace: internal error: ZeroDivisionError: injected at explain.py:")
    assert f"{DEBUG_ENV}=1 shows the traceback" in lines[0]
    monkeypatch.setenv(DEBUG_ENV, "1")
    debug = CliRunner().invoke(main, ["explain", str(repo_root / GPU_TRACE)])
    assert isinstance(debug.exception, ZeroDivisionError)
