"""Real traces for the graph tests: CPU runs of a small KV-cast model, the shared H200 traces."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest
from kv_cast_model import profile_decode

MODEL_DIR = Path(__file__).resolve().parent
LLAMA = "hf_llama_generate_stack.json.gz"
# Every character a C++ kernel name or a hostile trace can hold that breaks DOT, HTML or a terminal.
NASTY_SUFFIX = "<float, {lambda()#1}>|\"&\\'\x07\x1b[31m!"


@pytest.fixture(scope="session")
def model_dir() -> Path:
    return MODEL_DIR


@pytest.fixture(scope="session")
def kv_traces(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(before, after): 3 profiled CPU decode steps of 4 layers, whole-buffer cast vs gather-then-cast."""
    directory = tmp_path_factory.mktemp("kv")
    before = profile_decode(directory / "whole_cast.json", gather_first=False)
    after = profile_decode(directory / "gather_then_cast.json", gather_first=True)
    return before, after


@pytest.fixture(scope="session")
def kv_analyses(kv_traces: tuple[Path, Path]):
    from tracer.api import explain_trace

    before, after = kv_traces
    return explain_trace(before, source=(MODEL_DIR,)), explain_trace(after, source=(MODEL_DIR,))


@pytest.fixture(scope="session")
def llama_trace(shared_gpu_traces: Path) -> Path:
    return shared_gpu_traces / LLAMA


@pytest.fixture(scope="session")
def llama_analysis(llama_trace: Path, transformers_src: Path):
    from tracer.api import explain_trace

    return explain_trace(llama_trace, source=(transformers_src,))


@pytest.fixture(scope="session")
def nasty_trace(llama_trace: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The llama trace with its hottest kernel renamed to contain every special character.

    Returns the trace and the new kernel name.
    """
    document = orjson.loads(gzip.decompress(llama_trace.read_bytes()))
    totals: dict[str, float] = {}
    for event in document["traceEvents"]:
        if event.get("cat") == "kernel":
            totals[event["name"]] = totals.get(event["name"], 0.0) + event.get("dur", 0.0)
    hottest = max(totals, key=totals.__getitem__)
    nasty = f"void hot_kernel{NASTY_SUFFIX}"
    for event in document["traceEvents"]:
        if event.get("cat") == "kernel" and event["name"] == hottest:
            event["name"] = nasty
    path = tmp_path_factory.mktemp("nasty") / "nasty_names.json.gz"
    path.write_bytes(gzip.compress(orjson.dumps(document)))
    return path, nasty


@pytest.fixture(scope="session")
def glm5_analyses(own_gpu_traces: Path, repo_root: Path):
    """(cast_whole, gather_then_cast): the founding case on an H200, 2 decode steps of 78 layers."""
    from tracer.api import explain_trace

    return tuple(
        explain_trace(own_gpu_traces / f"glm5_{variant}_stack.json.gz", source=(repo_root,))
        for variant in ("cast_whole", "gather_then_cast")
    )
