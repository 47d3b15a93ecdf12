"""Fuzz the loader, join, explain and every renderer with mutated REAL traces (a seeded mutation loop).

Seeds are real traces: CPU traces profiled here with torch.profiler, and time slices (a few hundred
events each) of the H200 traces in ../shared/fixtures/gpu-traces and tests/fixtures/{gpu,cpu}. Each
case applies 0-3 document mutations (wrong types in every field, missing args, colliding ids, events
out of order, kernels without launches, huge and hostile names, deep nesting, ...) and one writer
(plain, gzip, truncated, corrupt gzip, flipped bytes, one-line JSON, odd layouts): see
tests/hardening/trace_fuzz.py. A worker process runs the whole pipeline on the file (explain_trace,
build_graph, DOT source, HTML, markdown, the rich table, JSON) under a memory limit, and the parent
kills it when one case takes longer than --case-timeout. Every case must end in a result or a one-line
`InputError` naming the file; anything else is counted (and its file kept) as a failure.

    nohup python bench/fuzz_traces.py --cases 10000 --results bench/FUZZ_RESULTS.md > fuzz.log 2>&1 &

Besides single trace files ("trace"), `--classes` draws the classes of issue #17 from
tests/hardening/robust_cases.py: decompression bombs (several shapes, 1-8 GiB, through explain,
--capture, annotate and --window), directories of ranks with bad ones, damaged scan caches, bad side
inputs (--config, --sites, rule files: FIFOs, /dev/zero, deep, huge numbers, wrong types), odd file
names (bytes that are not UTF-8, escapes, U+FFFF) and pathological shapes (a stream or thread per
event, a name per event, ranges nested thousands deep). Each bomb's time and peak memory are kept.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "hardening"))

import contextlib

import robust_cases
import trace_fuzz

ALL_CLASSES = ("trace", *robust_cases.CLASSES)


def _worker(connection, memory_limit: int) -> None:
    """Run cases sent as paths until the pipe closes; answer (kind, detail, peak RSS in KiB)."""
    os.setpgrp()  # its own process group: stopping it stops the loader's worker processes too
    if memory_limit:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    import tracer.api  # noqa: F401  (import once, not per case)

    while True:
        try:
            kind, case = connection.recv()
        except EOFError:
            return
        try:
            if kind == "trace":
                path, options = case
                outcome = trace_fuzz.run_pipeline(Path(path), options)
            else:
                outcome = robust_cases.run_case(case)
        except MemoryError:
            outcome = trace_fuzz.Outcome("failure", "MemoryError: over the worker's memory limit")
        connection.send((outcome.kind, outcome.detail, _peak_rss_kib()))


def _peak_rss_kib() -> int:
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a spawned worker would report its
    # parent's peak (torch and the seed traces) instead of its own.
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class Worker:
    """One pipeline process; replaced after a hang (killed) or a crash."""

    def __init__(self, memory_limit: int) -> None:
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no torch mapped in
        self.connection, child = context.Pipe()
        # Not daemonic: a daemonic process may not start the loader's own worker processes.
        self.process = context.Process(target=_worker, args=(child, memory_limit), daemon=False)
        self.process.start()
        child.close()

    def run(self, kind: str, case: object, timeout: float) -> tuple[str, str, int] | None:
        """(kind, detail, peak KiB), or None when the case ran past `timeout` or killed the worker."""
        self.connection.send((kind, case))
        if not self.connection.poll(timeout):
            return None
        try:
            return self.connection.recv()
        except EOFError:
            return ("failure", f"worker died (exit code {self.process.exitcode})", 0)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.join()
        self.connection.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=20251129)
    parser.add_argument("--case-timeout", type=float, default=30.0, help="seconds before a case is a hang")
    parser.add_argument(
        "--memory-limit-mb", type=int, default=2048, help="address-space limit of the pipeline process"
    )
    parser.add_argument("--keep-failures", type=Path, default=REPO / "build" / "fuzz-failures")
    parser.add_argument("--results", type=Path, help="write the outcome table (markdown) here")
    parser.add_argument("--progress-every", type=int, default=500)
    parser.add_argument(
        "--recycle-every",
        type=int,
        default=100,
        help="start a fresh pipeline process after this many cases, as each command is one process "
        "(a long-lived one's heap fragments: its address space, which the memory budget counts, only grows)",
    )
    parser.add_argument(
        "--classes",
        default=",".join(ALL_CLASSES),
        help=f"comma-separated classes to draw from, in equal shares (of {', '.join(ALL_CLASSES)})",
    )
    args = parser.parse_args()
    classes = [c.strip() for c in args.classes.split(",") if c.strip()]
    unknown = set(classes) - set(ALL_CLASSES)
    if unknown:
        parser.error(f"unknown classes {sorted(unknown)}")

    rng = random.Random(args.seed)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="kerneltrace-fuzz-"))
    seeds = trace_fuzz.load_seeds(work, rng)
    print(
        f"{len(seeds)} seeds ({', '.join(name for name, _ in seeds)}) in {time.perf_counter() - started:.1f} s"
    )

    outcomes: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    failures: collections.Counter[str] = collections.Counter()
    writers: collections.Counter[tuple[str, str]] = collections.Counter()
    mutations: collections.Counter[str] = collections.Counter()
    by_class: collections.Counter[tuple[str, str]] = collections.Counter()
    variants: collections.Counter[tuple[str, str, str]] = collections.Counter()
    slowest_by_class: dict[str, float] = collections.defaultdict(float)
    bombs: list[tuple[float, int, str]] = []
    slowest = (0.0, "")
    peak_kib = 0
    kept = 0
    worker = Worker(args.memory_limit_mb << 20)
    loop_start = time.perf_counter()
    try:
        for number in range(args.cases):
            if number and args.recycle_every and number % args.recycle_every == 0:
                worker.stop()
                worker = Worker(args.memory_limit_mb << 20)
            kind_of_case = classes[number % len(classes)]
            if kind_of_case == "trace":
                case, path = trace_fuzz.make_case(seeds, rng, work, number)
                mutations.update(case.mutations or ("(none)",))
                message: object = (str(path), case.options)
                variant = case.writer
            else:
                case = robust_cases.make_case(kind_of_case, seeds, rng, work, number)
                path, message, variant = case.path, case, case.variant
            begun = time.perf_counter()
            answer = worker.run(kind_of_case, message, args.case_timeout)
            took = time.perf_counter() - begun
            if answer is None:
                kind, detail = "hang", f"no answer within {args.case_timeout:.0f} s"
                worker.stop()
                worker = Worker(args.memory_limit_mb << 20)
            else:
                kind, detail, case_peak = answer
                if case_peak > peak_kib + (64 << 10):
                    print(f"case {number} {case.label}: peak RSS now {case_peak >> 10} MB", flush=True)
                peak_kib = max(peak_kib, case_peak)
            if took > slowest[0]:
                slowest = (took, case.label)
            slowest_by_class[kind_of_case] = max(slowest_by_class[kind_of_case], took)
            outcomes[kind] += 1
            by_class[(kind_of_case, kind)] += 1
            variants[(kind_of_case, variant.split("-")[0], kind)] += 1
            if kind_of_case == "trace":
                writers[(case.writer, kind)] += 1
            if kind_of_case == "bomb" and "[bomb " in detail:
                seconds, peak = detail.split("[bomb ")[1].rstrip("]").split(" s ")
                bombs.append((float(seconds), int(peak.split()[0]), case.variant))
                detail = detail.split(" [bomb ")[0]
            if kind == "input_error":
                errors[detail] += 1
            elif kind != "result":
                headline = detail.strip().splitlines()[-1][:160] if detail.strip() else kind
                failures[f"{kind}: {headline}"] += 1
                if kept < 200:
                    args.keep_failures.mkdir(parents=True, exist_ok=True)
                    target = args.keep_failures / f"{number}-{kind_of_case}"
                    if path.is_dir():
                        shutil.copytree(path, target, symlinks=True, ignore_dangling_symlinks=True)
                    elif path.is_file():
                        shutil.copy(path, target)
                    Path(f"{target}.txt").write_text(f"{case.label}\n\n{detail}\n")
                    kept += 1
                print(f"case {number} {case.label}: {kind}\n{detail}", flush=True)
            _remove(work, number)
            if (number + 1) % args.progress_every == 0:
                rate = (number + 1) / (time.perf_counter() - loop_start)
                print(f"{number + 1} cases, {rate:.1f}/s: {dict(outcomes)}", flush=True)
    finally:
        worker.stop()
        shutil.rmtree(work, ignore_errors=True)

    wall = time.perf_counter() - started
    report = results_markdown(
        args, len(seeds), outcomes, errors, failures, writers, mutations, slowest, peak_kib, wall
    )
    report += class_markdown(classes, by_class, variants, slowest_by_class, bombs)
    print(report)
    if args.results:
        args.results.write_text(report)
    return 0 if not failures and not outcomes["hang"] else 1


def _remove(work: Path, number: int) -> None:
    """Everything case `number` wrote (a file, a directory, a FIFO, odd names)."""
    for entry in work.iterdir():
        name = os.fsencode(entry.name)
        if name == f"case{number}".encode() or name.startswith(
            (f"case{number}.".encode(), f"case{number}-".encode())
        ):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def class_markdown(classes, by_class, variants, slowest_by_class, bombs) -> str:
    lines = [
        "",
        "## By class (issue #17)",
        "",
        "| class | cases | result | one-line error | failure | hang | slowest case (s) |",
        "| --- | --: | --: | --: | --: | --: | --: |",
    ]
    for name in classes:
        counts = [by_class[(name, k)] for k in ("result", "input_error", "failure", "hang")]
        lines.append(
            f"| {name} | {sum(counts)} | "
            + " | ".join(map(str, counts))
            + f" | {slowest_by_class[name]:.2f} |"
        )
    if bombs:
        worst_time = max(bombs)
        worst_peak = max(bombs, key=lambda b: b[1])
        lines += [
            "",
            (
                f"Bombs: {len(bombs)} refused; slowest refusal {worst_time[0]:.2f} s ({worst_time[2]}), highest "
                f"peak resident memory of the pipeline process during a refusal {worst_peak[1]} MB ({worst_peak[2]})."
            ),
        ]
    lines += [
        "",
        "## Variants within each class",
        "",
        "| class | variant | result | one-line error | failure | hang |",
    ]
    lines.append("| --- | --- | --: | --: | --: | --: |")
    seen = sorted({(c, v) for c, v, _ in variants if c != "trace"})
    for c, v in seen:
        counts = [variants[(c, v, k)] for k in ("result", "input_error", "failure", "hang")]
        lines.append(f"| {c} | {v} | " + " | ".join(map(str, counts)) + " |")
    return "\n".join(lines) + "\n"


def results_markdown(
    args, seed_count, outcomes, errors, failures, writers, mutations, slowest, peak_kib, wall
) -> str:
    total = sum(outcomes.values())
    lines = [
        "# Fuzzing the trace pipeline: results",
        "",
        (
            f"`python bench/fuzz_traces.py --cases {args.cases} --seed {args.seed} --classes {args.classes}` "
            f"(seeded mutation loop over "
            f"{seed_count} real seed traces; each case runs explain_trace, build_graph, DOT source, HTML "
            "report, markdown, the rich table and JSON in a worker process limited to "
            f"{args.memory_limit_mb} MB of address space, killed after {args.case_timeout:.0f} s)."
        ),
        "",
        "| outcome | cases |",
        "| --- | --: |",
        f"| generated cases | {total} |",
        f"| result (analysis + every rendering) | {outcomes['result']} |",
        f"| one-line `InputError` naming the file | {outcomes['input_error']} |",
        f"| tracebacks / other failures | {outcomes['failure']} |",
        f"| hangs (over {args.case_timeout:.0f} s) | {outcomes['hang']} |",
        "",
        (
            f"Wall time {wall / 60:.1f} min on this machine; slowest case {slowest[0]:.2f} s; peak RSS of "
            f"the pipeline process {peak_kib / 1024:.0f} MB."
        ),
        "",
        "## One-line errors by kind",
        "",
        "| problem | cases |",
        "| --- | --: |",
        *(f"| {kind} | {count} |" for kind, count in errors.most_common()),
        "",
        "## Cases by writer",
        "",
        "| writer | result | input error | failure | hang |",
        "| --- | --: | --: | --: | --: |",
    ]
    for writer in trace_fuzz.WRITERS:
        row = [writers[(writer, k)] for k in ("result", "input_error", "failure", "hang")]
        lines.append(f"| {writer} | " + " | ".join(map(str, row)) + " |")
    lines += ["", "## Document mutations applied", "", "| mutation | cases |", "| --- | --: |"]
    lines += [f"| {name} | {count} |" for name, count in sorted(mutations.items())]
    if failures:
        lines += ["", "## Failures", "", *(f"- {count} x {text}" for text, count in failures.most_common())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
