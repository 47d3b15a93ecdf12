"""Benchmark: how `kerneltrace explain` of the 535 MB bench trace scales with cores, against the old code.

For 1, 2, 4, 8 and 16 cores (those this machine has), runs `python -m tracer explain TRACE --json`
(with `--source` when transformers' source is set up, as bench_explain.py does) in a child process
pinned to that many cores (sched_setaffinity) with KERNELTRACE_LOAD_WORKERS set to match, once with
this tree and once with the baseline (`git archive REF` of this repository, default main: the code
before the change), each run measured in the same session, the repeats of the two interleaved.
Prints MB/s end to end (the child's wall time, interpreter start included), the speedup against 1
core and against the baseline at the same cores, and peak memory / trace size: the summed PSS of the
child and its workers (shared pages counted once), sampled every 20 ms. Every run's JSON output must
be the same bytes. Every child compiles its modules as an installed package is compiled: into a
bytecode cache of the bench's own (PYTHONPYCACHEPREFIX), filled by one unmeasured run per tree before
the measured ones, so neither tree nor the modules it imports is compiled in a measured run (on a host
whose site-packages hold no .pyc files, e.g. the device's numpy, and with PYTHONDONTWRITEBYTECODE set,
every run compiled numpy anew: ~0.25 s of the 2.2 s run on 16 cores).

    python bench/bench_scaling.py [--keep DIR] [--cores 1,2,4,8,16] [--repeat 1]
        [--baseline-ref main | --baseline-tree DIR | --no-baseline] [--size-mb 520]

The trace is built by bench_explain.py's replicator (from the llama H200 fixture) when absent.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_explain import SOURCE, SOURCE_ROOT, build_large_trace

CORES = (1, 2, 4, 8, 16)
PACKAGE = ("tracer", "rules")  # what a tree of the code holds: the package and its rule files


def baseline_tree(ref: str, into: Path) -> Path:
    """The package as of `ref`, from `git archive` (no worktree, nothing in the repository changes)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", ref, *PACKAGE],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def working_tree(into: Path) -> Path:
    """This tree's package as it is now (uncommitted changes too), copied to `into`."""
    for part in PACKAGE:
        shutil.copytree(REPO / part, into / part, ignore=shutil.ignore_patterns("__pycache__"))
    return into


# ---------------------------------------------------------------------------------------------------
# Memory: the summed PSS of a process tree


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(child) for child in handle.read().split())
    except OSError:
        pass
    return found


