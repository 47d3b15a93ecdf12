"""Memory per task is bounded: a rank too big for the memory its task has is explained in its first
window that fits (`--window 0:END`, chosen for it), with a note, instead of being refused."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from tests.engines.conftest import STEPS
from tracer.load.memory import MEMORY_LIMIT_ENV, estimated_peak, json_size_of
from tracer.ranks import explain_rank_directory, window_that_fits

NAME = "1790000200.0-TP-0-DECODE.trace.json.gz"


@pytest.fixture(scope="module")
def long_rank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real GPU rank trace (1.6 s) with its clock slowed 10x: 16 s long, so windows can be cut."""
    document = orjson.loads(gzip.decompress((STEPS / "gpu_two_procs" / NAME).read_bytes()))
    first = min(e["ts"] for e in document["traceEvents"] if isinstance(e.get("ts"), (int, float)))
    for event in document["traceEvents"]:
        if isinstance(event.get("ts"), (int, float)):
            event["ts"] = first + (event["ts"] - first) * 10
        if isinstance(event.get("dur"), (int, float)):
            event["dur"] = event["dur"] * 10
    directory = tmp_path_factory.mktemp("long")
    (directory / NAME).write_bytes(gzip.compress(kineto_layout(document), compresslevel=1))
    return directory


def kineto_layout(document: dict) -> bytes:
    """One event per line, as Kineto writes a trace (what the chunked loader and windows read)."""
    head = b"".join(
        b"%s: %s,\n" % (orjson.dumps(k), orjson.dumps(v)) for k, v in document.items() if k != "traceEvents"
    )
    events = b",\n".join(orjson.dumps(e) for e in document["traceEvents"])
    return b"{\n" + head + b'"traceEvents": [\n' + events + b"\n]}\n"


def test_a_rank_too_big_for_its_task_is_explained_in_a_window(long_rank: Path, monkeypatch) -> None:
    whole = explain_rank_directory(long_rank, workers=1)[0].ranks[0].analysis
    limit = int(estimated_peak(json_size_of(long_rank / NAME)) * 0.6)
    monkeypatch.setenv(MEMORY_LIMIT_ENV, str(limit))
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
