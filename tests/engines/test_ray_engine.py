"""`--engine ray` on a real local Ray cluster: the same output as the local process pool, byte for
byte, for explain, graph, report and diff; bad ranks, bad addresses and a missing Ray in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.engines.conftest import STEPS
from tracer.cli import main

RUN = "1790000100.0"


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def both(*args: object):
    """The command run locally and on Ray: (local result, Ray result), both exit codes checked."""
    local, on_ray = run(*args), run(*args, "--engine", "ray")
    assert local.exit_code == on_ray.exit_code, (local.output, on_ray.output)
    return local, on_ray


@pytest.mark.parametrize("fixture", ["ranks_decode_step", "ranks_uneven_steps", "ranks_no_markers"])
def test_explain_on_ray_is_the_local_output_byte_for_byte(ray_cluster, fixture: str) -> None:
    local, on_ray = both("explain", STEPS / fixture, "--json")
    assert local.exit_code == 0 and local.stdout_bytes == on_ray.stdout_bytes
    local, on_ray = both("explain", STEPS / fixture, "--markdown")
    assert local.stdout_bytes == on_ray.stdout_bytes


def test_graph_report_and_diff_on_ray_are_the_local_output(ray_cluster, tmp_path: Path) -> None:
    ranks = STEPS / "ranks_decode_step"
    local, on_ray = both("graph", ranks, "--json")
    assert local.exit_code == 0 and local.stdout_bytes == on_ray.stdout_bytes
    pages = {}
    for engine in ("local", "ray"):
        out = tmp_path / engine / "r.report.html"
        out.parent.mkdir()
        result = run("report", ranks, "-o", out, "--json", "--engine", engine)
        assert result.exit_code == 0, result.output
        pages[engine] = {p.name: p.read_bytes() for p in sorted(out.parent.iterdir())}
    assert list(pages["local"]) == ["r-rank0.report.html", "r-rank1.report.html", "r.report.html"]
    assert pages["local"] == pages["ray"]
    local, on_ray = both("diff", ranks, STEPS / "ranks_uneven_steps", "--json")
    assert local.exit_code == 0 and local.stdout_bytes == on_ray.stdout_bytes
    assert [r["rank"] for r in json.loads(on_ray.stdout)["ranks"]] == [0, 1]


def test_a_placement_file_pins_each_rank_to_its_host(ray_cluster, tmp_path: Path) -> None:
    ranks = STEPS / "ranks_decode_step"
    placement = tmp_path / "hosts.json"
    placement.write_text(json.dumps({p.name: ray_cluster.address for p in ranks.iterdir()}))
    local = run("explain", ranks, "--json")
    on_ray = run("explain", ranks, "--json", "--engine", "ray", "--placement", placement)
    assert on_ray.exit_code == 0 and on_ray.stdout_bytes == local.stdout_bytes
    placement.write_text(json.dumps({f"{RUN}-TP-0-DECODE.trace.json.gz": "10.9.9.9"}))
    wrong = run("explain", ranks, "--json", "--engine", "ray", "--placement", placement)
    assert wrong.exit_code == 2 and wrong.stderr.count("\n") == 1
    assert "no alive node of the Ray cluster is '10.9.9.9'" in wrong.stderr


def test_a_truncated_rank_is_named_and_the_others_explained(ray_cluster, tmp_path: Path) -> None:
    for path in (STEPS / "ranks_decode_step").iterdir():
        shutil.copy(path, tmp_path / path.name)
    bad = tmp_path / f"{RUN}-TP-2-DECODE.trace.json.gz"
    bad.write_bytes((tmp_path / f"{RUN}-TP-1-DECODE.trace.json.gz").read_bytes()[:5000])
    local, on_ray = both("explain", tmp_path, "--json")
    assert on_ray.exit_code == 2 and local.stdout_bytes == on_ray.stdout_bytes
    assert [r["rank"] for r in json.loads(on_ray.stdout)["ranks"]] == [0, 1]
    assert on_ray.stderr.count("\n") == 1 and on_ray.stderr.startswith(f"kerneltrace: error: {bad}: ")
    assert "Traceback" not in on_ray.output


def test_an_unreachable_address_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        result = run(
            "explain", STEPS / "ranks_decode_step", "--engine", "ray", "--address", f"127.0.0.1:{port}"
        )
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"kerneltrace: error: 127.0.0.1:{port}: no Ray cluster answers there")


def test_without_ray_installed_the_engine_says_how_to_get_it(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    result = run("explain", STEPS / "ranks_decode_step", "--engine", "ray")
    assert result.exit_code == 2
    assert (
        result.stderr
        == "kerneltrace: error: --engine ray: Ray is not installed here: pip install 'kerneltrace[ray]'\n"
    )
    assert run("explain", STEPS / "ranks_decode_step", "--json").exit_code == 0  # local runs need no Ray


def test_address_without_the_ray_engine_is_a_usage_error() -> None:
    result = run("explain", STEPS / "ranks_decode_step", "--address", "auto")
    assert result.exit_code == 2 and "--address and --placement go with --engine ray" in result.output
