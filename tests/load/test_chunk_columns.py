"""What a worker sends for one chunk (`parse_chunk`): each distinct name and args once, and an index
per row that rebuilds the rows of a table loaded in one process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

from tracer.load.chunks import EventChunks
from tracer.load.columns import EventTableBuilder
from tracer.load.fast import add_chunk
from tracer.load.parallel import parse_chunk
from tracer.load.source import read_blocks

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "tests" / "fixtures" / "transformers" / "hf_llama_generate_stack.json.gz"


def test_a_chunk_sends_each_name_and_args_once_with_an_index_per_row() -> None:
    raw = next(iter(EventChunks(read_blocks(TRACE, []))))
    expected = EventTableBuilder()
    add_chunk(expected, raw, 0)
    table = expected.table

    sent = parse_chunk(raw)

    assert sent.rows == len(table) > 1000
    assert len(sent.names) == len(set(sent.names)) == len(set(table.name))
    assert len(set(sent.args)) == len(sent.args) > 10  # distinct args, as JSON, each once
    names = np.frombuffer(sent.name_index, dtype=np.int32).tolist()
    assert [sent.names[i] for i in names] == table.name
    args = [None, *map(orjson.loads, sent.args)]
    assert [args[i] for i in np.frombuffer(sent.args_index, dtype=np.int32).tolist()] == table.args


def test_a_workers_chunks_clean_each_args_once_and_count_alike(monkeypatch) -> None:
    """A worker's chunks share what their builders cleaned: the second chunk with the same bad
    shapes gets the same args and counts them as malformed as the first did."""
    import tracer.load.parallel

    event = (
        b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": %d, "dur": 1, '
        b'"args": {"External id": %d, "Input Dims": [[-1, 2], [2, 2]], "Input type": ["float", "float"]}}'
    )
    raw = b"[" + b",".join(event % (ts, ts) for ts in range(1, 5)) + b"]"
    memo: dict = {}
    monkeypatch.setattr(tracer.load.parallel, "_CLEANED", memo)
    first, second = parse_chunk(raw), parse_chunk(raw)
    assert len(memo) == 1  # cleaned once
    assert first.malformed == second.malformed == 1  # the bad dims, counted in each chunk
    assert first.args == second.args and b"-1" not in first.args[0]
    assert first.names == second.names and first.name_index == second.name_index
