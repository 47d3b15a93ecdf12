"""Decompression bombs shaped like traces are refused while they inflate, whatever the gzip size field
says, through every command, with memory capped as a user's shell may cap it (`ulimit -v`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trace_bombs
from trace_fuzz import run_cli

from tracer.errors import InputError
from tracer.load import load_trace
from tracer.load import source as load_source

CAP = 3 << 30  # address space of the command: a bomb of 4-8 GiB would not fit


@pytest.fixture(scope="module", params=sorted(trace_bombs.BOMBS))
def bomb(request, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trace_bombs.BOMBS[request.param](tmp_path_factory.mktemp("bomb") / f"{request.param}.json.gz")


@pytest.mark.parametrize("command", ["explain", "graph", "report", "annotate", "diff"])
def test_a_bomb_is_refused_by_every_command_in_one_line(bomb: Path, tmp_path: Path, command: str) -> None:
    args = {
        "explain": [str(bomb)],
        "graph": [str(bomb), "-o", str(tmp_path / "g.svg")],
        "report": [str(bomb), "-o", str(tmp_path / "r.html")],
        "annotate": [str(bomb), "-o", str(tmp_path / "a.json.gz")],
        "diff": [str(bomb), str(bomb)],
    }[command]
    done = run_cli(command, *args, text=True, memory_limit=CAP)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"kerneltrace: error: {bomb}: gzip data inflating over 200:1")
    assert done.stderr.count("\n") == 1 and not list(tmp_path.iterdir())


def test_a_bomb_given_as_capture_is_refused(bomb: Path, own_gpu_traces: Path) -> None:
    done = run_cli(
        "explain", str(own_gpu_traces / "cudagraph_decode_stack.json.gz"), "--capture", str(bomb), text=True,
        memory_limit=CAP,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.startswith(f"kerneltrace: error: {bomb}: gzip data inflating")


def test_without_the_ratio_check_the_memory_budget_still_stops_it(bomb: Path, monkeypatch) -> None:
    """Defence in depth: inflated bytes are counted against the memory budget (and a layout that must be
    parsed whole against a fifth of it), and no buffer grows past a chunk."""
    monkeypatch.setattr(load_source, "MAX_INFLATION_RATIO", 10**9)
    monkeypatch.setenv("KERNELTRACE_MEMORY_LIMIT", str(1 << 30))
    with pytest.raises(InputError, match=r"holds more than .* of JSON, more than .* allows"):
        load_trace(bomb)


def test_a_real_trace_in_many_gzip_members_loads(own_gpu_traces: Path, tmp_path: Path) -> None:
    import gzip

    data = gzip.decompress((own_gpu_traces / "cudagraph_decode_stack.json.gz").read_bytes())
    members = tmp_path / "members.json.gz"
    members.write_bytes(b"".join(gzip.compress(data[i : i + 4096]) for i in range(0, len(data), 4096)))
    assert load_trace(members).events == load_trace(own_gpu_traces / "cudagraph_decode_stack.json.gz").events
