"""The loader on real traces (H200 fixtures, CPU runs made here) and on broken files."""

from __future__ import annotations

import gzip
import random
from collections import Counter
from pathlib import Path

import orjson
import pytest

import tracer.load.source
from tracer.errors import InputError
from tracer.load import load_trace
from tracer.model.events import NONE, Cat


@pytest.fixture(scope="module")
def llama(shared_gpu_traces: Path):
    return load_trace(shared_gpu_traces / "hf_llama_generate_stack.json.gz")


def test_h200_trace_columns_and_meta(llama) -> None:
    table = llama.events
    counts = Counter(Cat(c) for c in table.cat)
    # Counted with a plain json.load of the same file: every duration event of a kept category.
    assert counts[Cat.KERNEL] == 4516
    assert counts[Cat.MEMCPY] == 96
    assert counts[Cat.MEMSET] == 8
    assert counts[Cat.CPU_OP] == 16050
    assert counts[Cat.PYTHON_FUNCTION] == 30339
    assert counts[Cat.RUNTIME] == 4114
    assert counts[Cat.DRIVER] == 792
    assert Cat.OTHER not in counts  # "overhead" and "Trace" spans are dropped
    meta = llama.meta
    assert meta.device_name == "NVIDIA H200"
    assert meta.devices[0]["numSms"] == 132
    assert (meta.with_stack, meta.record_shapes, meta.has_call_from) == (True, True, False)
    assert meta.cuda_runtime_version == 13000
    assert meta.base_time_ns == 1790857026000000000
    assert meta.schema_version == 1
    assert llama.notes == []


def test_h200_rows_keep_ids_times_and_trimmed_args(llama) -> None:
    table = llama.events
    # The first event of the file: aten::empty at ts 5084446467313.018 us, dur 17.092 us.
    row = table.raw_index.index(0)
    assert table.name[row] == "aten::empty"
    assert (table.ts_ns[row], table.dur_ns[row]) == (5084446467313018, 17092)
    assert table.ext_id[row] == 284673
    assert set(table.args[row]) == {"Input Dims", "Input type", "Input Strides", "Concrete Inputs"}
    kernels = table.rows(Cat.KERNEL)
    first = kernels[0]
    assert table.correlation[first] != NONE and table.ext_id[first] != NONE
    assert set(table.args[first]) == {"grid", "block", "stream", "device"}
    memcpy = table.rows(Cat.MEMCPY)[0]
    assert table.args[memcpy]["bytes"] == 8
    runtime = table.rows(Cat.RUNTIME)[0]
    assert table.args[runtime] == {"cbid": 317} and table.name[runtime] == "cudaStreamIsCapturing"
    # Builtin frames lose their object address so that identical calls share one interned name.
    names = {table.name[r] for r in table.rows(Cat.PYTHON_FUNCTION)}
    assert "<built-in method to of Tensor object>" in names
    assert not any(" at 0x" in name for name in names)
    assert len(table.name) == len(table)
    # Identical args are one shared dict (memory), never copies.
    shapes = [table.args[r] for r in table.rows(Cat.KERNEL)]
    assert len({id(a) for a in shapes}) < len(shapes) / 10


def test_same_trace_in_any_layout_loads_the_same(
    tmp_path: Path, shared_gpu_traces: Path, monkeypatch
) -> None:
    source = shared_gpu_traces / "hf_deepseekv3_generate_stack.json.gz"
    document = orjson.loads(gzip.decompress(source.read_bytes()))
    pretty = tmp_path / "kineto.json"
    pretty.write_bytes(gzip.decompress(source.read_bytes()))
    compact = tmp_path / "compact.json"  # one line: not Kineto's layout, parsed whole
    compact.write_bytes(orjson.dumps(document))
    reference = load_trace(source)
    # Small blocks: hundreds of chunk boundaries, each cut at an event boundary.
    monkeypatch.setattr(tracer.load.source, "BLOCK_BYTES", 64 << 10)
    for path in (pretty, compact):
        loaded = load_trace(path)
        assert loaded.events == reference.events
        assert loaded.meta.device_name == reference.meta.device_name
    assert len(reference.events) == sum(1 for e in document["traceEvents"] if e.get("ph") == "X") - sum(
        1 for e in document["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("overhead", "Trace")
    )


def test_worker_processes_load_the_same_table(shared_gpu_traces: Path, monkeypatch) -> None:
    """Big traces are parsed in worker processes (KERNELTRACE_LOAD_WORKERS forces it here)."""
    source = shared_gpu_traces / "hf_llama_generate_stack.json.gz"
    monkeypatch.setenv("KERNELTRACE_LOAD_WORKERS", "1")
    alone = load_trace(source)
    monkeypatch.setenv("KERNELTRACE_LOAD_WORKERS", "2")
    monkeypatch.setattr(tracer.load.source, "BLOCK_BYTES", 1 << 20)  # ~20 chunks
    shared = load_trace(source)
    assert shared.events == alone.events
    assert shared.meta == alone.meta
    # Interning survives the trip: one str object per distinct name, one dict per distinct args.
    names = shared.events.name
    assert len({id(n) for n in names}) == len(set(names))


def test_cpu_trace_without_gpu_loads_with_a_note(stack_trace_path: Path) -> None:
    trace = load_trace(stack_trace_path)
    assert trace.meta.with_stack is True
    assert Cat.KERNEL not in set(trace.events.cat)
    assert any("no GPU activity" in note for note in trace.notes)
    import torch

    assert trace.meta.has_call_from == (tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 14))


