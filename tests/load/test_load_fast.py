"""The loader's fast path (msgspec, `tracer.load.fast`) gives the general path's table, row for row."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from tracer.load.chunks import EventChunks
from tracer.load.columns import EventTableBuilder
from tracer.load.fast import NotClean, add_chunk, add_clean_chunk
from tracer.load.source import read_blocks
from tracer.model.events import INT_COLUMNS

REPO = Path(__file__).resolve().parents[2]
REAL_TRACES = [
    *sorted((REPO / "tests" / "fixtures" / "transformers").glob("*.json.gz")),
    *sorted((REPO / "tests" / "fixtures" / "gpu").glob("*.json.gz")),
    REPO / "tests" / "fixtures" / "cpu" / "callfrom_torch214.json.gz",
    *sorted((REPO / "tests" / "replay" / "fixtures").glob("*.json.gz")),
]


def both_paths(raw_chunks: list[bytes]) -> tuple[EventTableBuilder, EventTableBuilder, int]:
    """(general, fast) builders over the same chunks, and how many chunks the fast path refused."""
    general, fast = EventTableBuilder(), EventTableBuilder()
    first = refused = 0
    for raw in raw_chunks:
        events = orjson.loads(raw)
        general.add_events(events, first)
        try:
            assert add_clean_chunk(fast, raw, first) == len(events)
        except NotClean:
            refused += 1
            assert add_chunk(fast, raw, first) == len(events)
        first += len(events)
    return general, fast, refused


def assert_same_tables(general: EventTableBuilder, fast: EventTableBuilder) -> None:
    a, b = general.table, fast.table
    assert len(a) == len(b) > 0
    for column in (*INT_COLUMNS, "name"):
        assert list(getattr(a, column)) == list(getattr(b, column)), column
    assert a.args == b.args
    assert (general.call_from, general.malformed, general.skipped_no_ts, general.string_ids) == (
        fast.call_from,
        fast.malformed,
        fast.skipped_no_ts,
        fast.string_ids,
    )


def chunks_of(path: Path) -> list[bytes]:
    return list(EventChunks(read_blocks(path, [])))


@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_real_traces_load_the_same_by_both_paths(path: Path) -> None:
    general, fast, refused = both_paths(chunks_of(path))
    assert refused == 0  # real torch traces (2.11 on an H200, 2.14 on CPU) are clean
    assert_same_tables(general, fast)


def test_a_fresh_cpu_trace_with_stacks_and_our_ranges(tmp_path: Path) -> None:
    from tracer.instrument.runtime import named_range

    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        for _ in range(3):
            with record_function("layer.0"), named_range("kt:site:0123456789@pkg/mod.py:7"):
                (x.to(torch.bfloat16) @ x.to(torch.bfloat16)).float()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    general, fast, refused = both_paths(chunks_of(path))
    assert refused == 0
    assert_same_tables(general, fast)
    assert sum(name.startswith("kt:site:") for name in fast.table.name) == 3


def test_odd_chunks_go_to_the_general_path(tmp_path: Path) -> None:
    """String pids, a null args, a missing ts, ids as strings, backward flows: refused by the fast
    path, loaded by the general one, so nothing is lost and the odd values are counted."""
    base = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10.5, "dur": 2.0}
    odd = [
        [{**base, "pid": "Spans"}],  # a string pid: the fast path maps it the same way
        [{**base, "args": None}],
        [{**base, "ts": None}],
        [{**base, "args": {"External id": "17"}}],
        [base, {"ph": "s", "cat": "fwdbwd", "id": 3, "pid": 1, "tid": 2, "ts": 11.0}],
        [{**base, "dur": -1.0}],
        [{**base, "ts": True}],
        ["not an event", base],
        [{**base, "ph": ["X", "Y"]}, {**base, "ph": ["X", "Y"]}],  # odd phases: skipped, as there
        [{**base, "ts": 2**70}],  # an integer beyond 64 bits
        [{**base, "dur": 2**70}],
        [{**base, "args": {"Input Dims": [[[[[[[[[[1]]]]]]]]]] * 3, "External id": 4}}],
    ]
    refused = []
    for events in odd:
        raw = json.dumps(events).encode()  # json: orjson writes no integer beyond 64 bits
        general, fast, count = both_paths([raw])
        refused.append(count)
        assert list(general.table.ts_ns) == list(fast.table.ts_ns)
        assert (general.malformed, general.skipped_no_ts) == (fast.malformed, fast.skipped_no_ts)
    assert refused == [0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0]


def test_bytes_that_are_not_utf8_are_handed_over_not_raised() -> None:
    """A byte that is not UTF-8 in a name or an arg (a flipped byte in a copied trace): msgspec raises
    UnicodeDecodeError, which the fast path turns into a hand-over; the general path then loads the
    chunk or gives its own error (Unchunkable), exactly as without the fast path."""
    from tracer.load.chunks import Unchunkable

    base = b'{"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": 10.5, "dur": 2.0'
    cases = {
        "name": b"[" + base + b', "name": "aten\x80mm"}]',
        "kept arg": b"[" + base + b', "name": "aten::mm", "args": {"Input type": ["fl\xffoat"]}}]',
        "ignored arg": b"[" + base + b', "name": "aten::mm", "args": {"other": "\xfe"}}]',
        "python arg": b'[{"ph": "X", "cat": "python_function", "pid": 1, "tid": 2, "ts": 1.0, "dur": 1.0, '
        b'"name": "f\x80", "args": {"Python id": 1}}]',
    }
    outcomes = {}
    for label, raw in cases.items():
        raw = raw.decode("unicode_escape").encode("latin-1")  # the escapes become single raw bytes
        try:
            fast = EventTableBuilder()
            add_chunk(fast, raw, 0)
        except Unchunkable:
            outcomes[label] = "unchunkable"
            with pytest.raises(orjson.JSONDecodeError):
                orjson.loads(raw)
            continue
        general = EventTableBuilder()
        general.add_events(orjson.loads(raw), 0)
        assert list(general.table.name) == list(fast.table.name)
        outcomes[label] = "loaded"
    assert outcomes == {
        "name": "unchunkable",
        "kept arg": "unchunkable",
        "ignored arg": "unchunkable",
        "python arg": "unchunkable",
    }


def test_whole_load_uses_it(tmp_path: Path) -> None:
    """`load_trace` on a real trace gives the table of the general path (the parse_in_chunks route)."""
    from tracer.load import load_trace

    path = REPO / "tests" / "fixtures" / "transformers" / "hf_llama_generate_stack.json.gz"
    trace = load_trace(path)
    general = EventTableBuilder()
    events = orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    general.add_events(events, 0)
    assert list(trace.events.name) == list(general.table.name)
    assert list(trace.events.ts_ns) == list(general.table.ts_ns)


def test_nesting_deeper_than_orjson_reads_is_refused_not_raised() -> None:
    """msgspec keeps a 2,000-deep value raw; orjson (which reads the kept args) stops at 1,024: the
    fast path hands the chunk over, and the general path's own error (Unchunkable) is what surfaces."""
    from tracer.load.chunks import Unchunkable

    deep = "[" * 2000 + "1" + "]" * 2000
    raw = (
        b'[{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0, '
        b'"args": {"Input Dims": ' + deep.encode() + b"}}]"
    )
    with pytest.raises(NotClean):
        add_clean_chunk(EventTableBuilder(), raw, 0)
    with pytest.raises(Unchunkable):
        add_chunk(EventTableBuilder(), raw, 0)


@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_small_read_blocks_give_the_same_table(path: Path, monkeypatch) -> None:
    """Read in 4 KB blocks (thousands of chunks cut at event boundaries, most through the fast path;
    workers for the GPU traces), a real trace loads to the table and notes of one 8 MB block."""
    from tracer.load import load_trace, source

    whole = load_trace(path)
    monkeypatch.setattr(source, "BLOCK_BYTES", 4096)
    monkeypatch.setenv("KERNELTRACE_LOAD_WORKERS", "2" if "gpu" in str(path.parent) else "1")
    chunked = load_trace(path)
    for column in (*INT_COLUMNS, "name"):
        assert list(getattr(whole.events, column)) == list(getattr(chunked.events, column)), column
    assert whole.events.args == chunked.events.args
    assert whole.notes == chunked.notes
