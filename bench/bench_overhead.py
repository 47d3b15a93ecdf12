"""Step time of a real model loop under the plain profiler, under kerneltrace's ranges, under with_stack.

    python bench/bench_overhead.py [--preset cpu-small] [--device cpu|cuda] [--variant cast_whole]
                                   [--sessions 8] [--quads 1] [--block-steps 3] [--block-warmup 1]
                                   [--steps 8] [--reps 3]

The model is the GLM-5-shaped decode loop of `examples/glm5_kv_cast` (MLA attention over an FP8 KV
pool, MoE). Two measurements in one run:

1. **The target: kerneltrace's ranges against the plain profiler, paired step blocks.** Each cycle
   runs ONE profiler session (CPU [+CUDA], record_shapes) and times four blocks of `--block-steps`
   decode steps in the order A B B A (the next cycle B A A B), where A is the plain profiler and B
   the same session with kerneltrace's ranges installed: site ranges at every scanned site of the
   model file, function ranges on each layer, attention backend and MoE forward. Ranges are
   installed and removed between blocks, outside the timed steps, and each block starts with one
   untimed step. Adjacent blocks form a pair (A0/B1 and A3/B2), so load that drifts over seconds,
   and the profiler session itself, hit both sides of a pair alike. The overhead is the median over
   pairs of (B / A) - 1, with the interquartile range and a 95% interval of the mean log ratio.
2. **Context: every mode in blocks**, interleaved in shuffled order within each of `--reps`
   repetitions, each its own session (after 3 untimed steps): ``no profiler``, ``ranges, no prof``
   (the disabled path), ``plain profiler``, ``kerneltrace``, ``with_stack``; median ms/step and the
   median paired ratio to the plain profiler of the same repetition.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from examples.glm5_kv_cast import model as glm5
from tracer.instrument import FunctionRanges, SiteInstrumentation, SitePlan
from tracer.static import scan

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


def timed_steps(
    model: glm5.DecodeModel, x: torch.Tensor, steps: int, sync: Callable[[], None], warmup: int = WARMUP_STEPS
) -> float:
    """Median wall seconds per decode step over `steps` steps, after `warmup` untimed ones."""
    return timed_steps_both_clocks(model, x, steps, sync, warmup)[0]


def timed_steps_both_clocks(
    model: glm5.DecodeModel, x: torch.Tensor, steps: int, sync: Callable[[], None], warmup: int
) -> tuple[float, float]:
    """Median seconds per step: wall (launch + synchronise) and the host thread's CPU time to launch.

    The CPU time of the launching thread is what the ranges add to; unlike wall time it does not
    grow while other tenants of a shared host hold the core (only while ours runs).
    """
    for step in range(warmup):
        model.decode_step(x, step)
    sync()
    wall, cpu = [], []
    for step in range(warmup, warmup + steps):
        started, started_cpu = time.perf_counter(), time.thread_time()
        model.decode_step(x, step)
        cpu.append(time.thread_time() - started_cpu)
        sync()
        wall.append(time.perf_counter() - started)
    return statistics.median(wall), statistics.median(cpu)


def measure(mode: str, model, x, steps: int, ranges: Ranges, device: str, sync) -> tuple[float, int]:
    """(median step seconds, kerneltrace ranges recorded per step) for one mode in its own session."""
    with_ranges = mode in ("ranges, no prof", "kerneltrace")
    profiling = mode in ("plain profiler", "kerneltrace", "with_stack")
    with ranges if with_ranges else NoContext():
        with profiler(mode == "with_stack", device) if profiling else NoContext() as prof:
            seconds = timed_steps(model, x, steps, sync)
    if mode != "kerneltrace":
        return seconds, 0
    recorded = sum(1 for event in prof.events() if event.name.startswith("kt:"))
    return seconds, recorded // (WARMUP_STEPS + steps)


def paired_blocks(
    model, x, ranges: Ranges, device: str, sync, args: argparse.Namespace
) -> tuple[list[float], list[float]]:
    """Ratios (ranges / plain) of adjacent step blocks, by wall time and by the launching thread's
    CPU time: `args.quads` A B B A quads per profiler session, `args.sessions` sessions, alternately
    starting with A and with B."""
    ratios, cpu_ratios = [], []
    for session in range(args.sessions):
        seconds: list[float] = []
        cpu_seconds: list[float] = []
        order: list[bool] = []
        with profiler(False, device):
            for step in range(WARMUP_STEPS):  # the session's slow first steps, untimed
                model.decode_step(x, step)
            for quad in range(args.quads):
                ranged_first = (session + quad) % 2 == 1
                for with_ranges in (ranged_first, not ranged_first, not ranged_first, ranged_first):
                    with ranges if with_ranges else NoContext():
                        gc.collect()  # installing ranges makes garbage: collect it outside the timing
                        wall, cpu = timed_steps_both_clocks(
                            model, x, args.block_steps, sync, args.block_warmup
                        )
                    seconds.append(wall)
                    cpu_seconds.append(cpu)
                    order.append(with_ranges)
        # Blocks 0/1 and 2/3 of each quad are adjacent: pair them so drift cancels.
        for first in range(0, len(seconds), 2):
            ranged, plain = (first, first + 1) if order[first] else (first + 1, first)
            ratios.append(seconds[ranged] / seconds[plain])
            cpu_ratios.append(cpu_seconds[ranged] / cpu_seconds[plain])
        shown = " ".join(f"{r:.3f}" for r in ratios[-2 * args.quads :])
        shown_cpu = " ".join(f"{r:.3f}" for r in cpu_ratios[-2 * args.quads :])
        print(f"session {session + 1}/{args.sessions}: wall {shown}; cpu {shown_cpu}", file=sys.stderr)
    return ratios, cpu_ratios


def summarise_ratios(ratios: list[float]) -> dict[str, float]:
    """Median (with a bootstrap 95% interval), quartiles, and the geometric mean with its 95% interval."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    half = 1.96 * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else float("nan")
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return {
        "median": statistics.median(ratios),
        "median_low": medians[50],
        "median_high": medians[1949],
        "q1": quartiles[0],
        "q3": quartiles[2],
        "geomean": math.exp(mean),
        "low": math.exp(mean - half),
        "high": math.exp(mean + half),
    }