def test_shuffled_events_string_pids_and_repeated_metadata(tmp_path: Path, stack_trace_path: Path) -> None:
    """Kineto's quirks, all at once: unsorted events, string pids ("Spans"), repeated thread_name."""
    document = orjson.loads(stack_trace_path.read_bytes())
    events = document["traceEvents"]
    assert any(isinstance(e.get("pid"), str) for e in events)
    events.extend(e for e in list(events) if e.get("ph") == "M")
    random.Random(7).shuffle(events)
    shuffled = tmp_path / "shuffled.json"
    shuffled.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    original, reordered = load_trace(stack_trace_path), load_trace(shuffled)
    assert sorted(zip(original.events.ts_ns, original.events.name)) == sorted(
        zip(reordered.events.ts_ns, reordered.events.name)
    )


# -- broken inputs: one line each, naming the file and the problem --------------------------------


def _gpu_json(shared_gpu_traces: Path) -> bytes:
    return gzip.decompress((shared_gpu_traces / "hf_llama_generate_stack.json.gz").read_bytes())


BROKEN = {
    "missing.json": (None, "no such file"),
    "empty.json": (b"", "empty file"),
    "garbage.json": (b"\x00\x01binary junk\xff", "not JSON"),
    "text.json": (b"this is not json at all\n", "not JSON"),
    "object.json": (b"{}", 'no "traceEvents" list'),
    "list.json": (b"[1, 2, 3]", "JSON list but not a torch.profiler trace"),
    "events-not-list.json": (b'{"traceEvents": {"ph": "X"}}', 'no "traceEvents" list'),
    "metadata-only.json": (
        b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {}}]}',
        "no duration events",
    ),
    "garbage.json.gz": (b"plainly not gzip", "named .gz but is not gzip data"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_inputs_get_one_line_errors(tmp_path: Path, name: str) -> None:
    content, problem = BROKEN[name]
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError) as caught:
        load_trace(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(str(path) + ": ")
    assert problem in message


def test_truncated_gzip_and_truncated_json(tmp_path: Path, shared_gpu_traces: Path) -> None:
    whole = (shared_gpu_traces / "hf_llama_generate_stack.json.gz").read_bytes()
    truncated_gz = tmp_path / "cut.json.gz"
    truncated_gz.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InputError, match=r"cut\.json\.gz: truncated gzip"):
        load_trace(truncated_gz)
    data = _gpu_json(shared_gpu_traces)
    truncated_json = tmp_path / "cut.json"
    truncated_json.write_bytes(data[: len(data) // 3])
    with pytest.raises(InputError, match=r"cut\.json: truncated JSON"):
        load_trace(truncated_json)
    corrupt = tmp_path / "corrupt.json.gz"
    corrupt.write_bytes(whole[:100] + bytes(b ^ 0x5A for b in whole[100:2000]) + whole[2000:])
    with pytest.raises(InputError, match=r"corrupt\.json\.gz: corrupt gzip data"):
        load_trace(corrupt)


def test_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        load_trace(tmp_path)


def test_gzip_sniffed_by_content_not_name(tmp_path: Path, shared_gpu_traces: Path) -> None:
    data = _gpu_json(shared_gpu_traces)
    misnamed_plain = tmp_path / "plain.json.gz"
    misnamed_plain.write_bytes(data)
    misnamed_gzip = tmp_path / "zipped.json"
    misnamed_gzip.write_bytes(gzip.compress(data, compresslevel=1))
    plain, zipped = load_trace(misnamed_plain), load_trace(misnamed_gzip)
    assert len(plain.events) == len(zipped.events) == 55915
    assert any("named .gz but holds plain JSON" in note for note in plain.notes)
