"""The recorder's truth on a workload whose lines are known from markers (works on any torch)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bench.corpus.frames import is_library_name
from bench.corpus.recorder import Workload, record

WORKLOAD = Path(__file__).with_name("recorded_workload.py")
NAME = "recorded_workload.py"  # relative to the deepest sys.path entry: tests/corpus under pytest


def marker_lines() -> dict[str, int]:
    lines = {}
    for number, text in enumerate(WORKLOAD.read_text().splitlines(), start=1):
        if "# truth:" in text:
            lines[text.rsplit("# truth:", 1)[1].strip()] = number
    return lines


def test_truth_is_the_user_line_of_each_outermost_call(tmp_path: Path) -> None:
    import recorded_workload  # tests/corpus is on sys.path (pytest's rootdir-relative import)

    marks = marker_lines()
    workload = Workload("recorded", recorded_workload.build, steps=2, warmup=1)
    recording = record(
        workload, tmp_path, device=torch.device("cpu"), source_roots=["repo:"], find_source=lambda name: None
    )
    document = json.loads(recording.truth_path.read_text())
    lines = [document["truth"][ext] for ext in sorted(document["truth"], key=int)]
    assert all(line.rpartition(":")[0].endswith(NAME) for line in lines), lines
    numbers = [int(line.rpartition(":")[2]) for line in lines]
    one_step = [marks[name] for name in ("float", "sum", "to", "helper", "helper", "add")]
    odd_step = [marks["float"], marks["mul"], *one_step[1:]]
    helper_mean = marks["add"]  # `.mean()` of helper(y) runs on the `add` line too
    assert numbers == [*odd_step[:-1], helper_mean, marks["add"], *one_step[:-1], helper_mean, marks["add"]]
    report = document["report"]
    assert report["dropped"] == 0 and report["truth_time_share"] == 1.0
    if report["has_call_from"]:
        assert report["callfrom_agreement"] == 1.0


def test_library_mirror_agrees_with_the_join() -> None:
    from tracer.join.frames import is_library_file

    names = [
        "torch/nn/modules/module.py",
        "contextlib.py",
        "functools.py",
        "<frozen runpy>",
        "triton/runtime/jit.py",
        "transformers/models/llama/modeling_llama.py",
        "sglang/srt/layers/layernorm.py",
        "bench/corpus/zoo/casts.py",
        "/usr/lib/python3.12/threading.py",
        "/opt/venv/lib/python3.12/site-packages/torch/_tensor.py",
        "typing_extensions.py",
        "_collections_abc.py",
        "importlib/__init__.py",
        "concurrent/futures/thread.py",
        "nn.Module: Linear_0",
        "accelerate/hooks.py",
        "examples/glm5_kv_cast/model.py",
    ]
    for name in names:
        assert is_library_name(name) == is_library_file(name), name
