"""Benchmark: kerneltrace load + join (+ explain) on a >= 500 MB real trace, against json.load and HTA.

The trace is a real H200 trace (../shared/fixtures/gpu-traces) replicated with shifted timestamps and
ids until it passes the target size, written in a temp dir. Each contender runs in its own child
process, which reports its wall time and peak RSS (ru_maxrss), so one cannot inflate another's.

    python bench/bench_explain.py [--size-mb 520] [--keep DIR] [--skip-hta]

Bench-only dependency: HolisticTraceAnalysis (`pip install HolisticTraceAnalysis`); without it the
HTA row says so.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "tests" / "fixtures" / "transformers" / "hf_llama_generate_stack.json.gz"
SOURCE_ROOT = REPO / "build" / "src" / "transformers-5.17.0"  # the code behind SOURCE (`make setup`)

# ---------------------------------------------------------------------------------------------------
# Building the big trace


def build_large_trace(source: Path, out: Path, target_mb: float) -> dict:
    """Write `source`'s events N times (shifted in time and ids) as one Kineto-style trace at `out`."""
    import orjson

    document = orjson.loads(gzip.decompress(source.read_bytes()))
    events = document.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + (e.get("dur") or 0) for e in timed) - start + 1000.0  # + 1 ms gap

    def max_arg(key: str) -> int:
        return max((e.get("args") or {}).get(key) or 0 for e in events)

    ext_span = max_arg("External id") + 1
    corr_span = max_arg("correlation") + 1
    py_span = max_arg("Python id") + 1
    flow_span = max((e.get("id") or 0 for e in events if e.get("ph") in ("s", "f")), default=0) + 1
    metadata = [e for e in events if e.get("ph") == "M"]
    copyable = [e for e in events if e.get("ph") != "M"]

    header = orjson.dumps(document, option=orjson.OPT_INDENT_2)[:-2]  # drop the closing "\n}"
    copies = 0
    with out.open("wb") as handle:
        handle.write(header + b',\n  "traceEvents": [\n')
        for event in metadata:
            handle.write(b"  " + orjson.dumps(event) + b",\n")
        while handle.tell() < target_mb * 1e6:
            dts = copies * span
            for event in copyable:
                shifted = dict(event)
                if "ts" in shifted:
                    shifted["ts"] = round(event["ts"] + dts, 3)
                if "id" in shifted and event.get("ph") in ("s", "f"):
                    shifted["id"] = event["id"] + copies * flow_span
                args = event.get("args")
                if args:
                    args = dict(args)
                    for key, offset in (
                        ("External id", ext_span),
                        ("correlation", corr_span),
                        ("Python id", py_span),
                        ("Python parent id", py_span),
                    ):
                        if isinstance(args.get(key), int) and args[key] > 0:
                            args[key] += copies * offset
                    shifted["args"] = args
                handle.write(b"  " + orjson.dumps(shifted) + b",\n")
            copies += 1
        handle.write(b'  {"ph": "i", "name": "end", "pid": 0, "tid": 0, "ts": 0, "s": "g"}\n  ]\n}\n')
    return {"copies": copies, "events": copies * len(copyable) + len(metadata), "bytes": out.stat().st_size}


# ---------------------------------------------------------------------------------------------------
# Contenders (each runs in a child process: `bench_explain.py --child NAME TRACE`)


def run_kerneltrace(path: Path) -> dict:
    """What `kerneltrace explain TRACE --source <transformers>` does: load, scan the named files, join."""
    from tracer.join import attribute, sites_for_trace
    from tracer.load import load_trace

    t0 = time.perf_counter()
    trace = load_trace(path)
    t1 = time.perf_counter()
    roots = [SOURCE_ROOT] if SOURCE_ROOT.is_dir() else []
    sites = sites_for_trace(trace, roots) if roots else []
    result = attribute(trace, sites, source_roots=roots)
    t2 = time.perf_counter()
    timings = {
        "load_s": t1 - t0,
        "join_s": t2 - t1,
        "rows": len(trace.events),
        "origins": len(result.origins),
    }
    try:
        from tracer.explain import analyse
    except ImportError:
        timings["explain_s"] = None
    else:
        analysis = analyse(result)
        timings["explain_s"] = time.perf_counter() - t2
        timings["findings"] = len(analysis.findings)
    timings["total_s"] = time.perf_counter() - t0
    return timings


def run_json_baseline(path: Path) -> dict:
    """The floor a careful script reaches: json.load, then one pass summing kernel time by name."""
    t0 = time.perf_counter()
    with path.open("rb") as handle:
        document = json.load(handle)
    t1 = time.perf_counter()
    by_name: dict[str, float] = {}
    for event in document["traceEvents"]:
        if event.get("ph") == "X" and event.get("cat") == "kernel":
            by_name[event["name"]] = by_name.get(event["name"], 0.0) + event.get("dur", 0.0)
    t2 = time.perf_counter()
    return {"load_s": t1 - t0, "pass_s": t2 - t1, "kernels": len(by_name), "total_s": t2 - t0}


