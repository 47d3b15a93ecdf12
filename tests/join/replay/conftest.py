"""Shared inputs of the replay tests: the H200 graph traces and an independent reading of them."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPLAY_FIXTURES = HERE / "fixtures"
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")

# What each capture-time op's kernel is called: the independent check that replay kernel k really
# is capture launch k (the code under test never sees this table).
OP_KERNEL_WORDS = {
    "aten::mm": ("nvjet", "splitKreduce", "gemm"),
    "aten::bmm": ("nvjet", "gemm"),
    "aten::copy_": ("copy_kernel",),
    "aten::_index_put_impl_": ("index_put",),
    "aten::index": ("gather", "index_kernel"),
    "aten::topk": ("topk", "Sort"),
    "aten::_softmax": ("softmax",),
    "aten::add": ("_add",),
    "aten::mul": ("Mul", "BinaryFunctor", "AUnaryFunctor"),
    "aten::pow": ("pow",),
    "aten::rsqrt": ("rsqrt",),
    "aten::mean": ("MeanOps",),
    "aten::sum": ("reduce_kernel",),
    "aten::div": ("Div", "BinaryFunctor"),
    "aten::silu": ("silu",),
    "aten::clamp_min": ("clamp",),
}


@dataclass(frozen=True)
class RawReplay:
    """One graph launch read straight from the JSON: its kernels by start time."""

    correlation: int
    kernels: tuple[dict, ...]


@dataclass(frozen=True)
class RawGraphTrace:
    """The capture launches (in order, with their innermost op's name) and the replays."""

    capture_ops: tuple[str, ...]
    replays: tuple[RawReplay, ...]


def read_raw(path: Path) -> RawGraphTrace:
    """An independent parse (json, no kerneltrace code) of a trace holding one capture and its replays."""
    with gzip.open(path) as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    begin = next(e["ts"] for e in events if e["name"] == "cudaStreamBeginCapture")
    end = next(e["ts"] for e in events if e["name"] == "cudaStreamEndCapture")
    op_by_ext: dict[int, str] = {}
    for event in sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: e["ts"]):
        ext = event.get("args", {}).get("External id")
        if ext is not None:
            op_by_ext[ext] = event["name"]
    launches = sorted(
        (e for e in events if e["name"] in LAUNCHES and begin <= e["ts"] <= end), key=lambda e: e["ts"]
    )
    graph_launches = sorted((e for e in events if e["name"] == "cudaGraphLaunch"), key=lambda e: e["ts"])
    replays = []
    for launch in graph_launches:
        corr = launch["args"]["correlation"]
        kernels = sorted(
            (e for e in events if e.get("cat") == "kernel" and e["args"].get("correlation") == corr),
            key=lambda e: e["ts"],
        )
        replays.append(RawReplay(corr, tuple(kernels)))
    return RawGraphTrace(tuple(op_by_ext[e["args"]["External id"]] for e in launches), tuple(replays))


def kernel_fits_op(kernel: str, op: str) -> bool:
    return any(word in kernel for word in OP_KERNEL_WORDS[op])


def marked_line(path: Path, pattern: str) -> int:
    """The 1-based line of `path` whose text matches `pattern` (exactly one)."""
    lines = [i for i, text in enumerate(path.read_text().splitlines(), start=1) if re.search(pattern, text)]
    assert len(lines) == 1, (path, pattern, lines)
    return lines[0]


@pytest.fixture(scope="session")
def replay_fixtures() -> Path:
    return REPLAY_FIXTURES
