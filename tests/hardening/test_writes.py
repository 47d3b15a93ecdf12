"""Outputs never overwrite an input, never go into a FIFO or device, and are all-or-nothing; the
plugin's capture trace never follows a name planted in a shared profiler directory."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest
from trace_fuzz import run_cli

from tracer.errors import InputError
from tracer.output_files import protect_inputs, write_output
from tracer.plugins import sglang_capture


@pytest.fixture
def trace(own_gpu_traces: Path, tmp_path: Path) -> Path:
    """The real CUDA-graph trace as plain JSON, so that `-o` names with graph suffixes can be it."""
    path = tmp_path / "t.json"
    path.write_bytes(gzip.decompress((own_gpu_traces / "cudagraph_decode_stack.json.gz").read_bytes()))
    return path


@pytest.mark.parametrize("command", ["graph", "report", "annotate"])
def test_an_output_that_is_the_input_is_refused(trace: Path, command: str) -> None:
    before = trace.read_bytes()
    done = run_cli(command, str(trace), "-o", str(trace), text=True)
    assert done.returncode == 2 and str(trace) in done.stderr and done.stderr.count("\n") == 1
    assert "input" in done.stderr and trace.read_bytes() == before


def test_an_output_that_is_a_rank_trace_of_the_directory(trace: Path, tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    rank0 = ranks / "x-TP-0.json"
    shutil.copy(trace, rank0)
    done = run_cli("graph", str(ranks), "-o", str(ranks / "x-TP-0.json"), text=True)
    # the per-rank name is x-TP-0-rank0.json: not the trace; the trace itself as -o of a diff graph is
    assert done.returncode == 0, done.stderr
    done = run_cli("diff", str(trace), str(rank0), "-o", str(rank0), text=True)
    assert done.returncode == 2 and "is an input of this command" in done.stderr


@pytest.mark.parametrize("target", ["fifo", "/dev/full", "/dev/null", "directory", "missing_dir"])
def test_outputs_that_are_not_files_are_refused_in_one_line(trace: Path, tmp_path: Path, target: str) -> None:
    path = {
        "fifo": tmp_path / "out.svg",
        "directory": tmp_path,
        "missing_dir": tmp_path / "no" / "such" / "out.svg",
    }.get(target, Path(target))
    if target == "fifo":
        os.mkfifo(path)
    done = run_cli("graph", str(trace), "-o", str(path), text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    done = run_cli(
        "scan", str(Path(__file__).parent), "--sarif", str(path), "--no-cache", text=True, timeout=120
    )
    assert done.returncode == 2 and str(path) in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_a_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "out.html"
    out.write_text("old")

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        from tracer.output_files import output_file

        with output_file(out, text=True) as handle:
            handle.write("half of the new")
            raise Boom
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.html"]
    protect_inputs([out])
    with pytest.raises(InputError, match="is an input of this command"):
        write_output(out, "new")


def test_the_capture_trace_never_follows_a_planted_link(tmp_path: Path) -> None:
    """Someone who can write the shared profiler directory plants the partial name as a link to a
    file of the user's: the export fails (logged by the caller), the file is untouched, nothing else
    is left behind."""
    import torch

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "graph_capture_profile" / "cuda_graph_capture-X-TP-0.json.gz"
    target.parent.mkdir()
    sglang_capture.partial_path(target).symlink_to(victim)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        torch.ones(4).to(torch.float16)
    with pytest.raises(FileExistsError):
        sglang_capture.write_trace(profiler, target)
    assert victim.read_text() == "precious" and not target.exists()
    assert sorted(p.name for p in target.parent.iterdir()) == [sglang_capture.partial_path(target).name]


def test_the_capture_trace_is_written_when_nothing_is_planted(tmp_path: Path) -> None:
    import torch

    target = tmp_path / "graph_capture_profile" / "cuda_graph_capture-X-TP-0.json.gz"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        torch.ones(4).to(torch.float16)
    sglang_capture.write_trace(profiler, target)
    assert b"traceEvents" in gzip.decompress(target.read_bytes())
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]
