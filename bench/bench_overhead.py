"""Step time of a real model loop under the plain profiler, under kerneltrace's ranges, under with_stack.

    python bench/bench_overhead.py [--preset cpu-small] [--device cpu|cuda] [--steps 8] [--reps 5]

The model is the GLM-5-shaped decode loop of `examples/glm5_kv_cast` (MLA attention over an FP8 KV
pool, MoE). Modes, interleaved within each repetition (so machine load hits them alike):

- ``no profiler``      the loop alone;
- ``ranges, no prof``  kerneltrace's ranges installed, no profiler (the disabled path);
- ``plain profiler``   torch.profiler (CPU [+CUDA], record_shapes) with no ranges: the baseline;
- ``kerneltrace``      the same profiler plus site ranges at every scanned site of the model file and
                       function ranges on each layer, attention backend and MoE forward;
- ``with_stack``       the plain profiler with ``with_stack=True``.

Each repetition times `--steps` decode steps per mode (after 3 untimed warmup steps) and keeps the
median step. Prints the median ms/step over repetitions and the paired ratio to the plain profiler:
the median over repetitions of (mode / plain profiler in the same repetition).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from examples.glm5_kv_cast import model as glm5  # noqa: E402
from tracer.instrument import FunctionRanges, SiteInstrumentation, SitePlan  # noqa: E402
from tracer.static import scan  # noqa: E402

FUNCTIONS = (
    "examples.glm5_kv_cast.model.DecoderLayer.forward",
    "examples.glm5_kv_cast.model.AttentionBackend.forward_decode",
    "examples.glm5_kv_cast.model.MoE.forward",
    "examples.glm5_kv_cast.model.DecodeModel.decode_step",
)
MODES = ("no profiler", "ranges, no prof", "plain profiler", "kerneltrace", "with_stack")


class Ranges:
    """kerneltrace's site and function ranges on the example model, installed for one measurement."""

    def __init__(self) -> None:
        self.sites = scan([REPO / "examples" / "glm5_kv_cast" / "model.py"]).sites
        self.instrumentation: SiteInstrumentation | None = None
        self.functions: FunctionRanges | None = None

    def __enter__(self) -> Ranges:
        self.instrumentation = SiteInstrumentation(SitePlan(self.sites)).install()
        self.functions = FunctionRanges(FUNCTIONS).install()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.functions is not None and self.instrumentation is not None
        self.functions.uninstall()
        self.instrumentation.uninstall()

    @property
    def placed(self) -> int:
        return len(self.instrumentation.report.placed) if self.instrumentation else 0


def profiler(with_stack: bool, device: str):
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=activities, record_shapes=True, with_stack=with_stack)


class NoContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


WARMUP_STEPS = 3  # untimed: the first steps after a profiler starts are slower (allocator, CUPTI)


def timed_steps(model: glm5.DecodeModel, x: torch.Tensor, steps: int, sync: Callable[[], None]) -> float:
    """Median seconds per decode step over `steps` steps, after `WARMUP_STEPS` untimed ones."""
    for step in range(WARMUP_STEPS):
        model.decode_step(x, step)
    sync()
    times = []
    for step in range(WARMUP_STEPS, WARMUP_STEPS + steps):
        started = time.perf_counter()
        model.decode_step(x, step)
        sync()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(mode: str, model, x, steps: int, ranges: Ranges, device: str, sync) -> tuple[float, int]:
    """(median step seconds, kerneltrace ranges recorded per step) for one mode."""
    with_ranges = mode in ("ranges, no prof", "kerneltrace")
    profiling = mode in ("plain profiler", "kerneltrace", "with_stack")
    with ranges if with_ranges else NoContext():
        with profiler(mode == "with_stack", device) if profiling else NoContext() as prof:
            seconds = timed_steps(model, x, steps, sync)
    if mode != "kerneltrace":
        return seconds, 0
    recorded = sum(1 for event in prof.events() if event.name.startswith("kt:"))
    return seconds, recorded // (WARMUP_STEPS + steps)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(glm5.PRESETS), default="cpu-small")
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--device", choices=("cpu", "cuda"), default=default_device)
    parser.add_argument("--steps", type=int, default=20, help="timed decode steps per mode per repetition")
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 = least noise)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = glm5.DecodeModel(glm5.PRESETS[args.preset], device=args.device)
    x = model.example_input()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    ranges = Ranges()
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    order = list(MODES)
    rng = random.Random(0)
    ranges_per_step = 0
    for rep in range(args.reps):
        rng.shuffle(order)
        for mode in order:
            seconds, recorded = measure(mode, model, x, args.steps, ranges, args.device, sync)
            results[mode].append(seconds)
            ranges_per_step = max(ranges_per_step, recorded)
        print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)
    median = {mode: statistics.median(values) for mode, values in results.items()}
    # Paired: each repetition's ratio to its own plain-profiler measurement, then the median. Load that
    # drifts over seconds hits both sides of a pair alike, so these are steadier than ratios of medians.
    paired = {
        mode: statistics.median(m / p for m, p in zip(results[mode], results["plain profiler"], strict=True))
        for mode in MODES
    }
    unprofiled = statistics.median(
        r / n for r, n in zip(results["ranges, no prof"], results["no profiler"], strict=True)
    )
    print(
        f"{args.preset} on {args.device} ({torch.__version__}, {args.threads} thread(s)): "
        f"{args.reps} reps x {args.steps} steps; {len(ranges.sites)} sites scanned, "
        f"{ranges.placed} site ranges + {len(FUNCTIONS)} function ranges installed, "
        f"{ranges_per_step} ranges recorded per step"
    )
    print(f"{'mode':<18} {'ms/step':>9} {'paired ratio':>13} {'spread (min-max ms)':>22}")
    for mode in MODES:
        values = results[mode]
        print(
            f"{mode:<18} {median[mode] * 1e3:9.3f} {paired[mode]:12.3f}x "
            f"{min(values) * 1e3:10.3f}-{max(values) * 1e3:.3f}"
        )
    overhead = paired["kerneltrace"] - 1
    verdict = "within" if overhead <= 0.03 else "OVER"
    print(
        f"kerneltrace ranges add {overhead * 100:+.1f}% to the profiled step ({verdict} the 3% target); "
        f"with_stack adds {(paired['with_stack'] - 1) * 100:+.1f}%; "
        f"unprofiled, the installed ranges cost {(unprofiled - 1) * 100:+.1f}%"
    )


if __name__ == "__main__":
    main()
