"""Memory per task is bounded: a rank too big for the memory its task has is explained in consecutive
windows of its ProfilerStep#N ranges that each fit, combined into the numbers of the whole trace; a
trace without ProfilerStep#N is explained in its first window that fits (`--window 0:END`), with a note
saying it is a part. Never refused."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from tests.engines.conftest import STEPS
from tracer.load.memory import MEMORY_LIMIT_ENV, estimated_peak, json_size_of
from tracer.ranks import explain_rank_directory, window_that_fits, windows_that_fit

NAME = "1790000200.0-TP-0-DECODE.trace.json.gz"
GPU = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
STEPPED = "glm5_cast_whole_stack.json.gz"  # H200, 2 ProfilerStep#N of 78 layers, Python stacks


@pytest.fixture(scope="module")
def long_rank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real GPU rank trace (1.6 s) with its clock slowed 10x: 16 s long, so windows can be cut."""
    return slowed(STEPS / "gpu_two_procs" / NAME, tmp_path_factory.mktemp("long") / NAME)


@pytest.fixture(scope="module")
def stepped_rank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real multi-step GPU trace (2 ProfilerStep#N, 0.4 s) slowed 10x, as one rank of a directory."""
    return slowed(GPU / STEPPED, tmp_path_factory.mktemp("stepped") / "r-TP-0.trace.json.gz")


def slowed(source: Path, out: Path) -> Path:
    """`source` with its clock slowed 10x (the GPU tail of a window is 1 s), in Kineto's layout."""
    document = orjson.loads(gzip.decompress(source.read_bytes()))
    first = min(e["ts"] for e in document["traceEvents"] if isinstance(e.get("ts"), (int, float)))
    for event in document["traceEvents"]:
        if isinstance(event.get("ts"), (int, float)):
            event["ts"] = first + (event["ts"] - first) * 10
        if isinstance(event.get("dur"), (int, float)):
            event["dur"] = event["dur"] * 10
    out.write_bytes(gzip.compress(kineto_layout(document), compresslevel=1))
    return out.parent


def kineto_layout(document: dict) -> bytes:
    """One event per line, as Kineto writes a trace (what the chunked loader and windows read)."""
    head = b"".join(
        b"%s: %s,\n" % (orjson.dumps(k), orjson.dumps(v)) for k, v in document.items() if k != "traceEvents"
    )
    events = b",\n".join(orjson.dumps(e) for e in document["traceEvents"])
    return b"{\n" + head + b'"traceEvents": [\n' + events + b"\n]}\n"


def test_a_rank_without_profiler_steps_is_explained_in_its_first_window(long_rank: Path, monkeypatch) -> None:
    whole = explain_rank_directory(long_rank, workers=1)[0].ranks[0].analysis
    limit = int(estimated_peak(json_size_of(long_rank / NAME)) * 0.6)
    monkeypatch.setenv(MEMORY_LIMIT_ENV, str(limit))
    assert windows_that_fit(long_rank / NAME) is None  # no ProfilerStep#N to cut it at
    window, note = window_that_fits(long_rank / NAME)
    assert window is not None and window.start_ms == 0 and 1000 < window.end_ms < 16_000
    report, failures = explain_rank_directory(long_rank, workers=1)
    assert failures == ()
    part = report.ranks[0].analysis
    assert part.notes[-1] == note and note.startswith("too big for the memory of its task")
    assert report.notes == (f"{NAME}: {note}",)
    assert 0 < part.total_ns < whole.total_ns and part.findings  # a part of the trace, still explained


def test_a_rank_that_fits_is_explained_whole(long_rank: Path) -> None:
    assert window_that_fits(long_rank / NAME) == (None, None)


def test_a_rank_too_big_for_its_task_is_explained_whole_in_windows(stepped_rank: Path, monkeypatch) -> None:
    path = next(stepped_rank.iterdir())
    whole = explain_rank_directory(stepped_rank, workers=1)[0].ranks[0]
    monkeypatch.setenv(MEMORY_LIMIT_ENV, str(estimated_peak(json_size_of(path)) - 1))  # just too small
    plan = windows_that_fit(path)
    assert plan is not None and len(plan[0]) == 2  # one window per step: each fits, both do not
    windows = plan[0]
    assert windows[0].start_ms == 0 and windows[0].end_ms == windows[1].start_ms  # they tile the trace
    report, failures = explain_rank_directory(stepped_rank, workers=1)
    assert failures == ()
    split, alone = report.ranks[0].analysis, whole.analysis
    assert [
        (f.kernel, f.origin, f.calls, f.total_ns, f.calls_per_step, f.bytes_per_call) for f in split.findings
    ] == [
        (f.kernel, f.origin, f.calls, f.total_ns, f.calls_per_step, f.bytes_per_call) for f in alone.findings
    ]
    assert [f.share for f in split.findings] == pytest.approx([f.share for f in alone.findings])
    assert [f.gbps for f in split.findings] == pytest.approx([f.gbps for f in alone.findings])
    assert [f.invariant for f in split.findings] == [f.invariant for f in alone.findings]
    assert (split.total_ns, split.steps, split.step_starts_ns, split.step_ends_ns) == (
        alone.total_ns,
        alone.steps,
        alone.step_starts_ns,
        alone.step_ends_ns,
    )
    assert split.step_ns == pytest.approx(alone.step_ns) and split.window_ns == alone.window_ns
    assert split.attributed_fraction == pytest.approx(alone.attributed_fraction)
    assert report.ranks[0].collectives == whole.collectives
    note = split.notes[-1]
    assert note.startswith(plan[1]) and "combined" in note and "not exact over the windows: GPU busy" in note
    assert report.notes == (f"{path.name}: {note}",)
