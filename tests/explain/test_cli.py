"""`kerneltrace explain` end to end: table, --json (documented keys), --markdown, bad inputs, escaping."""

from __future__ import annotations

import gzip
import json

import torch
from click.testing import CliRunner
from torch.profiler import ProfilerActivity, profile, record_function

from tracer.cli import main
from tracer.cli.explain import JSON_SHAPE

ANALYSIS_KEYS = {
    "trace",
    "findings",
    "time_basis",
    "device",
    "peak_gbps",
    "total_ns",
    "window_ns",
    "gpu_busy_fraction",
    "steps",
    "step_ns",
    "step_method",
    "step_evidence",
    "step_starts_ns",
    "step_ends_ns",
    "step_kinds",
    "steps_exact",
    "layers",
    "attributed_fraction",
    "replay_fraction",
    "replay_attributed_fraction",
    "rank",
    "notes",
}
FINDING_KEYS = {
    "kernel",
    "kernel_short",
    "category",
    "origin",
    "calls",
    "total_ns",
    "per_call_ns",
    "share",
    "steps",
    "calls_per_step",
    "invariant",
    "bytes_per_call",
    "bytes_basis",
    "gbps",
    "peak_fraction",
    "shapes",
    "waste",
}
ORIGIN_KEYS = {
    "location",
    "key",
    "answer",
    "file",
    "line",
    "source",
    "site_id",
    "rule",
    "confidence",
    "evidence",
    "ranges",
    "frames",
    "ops",
    "replay",
    "before_trace",
    "candidates",
    "fused",
    "compiled",
}


def run(*args: str):
    return CliRunner().invoke(main, ["explain", *map(str, args)])


def test_json_has_the_documented_keys(llama_trace, transformers_src):
    result = run(llama_trace, "--source", transformers_src, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) == ANALYSIS_KEYS
    assert set(data["findings"][0]) == FINDING_KEYS
    assert set(data["findings"][0]["origin"]) == ORIGIN_KEYS
    assert sum(f["share"] for f in data["findings"]) == pytest_approx(1.0)
    assert data["device"] == "NVIDIA H200" and data["steps"] == 12 and data["layers"] == 8
    # The --help epilog documents every key.
    for key in ANALYSIS_KEYS | FINDING_KEYS | (ORIGIN_KEYS - {"frames"}):
        assert key in JSON_SHAPE, key
    help_text = run("--help").output
    assert "--json prints one object" in help_text and "calls_per_step" in help_text


def pytest_approx(value):
    import pytest

    return pytest.approx(value)


def test_table_shows_the_cast_line_and_invariant(stack_trace, repo_root):
    result = run(stack_trace, "--source", repo_root / "tests" / "explain", "--top", "5")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "hot CPU ops" in out
    assert "cpu_model.py:" in out and "get_key_buffer(self.layer_id).to(hidden.dtype)" in out
    assert "invariant: 4 calls/step = once per layer (4 layers)" in out
    assert "WASTE: cast 786 KB whole buffer" in out


def test_markdown_table(stack_trace, repo_root):
    result = run(stack_trace, "--source", repo_root / "tests" / "explain", "--markdown", "--top", "3")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert (
        "| # | share | time | calls | calls/step | per call | bytes/call | GB/s (% peak) | op | origin | category |"
        in lines
    )
    assert sum(1 for line in lines if line.startswith(("| 1 |", "| 2 |", "| 3 |"))) == 3
    assert "`aten::copy_`" in result.output


def test_bad_files_exit_2_with_one_line(tmp_path):
    cases = {
        "missing.json": None,
        "not-json.json": b"this is not json",
        "truncated.json.gz": gzip.compress(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op"')[:30],
        "not-a-trace.json": b'{"hello": 1}',
    }
    for name, content in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        result = CliRunner().invoke(main, ["explain", str(path)])
        assert result.exit_code == 2, (name, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and name in lines[0] and lines[0].startswith("kerneltrace: error:"), (
            name,
            lines,
        )


def test_bad_options_exit_2(stack_trace, tmp_path):
    assert run(stack_trace, "--step-range", "no-such-range").exit_code == 2
    assert run(stack_trace, "--config", tmp_path / "missing.json").exit_code == 2
    assert run(stack_trace, "--sites", tmp_path / "missing-sites.json").exit_code == 2


def test_untrusted_names_are_escaped(tmp_path):
    """Rich markup in a range name is shown, not applied; control characters never reach the terminal.

    torch.profiler itself writes "unknown" for names with control characters, so those come from an
    edited trace file (trace files are user input): a real trace with its range renamed.
    """
    x = torch.randn(256, 64).to(torch.bfloat16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(2):
            with record_function("evil[bold red]boom[/bold red]"):
                x.float()
    trace = tmp_path / "evil.json"
    prof.export_chrome_trace(str(trace))
    result = run(trace)
    assert result.exit_code == 0, result.output
    assert "range evil[bold red]boom[/bold red] > aten::to" in result.output

    data = json.loads(trace.read_text())
    for event in data["traceEvents"]:
        if event.get("cat") == "user_annotation":
            event["name"] = "evil\x1b[31m[bold]boom\x07\x9b2J\u202edone"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    for args in ([], ["--markdown"]):
        out = run(edited, *args).output
        assert not any(ch in out for ch in "\x1b\x07\x9b\u202e"), args
    assert "range evil[bold]boomdone > aten::to" in run(edited).output  # escape sequences removed whole
