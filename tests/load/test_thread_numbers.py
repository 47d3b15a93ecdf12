"""Thread numbering and the depth check done over all threads at once give what the per-thread
versions give, on a real H200 trace and on random nestings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tracer.load.depth as depth
from tracer.load import load_trace
from tracer.model.events import Cat, EventTable
from tracer.model.threads import thread_numbers


@pytest.fixture(scope="module")
def deepseek(shared_gpu_traces: Path):
    return load_trace(shared_gpu_traces / "hf_deepseekv3_generate_stack.json.gz").events


def _per_thread_depths(table: EventTable, rows: np.ndarray, monkeypatch) -> np.ndarray:
    with monkeypatch.context() as patch:
        patch.setattr(depth, "_lanes", lambda *_: None)
        return depth._depths(table, rows)


def test_thread_numbers_are_np_unique_of_the_pairs(deepseek) -> None:
    pid, tid = np.asarray(deepseek.pid), np.asarray(deepseek.tid)
    _, expected = np.unique(np.stack([pid, tid], axis=1), axis=0, return_inverse=True)
    assert len(set(zip(pid.tolist(), tid.tolist(), strict=True))) == 2  # host thread, GPU stream
    assert np.array_equal(thread_numbers(pid, tid), expected.reshape(-1))


def test_depths_over_all_threads_match_thread_by_thread(deepseek, monkeypatch) -> None:
    cats = np.asarray(deepseek.cat)
    for cat in (Cat.CPU_OP, Cat.PYTHON_FUNCTION):
        rows = np.flatnonzero(cats == int(cat))
        lanes = depth._depths(deepseek, rows)
        assert np.array_equal(lanes, _per_thread_depths(deepseek, rows, monkeypatch))
        assert lanes.max() >= 5  # real nesting, not a flat list


def test_depths_match_on_random_nestings(monkeypatch) -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        table = EventTable()
        for _ in range(300):
            start = int(rng.integers(-1000, 1000))
            table.add(
                Cat.CPU_OP,
                "op",
                int(rng.integers(0, 3)),
                int(rng.integers(-2, 2)),
                start,
                int(rng.integers(0, 400)),
            )
        rows = np.arange(len(table))
        assert np.array_equal(depth._depths(table, rows), _per_thread_depths(table, rows, monkeypatch))
        pid, tid = np.asarray(table.pid), np.asarray(table.tid)
        _, expected = np.unique(np.stack([pid, tid], axis=1), axis=0, return_inverse=True)
        assert np.array_equal(thread_numbers(pid, tid), expected.reshape(-1))
