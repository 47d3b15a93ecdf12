"""Every number reads the same in `explain`, `diff`, `report`, the graph and `--json`: one step
definition, one rounding (`tracer.formatting`), on the real H200 traces of the bug and its fix."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner
from render_traces import BUG, CAST_LINE, CPU_ONLY, FIX, FIX_LINE, REPO

from tracer.cli import main
from tracer.formatting import format_bytes, format_count, format_duration, format_share


def run(*args: object) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_explain_diff_report_and_json_agree(tmp_path):
    explained = run("explain", BUG, "--source", REPO, "--top", "20")
    data = json.loads(run("explain", BUG, "--source", REPO, "--json"))
    fixed = json.loads(run("explain", FIX, "--source", REPO, "--json"))
    diffed = run("diff", BUG, FIX, "--source", REPO, "--top", "20")
    diff_data = json.loads(run("diff", BUG, FIX, "--source", REPO, "--json"))
    report = tmp_path / "r.html"
    run("report", BUG, "--source", REPO, "-o", report)
    html = report.read_text()

    # Time per step: the GPU time over explain's own steps, and a step's wall time, said apart.
    per_step = format_duration(data["total_ns"] / data["steps"])
    wall = format_duration(data["step_ns"])
    line = f"GPU time {format_duration(data['total_ns'])} = {per_step}/step over {data['steps']} steps; "
    line += f"a step takes {wall} (wall, mean)"
    assert line in explained and line in html
    assert f"GPU time/step {per_step} → {format_duration(fixed['total_ns'] / fixed['steps'])}" in diffed
    assert f"a step takes {wall} → {format_duration(fixed['step_ns'])}" in diffed
    assert diff_data["before_gpu_ns"] == data["total_ns"] / data["steps"]

    # Attributed share: the same rounding everywhere (never 100% for less than all).
    attributed = f"attributed to a source line: {format_share(data['attributed_fraction'])} of the time"
    assert attributed in explained and attributed in html

    # The cast's line: calls/step, bytes, share; the fix's line counts its runs, not its two kernels.
    cast = next(f for f in data["findings"] if f["origin"]["location"] == CAST_LINE)
    calls = format_count(cast["calls_per_step"])
    assert calls == "78"
    row = next(line for line in explained.splitlines() if CAST_LINE in line and re.match(r"│\s+1 │", line))
    assert re.search(rf"│\s+{calls} │", row) and format_bytes(cast["bytes_per_call"]) in row
    assert format_share(cast["share"]) in row
    assert (
        f"<td class=num>{calls}</td>" in html
        and f"<td class=num>{format_bytes(cast['bytes_per_call'])}</td>" in html
    )
    origins = {o["where"]: o for o in diff_data["origins"]}
    assert (
        origins[CAST_LINE]["before_calls"] == cast["calls_per_step"]
        and origins[CAST_LINE]["after_calls"] == 0
    )
    fix_findings = [f for f in fixed["findings"] if f["origin"]["location"] == FIX_LINE]
    assert len({f["kernel"] for f in fix_findings}) == 2  # the gather and the cast of the live rows
    assert origins[FIX_LINE]["after_calls"] == max(f["calls_per_step"] for f in fix_findings) == 78
    vanished = next(line for line in diffed.splitlines() if CAST_LINE in line)
    assert f"{calls} → 0" in vanished
    assert f"invariant: {calls} calls/step = once per layer (78 layers)" in explained

    # The graph says the same bytes, share and calls as the table.
    svg = tmp_path / "g.svg"
    run("graph", BUG, "--source", REPO, "-o", svg)
    text = svg.read_text()
    assert f"{format_bytes(cast['bytes_per_call'])}/call" in text and f"{calls} calls/step" in text
    assert f"{format_share(cast['share'])} · " in text


def test_a_cpu_only_report_speaks_of_cpu_ops(tmp_path):
    report = tmp_path / "cpu.html"
    run("report", CPU_ONLY, "-o", report)
    html = report.read_text()
    explained = run("explain", CPU_ONLY)
    assert "Hot CPU ops" in html and "Hot kernels" not in html and "hot CPU ops" in explained
    assert not re.search(r"[^\d.,]0 GB/s", html) and " 0.00 " not in explained
    assert "CPU op time (no GPU activity in the trace)" in explained and "CPU op time" in html
    assert "<th>op</th>" in html and "<th>kernel</th>" not in html


def test_shares_never_round_to_all_or_nothing():
    assert format_share(0.995) == "99.5%" and format_share(0.99996) == ">99.99%"
    assert format_share(1.0) == "100%" and format_share(0.0) == "0%" and format_share(1e-7) == "<0.01%"
    assert (
        format_bytes(1.1e9) == "1.1 GB"
        and format_bytes(855e6) == "855 MB"
        and format_bytes(786e3) == "786 KB"
    )
    assert format_duration(1_571_700_000) == "1.57 s" and format_duration(854_000) == "854 µs"
