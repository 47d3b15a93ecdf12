"""The four commands end to end on real traces: graph, report, annotate, diff."""

from __future__ import annotations

import gzip

import orjson
from click.testing import CliRunner

from tracer.cli import main


def _run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_graph_command_writes_each_format(kv_traces, model_dir, tmp_path):
    before, _ = kv_traces
    for suffix in (".svg", ".png", ".dot", ".graphml", ".json"):
        out = tmp_path / f"g{suffix}"
        result = _run("graph", before, "--source", model_dir, "-o", out, "--top", "5")
        assert result.exit_code == 0, result.output
        assert out.stat().st_size > 0
    assert "hot path:" in result.output and "kv_cast_model.py:" in result.output


def test_graph_command_json_and_bad_suffix(kv_traces, model_dir, tmp_path):
    before, _ = kv_traces
    result = _run("graph", before, "--source", model_dir, "--json")
    assert result.exit_code == 0
    data = orjson.loads(result.stdout)
    assert data["graph"]["hot_path"][0] == "root"
    bad = _run("graph", before, "-o", tmp_path / "g.bmp")
    assert bad.exit_code == 2
    assert bad.output.count("\n") == 1 and "g.bmp" in bad.output


def test_report_annotate_and_diff_commands(kv_traces, model_dir, tmp_path):
    before, after = kv_traces
    report = tmp_path / "r.html"
    result = _run("report", before, "--source", model_dir, "-o", report)
    assert result.exit_code == 0, result.output
    assert "<svg" in report.read_text()

    annotated = tmp_path / "a.json.gz"
    result = _run("annotate", before, "--source", model_dir, "-o", annotated, "--json")
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["annotated"] > 0
    assert b"kv_cast_model.py:" in gzip.decompress(annotated.read_bytes())

    result = _run("diff", before, after, "--source", model_dir, "-o", tmp_path / "d.svg")
    assert result.exit_code == 0, result.output
    assert "vanished" in result.output and "new" in result.output
    assert "kv_cast_model.py:" in result.output
    result = _run("diff", before, after, "--source", model_dir, "--json")
    data = orjson.loads(result.stdout)
    assert data["origins"][0]["change"] == "vanished"


def test_annotate_reads_the_config_explain_reads(kv_traces, model_dir, tmp_path):
    """--config on annotate as on explain: its architectures name the model for traces without stacks;
    a file that is no config is one line naming it (exit 2), before the trace is joined."""
    before, _ = kv_traces
    config = tmp_path / "config.json"
    config.write_text('{"architectures": ["KvCastModel"], "num_hidden_layers": 4}')
    annotated = tmp_path / "a.json.gz"
    result = _run("annotate", before, "--source", model_dir, "--config", config, "-o", annotated, "--json")
    assert result.exit_code == 0, result.output
    assert b"kv_cast_model.py:" in gzip.decompress(annotated.read_bytes())
    config.write_text("[1, 2]")
    bad = _run("annotate", before, "--source", model_dir, "--config", config, "-o", annotated)
    assert bad.exit_code == 2
    assert (
        bad.output.count("\n") == 1
        and "config.json" in bad.output
        and "not a JSON model config" in bad.output
    )


def test_default_output_names_are_sanitised(tmp_path, monkeypatch):
    from tracer.cli.graph import derived_output

    assert (
        derived_output("../../x/evil name;rm -rf.json.gz", ".svg", tmp_path)
        == tmp_path / "evil_name_rm_-rf.svg"
    )
    assert derived_output("/a/b/..json", ".svg", tmp_path).parent == tmp_path