def describe(summary: dict[str, float]) -> str:
    def pct(key: str) -> str:
        return f"{(summary[key] - 1) * 100:+.2f}%"

    verdict = "within" if summary["median"] - 1 <= 0.03 else "OVER"
    return (
        f"{pct('median')} (median, 95% interval {pct('median_low')} .. {pct('median_high')}; {verdict} the "
        f"3% target); quartiles {pct('q1')} .. {pct('q3')}; geometric mean {pct('geomean')} "
        f"(95% interval {pct('low')} .. {pct('high')})"
    )


SESSION_LINE = re.compile(r"^session \d+/\d+: (?:pair ratios|wall) ([\d. ]+?)(?:;|$)")


def pool(paths: list[Path]) -> None:
    """Pool the wall-time pair ratios that earlier runs printed (their `session ...` lines)."""
    ratios: list[float] = []
    for path in paths:
        found = [
            float(value)
            for line in path.read_text().splitlines()
            if (match := SESSION_LINE.match(line.strip()))
            for value in match.group(1).split()
        ]
        print(f"{path}: {len(found)} pairs, median {(statistics.median(found) - 1) * 100:+.2f}%")
        ratios.extend(found)
    print(f"pooled, {len(ratios)} pairs: kerneltrace ranges add {describe(summarise_ratios(ratios))}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(glm5.PRESETS), default="cpu-small")
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--device", choices=("cpu", "cuda"), default=default_device)
    parser.add_argument("--variant", choices=glm5.VARIANTS, default="cast_whole")
    parser.add_argument("--sessions", type=int, default=8, help="profiler sessions of paired blocks")
    parser.add_argument("--quads", type=int, default=1, help="A B B A block quads per session")
    parser.add_argument("--block-steps", type=int, default=3, help="timed decode steps per paired block")
    parser.add_argument("--block-warmup", type=int, default=1, help="untimed decode steps opening a block")
    parser.add_argument("--steps", type=int, default=8, help="timed decode steps per mode per repetition")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions of every mode (0: skip)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 = least noise)")
    parser.add_argument("--pool", nargs="+", type=Path, metavar="OUTPUT", help="pool earlier runs' outputs")
    args = parser.parse_args(argv)
    if args.pool:
        pool(args.pool)
        return
    torch.set_num_threads(args.threads)
    model = glm5.DecodeModel(glm5.PRESETS[args.preset], device=args.device, variant=args.variant)
    x = model.example_input()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    ranges = Ranges()

    _, ranges_per_step = measure("kerneltrace", model, x, 1, ranges, args.device, sync)
    print(
        f"{args.preset} ({args.variant}) on {args.device} ({torch.__version__}, {args.threads} thread(s)): "
        f"{len(ranges.sites)} sites scanned, {ranges.placed} site ranges + {len(FUNCTIONS)} function "
        f"ranges installed, {ranges_per_step} ranges recorded per step"
    )
    ratios, cpu_ratios = paired_blocks(model, x, ranges, args.device, sync, args)
    print(
        f"paired blocks ({args.sessions} sessions x {args.quads} x A B B A x {args.block_steps} step(s), "
        f"{len(ratios)} pairs): kerneltrace ranges add, to the profiled step's"
    )
    for clock, values in (("wall time", ratios), ("launching thread's CPU time", cpu_ratios)):
        print(f"  {clock}: {describe(summarise_ratios(values))}")
    if args.reps:
        modes_in_blocks(model, x, ranges, args, sync)


def modes_in_blocks(model, x, ranges: Ranges, args: argparse.Namespace, sync) -> None:
    """Every mode, each in its own session, interleaved in shuffled order per repetition."""
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    order = list(MODES)
    rng = random.Random(0)
    for rep in range(args.reps):
        rng.shuffle(order)
        for mode in order:
            seconds, _ = measure(mode, model, x, args.steps, ranges, args.device, sync)
            results[mode].append(seconds)
        print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)
    median = {mode: statistics.median(values) for mode, values in results.items()}
    # Each repetition's ratio to its own plain-profiler measurement, then the median.
    paired = {
        mode: statistics.median(m / p for m, p in zip(results[mode], results["plain profiler"], strict=True))
        for mode in MODES
    }
    unprofiled = statistics.median(
        r / n for r, n in zip(results["ranges, no prof"], results["no profiler"], strict=True)
    )
    print(f"every mode in its own session ({args.reps} reps x {args.steps} steps):")
    print(f"{'mode':<18} {'ms/step':>9} {'paired ratio':>13} {'spread (min-max ms)':>22}")
    for mode in MODES:
        values = results[mode]
        print(
            f"{mode:<18} {median[mode] * 1e3:9.3f} {paired[mode]:12.3f}x "
            f"{min(values) * 1e3:10.3f}-{max(values) * 1e3:.3f}"
        )
    print(
        f"with_stack adds {(paired['with_stack'] - 1) * 100:+.1f}% to the profiled step; unprofiled, the "
        f"installed ranges cost {(unprofiled - 1) * 100:+.1f}%"
    )


if __name__ == "__main__":
    main()
