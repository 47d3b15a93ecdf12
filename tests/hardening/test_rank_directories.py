"""A directory of per-rank traces with bad ranks among good ones (the SGLang workflow): the good ranks
are explained, each bad file is named with its problem, one line each, and the exit code is 2."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest
import trace_bombs
from trace_fuzz import run_cli

from tracer.errors import InputError
from tracer.explain.ranks import RankFailures
from tracer.ranks import explain_rank_directory

RUN = "1790000000.0"


def test_an_input_error_crosses_a_process_boundary_intact() -> None:
    err = pickle.loads(pickle.dumps(InputError("a/b.json.gz", "truncated gzip: the end")))
    assert (type(err), err.path, err.problem, str(err)) == (
        InputError, "a/b.json.gz", "truncated gzip: the end", "a/b.json.gz: truncated gzip: the end",
    )  # fmt: skip
    failures = pickle.loads(pickle.dumps(RankFailures("d", (err,))))
    assert failures.failures[0].problem == err.problem and str(failures).startswith("d: none of its 1")


@pytest.fixture(scope="module")
def mixed_ranks(own_gpu_traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ranks 0 and 1 real H200 traces; rank 2 truncated JSON; rank 3 a gzip bomb of 8 GiB."""
    directory = tmp_path_factory.mktemp("mixed")
    for rank in (0, 1):
        shutil.copy(
            own_gpu_traces / "cudagraph_decode_stack.json.gz", directory / f"{RUN}-TP-{rank}.trace.json.gz"
        )
    (directory / f"{RUN}-TP-2.trace.json.gz").write_bytes(b'{"traceEvents": [')
    trace_bombs.whitespace_between_events(directory / f"{RUN}-TP-3.trace.json.gz")
    return directory


BAD = {
    2: "truncated JSON",
    3: "a decompression bomb",
}


@pytest.mark.parametrize("workers", [1, 2])
def test_good_ranks_are_explained_and_bad_ones_named(mixed_ranks: Path, workers: int) -> None:
    report, failures = explain_rank_directory(mixed_ranks, workers=workers)
    assert [r.rank for r in report.ranks] == [0, 1]
    assert [Path(f.path).name for f in failures] == [f"{RUN}-TP-{rank}.trace.json.gz" for rank in BAD]
    for failure, problem in zip(failures, BAD.values()):
        assert problem in failure.problem
    assert sum("not explained" in note for note in report.notes) == 2


@pytest.mark.parametrize("command", ["explain", "graph", "report"])
def test_every_directory_command_names_each_bad_rank_and_exits_2(
    mixed_ranks: Path, tmp_path: Path, command: str
) -> None:
    extra = ["-o", str(tmp_path / ("out.svg" if command == "graph" else "out.report.html"))]
    done = run_cli(command, str(mixed_ranks), *(extra if command != "explain" else ["--json"]), text=True)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2
    for line, (rank, problem) in zip(lines, BAD.items()):
        assert line.startswith(f"kerneltrace: error: {mixed_ranks}/{RUN}-TP-{rank}.trace.json.gz: ")
        assert problem in line
    if command == "explain":
        assert [r["rank"] for r in json.loads(done.stdout)["ranks"]] == [0, 1]
    else:
        assert min(p.name for p in tmp_path.iterdir()).startswith("out-rank0")


def test_diff_of_directories_with_a_bad_rank(mixed_ranks: Path) -> None:
    done = run_cli("diff", str(mixed_ranks), str(mixed_ranks), text=True)
    assert done.returncode == 2 and "rank 0" in done.stdout and "rank 1" in done.stdout
    assert len(done.stderr.splitlines()) == 4  # each bad rank, once for BEFORE and once for AFTER


def test_a_directory_of_only_bad_ranks(tmp_path: Path) -> None:
    for rank in range(64):
        (tmp_path / f"{RUN}-TP-{rank}.trace.json.gz").write_bytes(b"not a trace")
    done = run_cli("explain", str(tmp_path), text=True)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 65
    assert (
        lines[0]
        == f"kerneltrace: error: {tmp_path}/{RUN}-TP-0.trace.json.gz: named .gz but is not gzip data (starts with b'not a tr')"
    )
    assert lines[-1].startswith(
        f"kerneltrace: error: {tmp_path}: none of its 64 rank traces could be explained"
    )
