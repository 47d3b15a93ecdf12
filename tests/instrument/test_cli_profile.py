"""`kerneltrace profile -- python ...`: the real CLI runs scripts and modules and names exact lines."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from click.testing import CliRunner

from tracer.cli import main

MODEL_FILE = "examples/glm5_kv_cast/model.py"
STEP = "examples.glm5_kv_cast.model.DecodeModel.decode_step"

SCRIPT = textwrap.dedent(
    """\
    import sys

    import torch

    pool = torch.randn(4096, 64).to(torch.float8_e4m3fn)
    for _ in range(int(sys.argv[1])):
        keys = pool.to(torch.bfloat16)
        print("step", keys.shape[0])
    """
)


def test_profile_a_module_with_a_step_function(repo_root, tmp_path):
    out = tmp_path / "trace.json.gz"
    cli = [sys.executable, "-c", "from tracer.cli import main; main()"]
    options = ["profile", "--step-function", STEP, "--steps", "2", "-o", str(out), "--json"]
    script = ["python", "-m", "examples.glm5_kv_cast.run", "--preset", "tiny", "--steps", "3"]
    command = [*cli, *options, "--", *script]
    done = subprocess.run(command, cwd=repo_root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert out.is_file() and data["steps"] == 2
    exact = {
        (f["origin"]["file"], f["origin"]["line"])
        for f in data["findings"]
        if f["kernel"] == "aten::copy_" and f["origin"]["confidence"] == 1.0
    }
    assert {(MODEL_FILE, 209), (MODEL_FILE, 260)} <= exact
    report = data["instrumentation"]
    assert "examples.glm5_kv_cast.model" in report["modules_at_import"]
    assert "tiny cast_whole on cpu" in done.stderr  # the script's own output, moved off stdout


def test_profile_a_script_whole_run(tmp_path, monkeypatch):
    script = tmp_path / "cast_loop.py"
    script.write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["profile", "-o", "t.json", "--", "python", str(script), "3"])
    assert result.exit_code == 0, result.output
    assert result.output.count("step 4096") == 3  # the script ran with its argv
    assert "cast_loop.py:7" in result.output  # the whole-pool cast, named by the script's own line
    assert "pool.to(torch.bfloat16)" in result.output


def test_errors_are_one_line_and_exit_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(main, ["profile", "--steps", "2", "--", "python", "x.py"])
    assert result.exit_code == 2 and "--steps: needs --step-function" in result.output
    result = runner.invoke(main, ["profile", "--", "python", "missing.py"])
    assert result.exit_code == 2 and "missing.py: no such script" in result.output
    failing = tmp_path / "fails.py"
    failing.write_text("import torch\nx = torch.ones(3).float()\nraise SystemExit(3)\n")
    result = runner.invoke(main, ["profile", "-o", "t.json", "--", "python", str(failing)])
    assert result.exit_code == 2 and "the script exited with status 3" in result.output
