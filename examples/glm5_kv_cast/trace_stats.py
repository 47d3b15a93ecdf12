"""Figures for the example's README, read straight from a torch.profiler Chrome trace (no kerneltrace).

    python -m examples.glm5_kv_cast.trace_stats TRACE.json.gz [--preset gpu-full]

GPU traces: kernels grouped by name, the top one's share of GPU time (kernels + memcpy + memset),
calls per profiled step, mean time per call, and with --preset the bytes and GB/s of the whole-pool
cast. CPU traces: cpu_ops by self time against the profiled steps' wall time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path

from examples.glm5_kv_cast.model import PRESETS, preset_summary

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
H200_PEAK_BYTES_PER_S = 4.8e12


def load_trace(path: str | Path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def profiled_steps(events: list[dict]) -> list[dict]:
    """The CPU-side ProfilerStep#N ranges (their GPU-side twins are category gpu_user_annotation)."""
    return [
        e
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") in ("user_annotation", "cpu_op")
        and str(e.get("name", "")).startswith("ProfilerStep#")
    ]


def kernel_summary(events: list[dict], steps: int, preset_name: str | None = None) -> dict:
    by_name: dict[str, list[float]] = defaultdict(list)
    gpu_total_us = 0.0
    for event in events:
        if event.get("cat") in GPU_CATEGORIES and event.get("ph") == "X":
            gpu_total_us += event["dur"]
            if event["cat"] == "kernel":
                by_name[event["name"]].append(event["dur"])
    ranked = sorted(by_name.items(), key=lambda item: -sum(item[1]))
    top_name, top_durs = ranked[0]
    summary = {
        "profiled_steps": steps,
        "gpu_time_us": round(gpu_total_us, 1),
        "kernel_names": len(by_name),
        "kernel_launches": sum(len(d) for d in by_name.values()),
        "top_kernel": top_name,
        "top_kernel_share": round(sum(top_durs) / gpu_total_us, 4),
        "top_kernel_calls": len(top_durs),
        "top_kernel_calls_per_step": len(top_durs) / steps if steps else None,
        "top_kernel_mean_us": round(sum(top_durs) / len(top_durs), 2),
        "top_kernels": [
            {"name": name[:160], "calls": len(durs), "total_us": round(sum(durs), 1)}
            for name, durs in ranked[:8]
        ],
    }
    if preset_name:
        bytes_per_call = preset_summary(PRESETS[preset_name])["whole_cast_bytes_per_call"]
        bytes_per_s = bytes_per_call / (summary["top_kernel_mean_us"] * 1e-6)
        summary["whole_cast_bytes_per_call"] = bytes_per_call
        summary["top_kernel_GB_per_s"] = round(bytes_per_s / 1e9, 1)
        summary["top_kernel_fraction_of_4_8_TB_per_s"] = round(bytes_per_s / H200_PEAK_BYTES_PER_S, 3)
    return summary


def cpu_op_self_times(events: list[dict]) -> dict[str, float]:
    """Self time (us) per cpu_op name: duration minus that of the ops nested directly inside."""
    per_thread: dict[tuple, list[dict]] = defaultdict(list)
    for event in events:
        if event.get("cat") == "cpu_op" and event.get("ph") == "X":
            per_thread[(event["pid"], event["tid"])].append(event)
    self_us: dict[str, float] = defaultdict(float)
    for ops in per_thread.values():
        ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for op in ops:
            while stack and op["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
                stack.pop()
            self_us[op["name"]] += op["dur"]
            if stack:
                self_us[stack[-1]["name"]] -= op["dur"]
            stack.append(op)
    return self_us


def cpu_summary(events: list[dict], steps: list[dict]) -> dict:
    step_us = sum(e["dur"] for e in steps)
    if not steps:  # no profiler schedule: measure against the span of all cpu_ops
        ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
        step_us = max(e["ts"] + e["dur"] for e in ops) - min(e["ts"] for e in ops)
    ranked = sorted(cpu_op_self_times(events).items(), key=lambda item: -item[1])[:8]
    return {
        "profiled_steps": len(steps),
        "step_wall_us": round(step_us, 1),
        "top_cpu_ops_by_self_time": [
            {"name": name, "self_us": round(us, 1), "share_of_steps": round(us / step_us, 4)}
            for name, us in ranked
        ],
    }


def summarize_trace(path: str | Path, preset_name: str | None = None) -> dict:
    events = load_trace(path)["traceEvents"]
    steps = profiled_steps(events)
    summary = {"trace": str(path), "step_wall_ms": [round(e["dur"] / 1e3, 3) for e in steps]}
    if any(e.get("cat") == "kernel" for e in events):
        summary.update(kernel_summary(events, len(steps), preset_name))
    else:
        summary.update(cpu_summary(events, steps))
    summary["python_function_events"] = sum(1 for e in events if e.get("cat") == "python_function")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--preset", choices=sorted(PRESETS))
    args = parser.parse_args(argv)
    print(json.dumps(summarize_trace(args.trace, args.preset), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