def run_hta(path: Path) -> dict:
    """HTA's load: TraceAnalysis on a directory holding the one trace (parses it into DataFrames)."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as err:
        return {"error": f"HolisticTraceAnalysis is not installed ({err})"}
    t0 = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=str(path.parent))
    t1 = time.perf_counter()
    frames = analysis.t.traces
    rows = sum(len(df) for df in frames.values())
    return {"load_s": t1 - t0, "rows": rows, "total_s": t1 - t0}


CONTENDERS = {"kerneltrace": run_kerneltrace, "json": run_json_baseline, "hta": run_hta}


def child_main(name: str, path: str) -> None:
    import gc
    import resource

    gc.collect()
    result = CONTENDERS[name](Path(path))
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    # Worker processes (the parallel loader) count too: as many run at once as the loader starts,
    # each below this (an overestimate: forked workers share the parent's pages; bench_scaling.py
    # sums PSS instead).
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    if name == "kerneltrace":
        from tracer.load.parallel import worker_count

        result["load_workers"] = count = worker_count(Path(path).stat().st_size)
    else:
        count = 2 if workers else 0
    result["peak_rss_bytes"] = own + count * workers
    result["worker_rss_bytes"] = workers
    print("RESULT " + json.dumps(result))


def measure(name: str, path: Path, **extra_env: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra_env)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", name, str(path)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.perf_counter() - started
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {proc.returncode}: {tail[0][:200]}", "process_wall_s": wall}
    result = json.loads(line[len("RESULT ") :])
    result["process_wall_s"] = wall
    return result


# ---------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=520.0, help="uncompressed size of the big trace")
    parser.add_argument("--source", type=Path, default=SOURCE, help="real trace to replicate")
    parser.add_argument("--keep", type=Path, help="build (or reuse) the big trace in this directory")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("NAME", "TRACE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(*args.child)
        return

    with tempfile.TemporaryDirectory(prefix="kt-bench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        trace = folder / "big_trace.json"
        if not trace.exists() or trace.stat().st_size < args.size_mb * 1e6:
            t0 = time.perf_counter()
            built = build_large_trace(args.source, trace, args.size_mb)
            print(
                f"built {trace.name}: {built['bytes'] / 1e6:.0f} MB, {built['events']:,} events "
                f"({built['copies']} copies of {args.source.name}) in {time.perf_counter() - t0:.0f} s"
            )
        size_mb = trace.stat().st_size / 1e6
        busy_before = os.getloadavg()[0]
        results = {
            # Default: one load worker per idle core (at least 2 when a core is idle), else 1.
            "kerneltrace": measure("kerneltrace", trace),
            "kerneltrace-1": measure("kerneltrace", trace, KERNELTRACE_LOAD_WORKERS="1"),
            "kerneltrace-2": measure("kerneltrace", trace, KERNELTRACE_LOAD_WORKERS="2"),
            "json": measure("json", trace),
        }
        if not args.skip_hta:
            results["hta"] = measure("hta", trace)
        report(results, size_mb, busy_before)


def report(results: dict, size_mb: float, busy_before: float) -> None:
    ours = results["kerneltrace"]
    cores = os.cpu_count()
    print(
        f"\ntrace: {size_mb:.0f} MB uncompressed; {cores} cores, load average {busy_before:.1f} before the runs\n"
    )
    print(f"{'contender':<38} {'seconds':>8} {'MB/s':>7} {'peak RSS MB':>12} {'RSS/size':>9}")
    rows = []
    if "error" not in ours:
        rows.append(("kerneltrace load", ours["load_s"], None))
        rows.append(("kerneltrace load + join", ours["load_s"] + ours["join_s"], None))
        if ours.get("explain_s") is not None:
            rows.append(("kerneltrace load + join + explain", ours["total_s"], ours["peak_rss_bytes"]))
        else:
            rows[-1] = ("kerneltrace load + join", ours["load_s"] + ours["join_s"], ours["peak_rss_bytes"])
    forced_runs = (("kerneltrace-1", "1 process"), ("kerneltrace-2", "2 processes"))
    for name, label in forced_runs:
        forced = results.get(name, {})
        if forced and "error" not in forced:
            rows.append((f"kerneltrace, {label}, end to end", forced["total_s"], forced["peak_rss_bytes"]))
    for name, label in (("json", "json.load + one pass"), ("hta", "HTA TraceAnalysis load")):
        if name in results and "error" not in results[name]:
            rows.append((label, results[name]["total_s"], results[name]["peak_rss_bytes"]))
    for label, seconds, rss in rows:
        rss_text = f"{rss / 1e6:12.0f} {rss / 1e6 / size_mb:9.2f}" if rss else f"{'':12} {'':9}"
        print(f"{label:<38} {seconds:8.1f} {size_mb / seconds:7.1f} {rss_text}")
    for name, result in results.items():
        if "error" in result:
            print(f"{name}: {result['error']}")
    if "error" in ours:
        return
    end_to_end = ours["total_s"]
    print(f"\nkerneltrace end to end: {size_mb / end_to_end:.1f} MB/s (target >= 25)")
    print(f"kerneltrace peak RSS: {ours['peak_rss_bytes'] / 1e6 / size_mb:.2f}x the trace (target <= 3)")
    if "json" in results and "error" not in results["json"]:
        print(
            f"json.load + one pass / kerneltrace end to end: {results['json']['total_s'] / end_to_end:.2f}x"
        )
    for name, label in forced_runs:
        forced = results.get(name, {})
        if "hta" in results and "error" not in results["hta"] and forced and "error" not in forced:
            ratio = results["hta"]["total_s"] / forced["total_s"]
            print(f"HTA load / kerneltrace ({label}) end to end: {ratio:.1f}x")
    if "hta" in results and "error" not in results["hta"]:
        print(
            f"HTA load / kerneltrace end to end: {results['hta']['total_s'] / end_to_end:.1f}x (target >= 5)"
        )
    print(
        f"(kerneltrace: load {ours['load_s']:.1f} s, join {ours['join_s']:.1f} s"
        + (f", explain {ours['explain_s']:.1f} s" if ours.get("explain_s") is not None else "")
        + f"; {ours['rows']:,} rows, {ours['origins']} origins)"
    )


if __name__ == "__main__":
    main()
