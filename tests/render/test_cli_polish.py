"""The small things a first run meets: a mistyped command, `| head`, bracketed rule text, the
report's graph at full size, demangled names folded, and a silent Python API."""

from __future__ import annotations

import os
import subprocess
import sys

from click.testing import CliRunner
from render_traces import BUG, REPO

from tracer.cli import main


def test_a_mistyped_command_suggests_the_right_one():
    result = CliRunner().invoke(main, ["explian", "x.json"])
    assert result.exit_code == 2
    assert "No such command 'explian'. Did you mean 'explain'?" in result.output


def test_json_into_head_ends_quietly():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = f"{sys.executable} -m tracer scan {REPO / 'examples'} --json --no-cache | head -n 2"
    done = subprocess.run(
        ["bash", "-c", command], check=False, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.stdout.startswith("{")
    assert done.stderr == "", done.stderr


def test_rules_keep_bracketed_text():
    result = CliRunner().invoke(main, ["rules"], env={"COLUMNS": "120"})
    assert "`buf[idx] = value`" in result.output and "`buf[a:b] = value`" in result.output
    explained = CliRunner().invoke(main, ["rules", "--explain", "KT306"], env={"COLUMNS": "120"})
    assert "buf[idx] = value" in explained.output


def test_report_graph_opens_full_size_and_kernel_names_fold(tmp_path):
    out = tmp_path / "r.html"
    assert (
        CliRunner().invoke(main, ["report", str(BUG), "--source", str(REPO), "-o", str(out)]).exit_code == 0
    )
    html = out.read_text()
    assert (
        'id="graph-full"' in html
        and "open full size" in html
        and "#graph-full:checked~.graph svg{max-width:none}" in html
    )
    assert "<script" not in html.lower()
    # The demangled template is there, folded under its short name, never as the detail's headline.
    assert (
        '<details class="kernel"><summary>unrolled_elementwise_kernel&lt;direct_copy_kernel_cuda&gt;</summary>'
        in html
    )
    assert "<h3>1. unrolled_elementwise_kernel&lt;direct_copy_kernel_cuda&gt; " in html


def test_the_python_api_prints_nothing(tmp_path, capsys):
    import torch

    import tracer
    from tracer.api import explain_trace

    x = torch.randn(64, 64)
    with tracer.profile(steps=2, warmup=1, out=tmp_path / "t.json.gz") as session:
        for _ in range(3):
            (x @ x).to(torch.bfloat16)
            session.step()
    explain_trace(session.out)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert session.analysis is not None and session.analysis.steps == 2
