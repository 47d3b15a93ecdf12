"""Timing and torch.profiler capture of decode steps, shared by run.py and the GPU capture script."""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from examples.glm5_kv_cast.model import DecodeModel


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_decode_steps(
    model: DecodeModel, token_hidden: torch.Tensor, steps: int, first_step: int = 0
) -> list[float]:
    """Wall time of each decode step in ms, synchronised with the device before and after."""
    device = token_hidden.device
    times_ms = []
    for step in range(first_step, first_step + steps):
        synchronize(device)
        start = time.perf_counter()
        model.decode_step(token_hidden, step)
        synchronize(device)
        times_ms.append((time.perf_counter() - start) * 1e3)
    return times_ms


def activities_for(device: torch.device) -> list[ProfilerActivity]:
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])


def profile_decode_steps(
    model: DecodeModel,
    token_hidden: torch.Tensor,
    active_steps: int,
    out_path: str | os.PathLike,
    with_stack: bool,
    first_step: int = 0,
) -> list[float]:
    """Profile 1 profiler-warmup step + `active_steps` recorded steps; writes the Chrome trace.

    Returns the wall time (ms) of the recorded steps, measured under the profiler.
    """
    device = token_hidden.device
    times_ms = []
    with profile(
        activities=activities_for(device),
        record_shapes=True,
        with_stack=with_stack,
        schedule=schedule(wait=0, warmup=1, active=active_steps, repeat=1),
    ) as prof:
        for i in range(1 + active_steps):
            synchronize(device)
            start = time.perf_counter()
            model.decode_step(token_hidden, first_step + i)
            synchronize(device)
            if i > 0:
                times_ms.append((time.perf_counter() - start) * 1e3)
            prof.step()
    export_chrome_trace(prof, out_path)
    return times_ms


def export_chrome_trace(prof: profile, out_path: str | os.PathLike) -> Path:
    """Exports the trace; gzips it when the name ends in .gz (via a temporary .json)."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if out_path.suffix != ".gz":
        prof.export_chrome_trace(str(out_path))
        return out_path
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(out_path, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    return out_path
