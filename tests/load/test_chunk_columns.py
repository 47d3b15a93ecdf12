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
