"""What one named range costs the host, next to what one kernel launch costs, under each profiler.

    python bench/bench_range_cost.py [--device cpu|cuda] [--n 20000]

Times `--n` enter/exit pairs of each range primitive (and `--n` launches of a tiny op) with no
profiler, under the CPU profiler, and under the CPU+CUDA profiler (record_shapes, as kerneltrace
profiles), and prints microseconds per range. The ratio range/launch says how much a range adds to a
host-bound step per launch it sits beside.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracer.instrument.runtime import ProfiledRange, _bind, named_range

NAME = "kt:site:0123456789@sglang/srt/layers/attention/flashattention_backend.py:2350"


def per_call_us(body, n: int, repeats: int = 5) -> float:
    """Median over `repeats` of the microseconds per call of `body` (n calls per repeat)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(n):
            body()
        times.append((time.perf_counter() - started) / n * 1e6)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument("--n", type=int, default=20000)
    args = parser.parse_args(argv)
    x = torch.zeros(16, device=args.device)
    _bind()
    fast = torch._C._profiler._RecordFunctionFast

    def empty() -> None:
        pass

    def torch_record_function() -> None:
        with torch.profiler.record_function(NAME):
            pass

    def kerneltrace_range() -> None:
        with named_range(NAME):
            pass

    def record_function_fast() -> None:
        with fast(NAME):
            pass

    def kerneltrace_classic_range() -> None:
        with ProfiledRange(NAME):
            pass

    def launch() -> None:
        x.add_(1)

    bodies = {
        "torch.profiler.record_function": torch_record_function,
        "kerneltrace named_range": kerneltrace_range,
        "_RecordFunctionFast": record_function_fast,
        "kerneltrace ProfiledRange (fallback)": kerneltrace_classic_range,
        "one op launch (x.add_(1))": launch,
    }
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    activities = [[], [torch.profiler.ProfilerActivity.CPU]]
    if args.device == "cuda":
        activities.append([torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA])
    print(f"torch {torch.__version__} on {args.device}; us per call (median of 5 x {args.n})")
    header = ["primitive"] + ["no profiler", "CPU profiler", "CPU+CUDA profiler"][: len(activities)]
    print(" | ".join([f"{header[0]:>36}"] + [f"{h:>20}" for h in header[1:]]))
    rows = {name: [] for name in bodies}
    for kinds in activities:
        for name, body in bodies.items():
            if kinds:
                with torch.profiler.profile(activities=kinds, record_shapes=True):
                    rows[name].append(per_call_us(body, args.n) - per_call_us(empty, args.n))
                    sync()
            else:
                rows[name].append(per_call_us(body, args.n) - per_call_us(empty, args.n))
                sync()
    for name, values in rows.items():
        print(" | ".join([f"{name:>36}"] + [f"{v:20.2f}" for v in values]))


if __name__ == "__main__":
    main()