def _pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _own_cpu_s(pid: int) -> float:
    """utime + stime of `pid` alone (fields 14 and 15 of /proc/PID/stat, after the command name)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def tree_pss(root: int) -> int:
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += _pss_bytes(pid)
        stack.extend(_children(pid))
    return total


class PeakMemory:
    """Samples the summed PSS of a process and its descendants until stopped; keeps the peak."""

    def __init__(self, pid: int, every_s: float = 0.02) -> None:
        self.peak = 0
        self.own_cpu_s = 0.0  # the process's own CPU seconds (not its workers'), at the last sample
        self._pid, self._every = pid, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_pss(self._pid))
            self.own_cpu_s = max(self.own_cpu_s, _own_cpu_s(self._pid))
            self._stop.wait(self._every)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


# ---------------------------------------------------------------------------------------------------


def run_explain(tree: Path, trace: Path, cores: int, out: Path) -> dict:
    """`explain TRACE --json` with `tree`'s code on `cores` cores: wall seconds, peak PSS, output digest.
    Every run starts in the folder of `out` (the same for both trees) and keeps its bytecode in
    `out`'s folder's `pycache` (see the module's docstring)."""
    cpus = sorted(os.sched_getaffinity(0))[:cores]
    # The tree first, then whatever the environment already puts on the path (a --target install).
    path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(
        os.environ,
        PYTHONPATH=path,
        KERNELTRACE_LOAD_WORKERS=str(cores),
        PYTHONPYCACHEPREFIX=str(out.parent / "pycache"),
    )
    for name in ("KERNELTRACE_MEMORY_LIMIT", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    command = [sys.executable, "-m", "tracer", "explain", str(trace), "--json"]
    if SOURCE_ROOT.is_dir():
        command += ["--source", str(SOURCE_ROOT)]
    with out.open("wb") as sink, tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        proc = subprocess.Popen(
            command,
            stdout=sink,
            stderr=errors,
            env=env,
            cwd=out.parent,
            preexec_fn=lambda: os.sched_setaffinity(0, cpus),
        )
        memory = PeakMemory(proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)  # usage: the child and the workers it waited for
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        peak = memory.stop()
        errors.seek(0)
        stderr = errors.read()
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {stderr.decode(errors='replace').strip()[-300:]}"}
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "parent_cpu_s": memory.own_cpu_s,
        "peak_bytes": peak,
        "digest": digest,
    }


def best_of(runs: list[dict]) -> dict:
    """The fastest of one tree's runs at one core count, with the largest peak of them all."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return runs[0]
    best = min(good, key=lambda r: r["wall_s"])
    best["peak_bytes"] = max(r["peak_bytes"] for r in good)
    best["cpu_s"] = min(r["cpu_s"] for r in good)
    best["parent_cpu_s"] = min(r["parent_cpu_s"] for r in good)
    best["digests"] = {r["digest"] for r in good}
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=520.0, help="uncompressed size of the big trace")
    parser.add_argument("--keep", type=Path, help="build (or reuse) the big trace in this directory")
    parser.add_argument("--trace", type=Path, help="explain this trace instead of the built one")
    parser.add_argument("--cores", default=",".join(map(str, CORES)), help="core counts to run")
    parser.add_argument("--repeat", type=int, default=1, help="runs per point (the fastest counts)")
    parser.add_argument("--baseline-ref", default="main", help="git ref of the old code (default: main)")
    parser.add_argument("--baseline-tree", type=Path, help="a directory holding the old tracer/ instead")
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()

    available = len(os.sched_getaffinity(0))
    counts = [c for c in (int(x) for x in args.cores.split(",")) if c <= available]
    with tempfile.TemporaryDirectory(prefix="kt-scaling-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        trace = (args.trace or folder / "big_trace.json").resolve()
        if args.trace is None and (not trace.exists() or trace.stat().st_size < args.size_mb * 1e6):
            t0 = time.perf_counter()
            built = build_large_trace(SOURCE, trace, args.size_mb)
            print(
                f"built {trace.name}: {built['bytes'] / 1e6:.0f} MB, {built['events']:,} events "
                f"in {time.perf_counter() - t0:.0f} s"
            )
        # This tree runs from a copy as the baseline does, so both start alike: with the repository on
        # PYTHONPATH, code before eebd882 named the --source files under build/src from the
        # repository's root, and every site id (a hash of the name) differed from the baseline's.
        trees = {"new": working_tree(Path(tmp) / "new")}
        if not args.no_baseline:
            trees["old"] = (
                args.baseline_tree.resolve()
                if args.baseline_tree
                else baseline_tree(args.baseline_ref, Path(tmp) / "baseline")
            )
        for name, tree in trees.items():
            # As installed (pip compiles a package): the unmeasured run fills the bytecode cache.
            warm = run_explain(tree, trace, max(counts, default=1), Path(tmp) / f"{name}-warm.json")
            if "error" in warm:
                raise SystemExit(f"{name} code failed: {warm['error']}")
        size_mb = trace.stat().st_size / 1e6
        print(
            f"trace {trace} ({size_mb:.0f} MB); {available} cores available, "
            f"load average {os.getloadavg()[0]:.1f}; --source {'set' if SOURCE_ROOT.is_dir() else 'absent'}"
        )
        results: dict[tuple[str, int], dict] = {}
        for cores in counts:
            # Repeats interleaved (new, old, new, old, ...): a drift of the host's speed during the
            # runs of one core count touches both trees alike.
            runs: dict[str, list[dict]] = {name: [] for name in trees}
            for _ in range(args.repeat):
                for name, tree in trees.items():
                    runs[name].append(run_explain(tree, trace, cores, Path(tmp) / f"{name}{cores}.json"))
            for name in trees:
                results[name, cores] = row = best_of(runs[name])
                shown = "error" if "error" in row else f"{row['wall_s']:.2f} s"
                print(f"  ran {name} code on {cores} cores: {shown}", flush=True)
        report(results, counts, size_mb, "old" in trees)


def report(results: dict, counts: list[int], size_mb: float, with_baseline: bool) -> None:
    columns = ["cores", "s", "MB/s", "vs 1 core", "peak/trace", "cpu s", "serial s"]
    if with_baseline:
        columns += ["old s", "old MB/s", "new/old", "old peak", "old cpu", "old serial"]
    print("\n" + " ".join(f"{c:>10}" for c in columns))
    one = results.get(("new", counts[0]), {}) if counts else {}
    digests: set[str] = set()
    failed = False  # a run that failed compared nothing
    for cores in counts:
        new, old = results["new", cores], results.get(("old", cores), {})
        if "error" in new:
            failed = True
            print(f"{cores:>10} new code failed: {new['error']}")
            continue
        digests |= new["digests"]
        cells = [str(cores), *_cells(new, size_mb)]
        cells.insert(3, f"{one['wall_s'] / new['wall_s']:.2f}x" if "wall_s" in one else "")
        if with_baseline and "wall_s" in old:
            digests |= old["digests"]
            old_cells = _cells(old, size_mb)
            cells += [*old_cells[:2], f"{old['wall_s'] / new['wall_s']:.2f}x", *old_cells[2:]]
        elif with_baseline:
            failed = True
            cells.append(f"old code failed: {old.get('error', '?')}")
        print(" ".join(f"{c:>10}" for c in cells))
    same = "yes" if len(digests) == 1 else f"NO ({len(digests)} different outputs)"
    which = "the runs that ran; some failed" if failed else "new and old, every core count"
    print(f"\nexplain --json output identical in every run ({which}): {same}")
    print(
        "s, MB/s: wall seconds of the whole `python -m tracer explain` process (interpreter start "
        "included) and trace MB per second; peak: summed PSS of it and its workers / trace size; "
        "cpu s: their user + system CPU seconds; serial s: the main process's own CPU seconds (the part "
        "more cores do not shorten)"
    )
    print(f"load average now {os.getloadavg()[0]:.1f} (above ~0.5: other work shared the cores)")


def _cells(run: dict, size_mb: float) -> list[str]:
    return [
        f"{run['wall_s']:.2f}",
        f"{size_mb / run['wall_s']:.1f}",
        f"{run['peak_bytes'] / 1e6 / size_mb:.2f}",
        f"{run['cpu_s']:.1f}",
        f"{run['parent_cpu_s']:.1f}",
    ]


if __name__ == "__main__":
    main()
