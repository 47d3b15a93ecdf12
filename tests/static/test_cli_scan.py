"""`kerneltrace scan` and `kerneltrace rules`: exit codes, --json shape, SARIF valid against 2.1.0."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from tracer.cli import main

SCHEMA = Path(__file__).with_name("sarif-schema-2.1.0.json")
SOURCE = """import torch

class Backend:
    def forward_decode(self, q, layer):
        k = self.pool.get_key_buffer(layer).to(q.dtype)
        idx = self.req_to_token[0].to("cuda")
        return torch.cat([k[idx], q])

    def __init__(self):
        self.table = {}
        self.table["k"] = 1
"""


@pytest.fixture()
def project(tmp_path):
    (tmp_path / "backend.py").write_text(SOURCE)
    return tmp_path


def run(*args):
    return CliRunner().invoke(main, ["scan", *map(str, args)], catch_exceptions=False)


def test_json_shape_and_exit_codes(project):
    result = run(project, "--json", "--no-cache")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) == {"files_scanned", "seconds", "cache_hits", "skipped", "sites", "sites_total"}
    assert data["files_scanned"] == 1 and data["sites_total"] == 3 and data["skipped"] == []
    top = data["sites"][0]
    assert (top["rule"], top["path"], top["line"], top["function"], top["def_line"]) == (
        "KT101",
        "backend.py",
        5,
        "Backend.forward_decode",
        4,
    )
    assert top["risk"] == 85 and len(top["id"]) == 10 and top["aten_ops"][-1] == "aten::copy_"
    assert [s["rule"] for s in data["sites"]] == ["KT101", "KT301", "KT204"]
    assert run(project, "--json", "--no-cache", "--fail-on", "80").exit_code == 1
    assert run(project, "--json", "--no-cache", "--fail-on", "90").exit_code == 0
    assert len(json.loads(run(project, "--json", "--no-cache", "--top", "1").output)["sites"]) == 1


def test_table_for_people(project):
    result = run(project, "--no-cache", "--top", "2")
    assert result.exit_code == 0
    assert "backend.py:5" in result.output and "KT101" in result.output
    assert "3 sites in 1 files" in result.output


def test_input_errors_exit_2(project):
    assert run().exit_code == 2  # nothing to scan
    missing = run(project / "missing")
    assert missing.exit_code == 2 and "no such file or directory" in missing.output
    unknown = run("--package", "no_such_package_kerneltrace")
    assert unknown.exit_code == 2 and "no installed package" in unknown.output
    assert run("--preset", "nope").exit_code == 2


def test_sarif_validates_against_the_official_schema(project, tmp_path):
    out = tmp_path / "scan.sarif"
    result = run(project, "--no-cache", "--sarif", out)
    assert result.exit_code == 0
    log = json.loads(out.read_text())
    schema = json.loads(SCHEMA.read_text())
    assert schema["id"].endswith("sarif-schema-2.1.0.json")
    jsonschema.Draft4Validator(schema).validate(log)
    (run_,) = log["runs"]
    assert [r["ruleId"] for r in run_["results"]] == ["KT101", "KT301", "KT204"]
    first = run_["results"][0]
    assert first["level"] == "warning" and first["rank"] == 85
    assert first["locations"][0]["physicalLocation"]["region"] == {
        "startLine": 5,
        "startColumn": 13,
        "endLine": 5,
    }
    assert {r["id"] for r in run_["tool"]["driver"]["rules"]} == {"KT101", "KT301", "KT204"}
    stdout = run(project, "--no-cache", "--sarif", "-")
    jsonschema.Draft4Validator(schema).validate(json.loads(stdout.output))


def test_sarif_of_real_sglang_file_validates(sglang_root, tmp_path):
    out = tmp_path / "pool.sarif"
    target = sglang_root / "sglang" / "srt" / "mem_cache" / "memory_pool.py"
    assert run(target, "--no-cache", "--sarif", out).exit_code == 0
    log = json.loads(out.read_text())
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text())).validate(log)
    assert len(log["runs"][0]["results"]) == 165


def test_rules_command():
    runner = CliRunner()
    listing = runner.invoke(main, ["rules"])
    assert listing.exit_code == 0 and "KT101" in listing.output and "KT401" in listing.output
    explained = runner.invoke(main, ["rules", "--explain", "KT101"])
    assert explained.exit_code == 0
    for heading in ("What it does", "Why it matters", "Example", "Fix"):
        assert heading in explained.output
    data = json.loads(runner.invoke(main, ["rules", "--explain", "kt401", "--json"]).output)
    assert data["code"] == "KT401" and data["launches_kernel"] is False
    assert len(json.loads(runner.invoke(main, ["rules", "--json"]).output)) == 18
    kv = runner.invoke(main, ["rules", "--explain", "KT105"])
    words = " ".join(kv.output.split())  # as wrapped to any width
    assert kv.exit_code == 0
    for heading in ("What it does", "Why it matters", "Example", "Fix"):
        assert heading in words
    assert "receiver (its text or last dotted part) like *kv_cache, k_cache," in words
    assert "tried 1 of 18 (the first that matches wins)" in words
    data = json.loads(runner.invoke(main, ["rules", "--explain", "KT102", "--json"]).output)
    assert (data["match_order"], data["receiver"], data["max_args"]) == (3, None, 0)
    assert data["examples"]["invalid"][0] == {
        "code": "def forward(self, x):\n    return self.weight.float()\n",
        "expect": ["2:11 KT102"],
    }
    assert runner.invoke(main, ["rules", "--explain", "KT999"]).exit_code == 2
