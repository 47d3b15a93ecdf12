"""Workers that read byte ranges of a plain trace file themselves give the table, notes and explain
output of one process, on real H200 traces and on the layouts and breakages around the cuts."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

import tracer.load.parallel
import tracer.load.ranges
from tracer.errors import InputError
from tracer.load import load_trace
from tracer.load.ranges import plan_ranges, range_bytes, read_range

TRACES = ("hf_llama_generate_stack.json.gz", "hf_deepseekv3_generate_stack.json.gz")


@pytest.fixture
def ranges_used(monkeypatch) -> list[int]:
    """Small ranges (hundreds per trace), and a record of how many each ranged load parsed."""
    monkeypatch.setattr(tracer.load.ranges, "RANGE_BYTES", 64 << 10)
    monkeypatch.setattr(tracer.load.ranges, "MIN_RANGE_BYTES", 64 << 10)
    used: list[int] = []
    original = tracer.load.parallel.parse_ranges_in_workers

    def counting(path, plan, builder, workers):
        used.append(len(plan.ranges))
        return original(path, plan, builder, workers)

    monkeypatch.setattr(tracer.load, "parse_ranges_in_workers", counting)
    return used


def _plain(tmp_path: Path, shared_gpu_traces: Path, name: str) -> Path:
    path = tmp_path / name.removesuffix(".gz")
    path.write_bytes(gzip.decompress((shared_gpu_traces / name).read_bytes()))
    return path


def _load(path: Path, workers: int, monkeypatch):
    monkeypatch.setenv("KERNELTRACE_LOAD_WORKERS", str(workers))
    return load_trace(path)


@pytest.mark.parametrize("name", TRACES)
def test_ranges_in_workers_load_the_table_of_one_process(
    name: str, tmp_path: Path, shared_gpu_traces: Path, monkeypatch, ranges_used
) -> None:
    path = _plain(tmp_path, shared_gpu_traces, name)
    alone = _load(path, 1, monkeypatch)
    assert ranges_used == []  # one process streams the file
    shared = _load(path, 3, monkeypatch)
    assert len(ranges_used) == 1 and ranges_used[0] > 50
    assert shared.events == alone.events
    assert shared.meta == alone.meta
    assert shared.notes == alone.notes
    assert shared.fwdbwd == alone.fwdbwd
    names = shared.events.name  # interning survives the trip
    assert len({id(n) for n in names}) == len(set(names))


def test_ranges_cover_every_event_once(tmp_path: Path, shared_gpu_traces: Path) -> None:
    path = _plain(tmp_path, shared_gpu_traces, TRACES[0])
    plan = plan_ranges(path, 32 << 10)
    assert plan is not None
    events = [e for r in plan.ranges for e in orjson.loads(read_range(path, r))]
    events += orjson.loads(plan.tail) if plan.tail else []
    document = orjson.loads(path.read_bytes())
    assert events == document.pop("traceEvents")
    assert plan.top == document
    assert all(a.end <= b.start for a, b in zip(plan.ranges, plan.ranges[1:], strict=False))


def test_keys_after_the_events_and_tiny_traces(
    tmp_path: Path, shared_gpu_traces: Path, monkeypatch, ranges_used
) -> None:
    """Top-level keys written after traceEvents reach the metadata; a trace of one or no event loads
    as one process loads it (or fails with its error)."""
    document = orjson.loads(gzip.decompress((shared_gpu_traces / TRACES[0]).read_bytes()))
    events = document.pop("traceEvents")
    lines = b",\n".join(b"  " + orjson.dumps(e) for e in events)
    after = b'"deviceProperties": ' + orjson.dumps(document.pop("deviceProperties"))
    head = orjson.dumps(document)[:-1]
    path = tmp_path / "keys_after.json"
    path.write_bytes(head + b', "traceEvents": [\n' + lines + b"\n], " + after + b"}\n")
    alone, shared = _load(path, 1, monkeypatch), _load(path, 2, monkeypatch)
    assert ranges_used and shared.events == alone.events and shared.meta == alone.meta
    assert shared.meta.device_name == "NVIDIA H200"
    kernel = next(e for e in events if e.get("cat") == "kernel")
    for body in ([kernel], []):
        tiny = tmp_path / f"tiny{len(body)}.json"
        tiny.write_bytes(
            b'{"traceEvents": [\n' + b",\n".join(b"  " + orjson.dumps(e) for e in body) + b"\n]}"
        )
        outcomes = []
        for workers in (1, 2):
            try:
                outcomes.append(_load(tiny, workers, monkeypatch).events)
            except InputError as err:
                outcomes.append(str(err))
        assert outcomes[0] == outcomes[1]


def test_truncated_plain_trace_fails_alike(tmp_path: Path, shared_gpu_traces: Path, monkeypatch) -> None:
    path = _plain(tmp_path, shared_gpu_traces, TRACES[0])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    messages = []
    for workers in (1, 2):
        monkeypatch.setattr(tracer.load.ranges, "RANGE_BYTES", 64 << 10)
        monkeypatch.setattr(tracer.load.ranges, "MIN_RANGE_BYTES", 64 << 10)
        with pytest.raises(InputError) as err:
            _load(path, workers, monkeypatch)
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_explain_json_is_the_same_at_1_and_3_workers(
    tmp_path: Path, shared_gpu_traces: Path, monkeypatch, ranges_used
) -> None:
    from click.testing import CliRunner

    from tracer.cli import main

    path = _plain(tmp_path, shared_gpu_traces, TRACES[1])
    outputs = []
    for workers in ("1", "3"):
        monkeypatch.setenv("KERNELTRACE_LOAD_WORKERS", workers)
        result = CliRunner().invoke(main, ["explain", str(path), "--json"])
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
    assert ranges_used
    assert outputs[0] == outputs[1]


def test_many_workers_get_smaller_ranges() -> None:
    """Workers' parse buffers together stay a bounded share of the trace: more workers, smaller ranges."""
    size = 535 << 20
    sizes = [range_bytes(size, workers) for workers in (1, 2, 4, 8, 16, 64)]
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[1] == tracer.load.ranges.RANGE_BYTES and sizes[-1] == tracer.load.ranges.MIN_RANGE_BYTES
    assert 16 * sizes[4] * tracer.load.ranges.PARSE_PER_RANGE_BYTE <= size * tracer.load.ranges.WORKERS_SHARE


def test_a_window_loads_alike_in_ranges(
    tmp_path: Path, shared_gpu_traces: Path, monkeypatch, ranges_used
) -> None:
    """--window/--steps drop events while parsing: the range workers drop the same ones."""
    from tracer.load import TraceWindow

    path = _plain(tmp_path, shared_gpu_traces, TRACES[0])
    window = TraceWindow.parse(window="200:900")
    monkeypatch.setenv("KERNELTRACE_LOAD_WORKERS", "1")
    alone = load_trace(path, window)
    monkeypatch.setenv("KERNELTRACE_LOAD_WORKERS", "3")
    shared = load_trace(path, window)
    assert ranges_used
    assert 0 < len(shared.events) < len(load_trace(path).events)
    assert shared.events == alone.events and shared.notes == alone.notes
