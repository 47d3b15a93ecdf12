"""Synthetic worst cases against a normal trace of the same size (issue #17): no step may be super-linear
in streams, threads, ranks, names or nesting, and every decompression bomb is refused within 10 s and
1 GB.

Each shape is made from the real H200 CUDA-graph trace (tests/fixtures/gpu/cudagraph_decode_stack:
5.5k events, 978 replayed kernels) and timed through explain + graph + DOT source + HTML as the
commands make them by default (top 12 drawn, top 20 reported; no `dot` layout), best of --repeat runs in this process, against the unchanged trace (or, for added events, the
trace with the same number of events added flat). Ranks: a directory of N copies against N times one
rank. Bombs: each in a fresh process under a 4 GB address-space cap, wall time and peak RSS.

    python bench/bench_worst_cases.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "hardening"))

import trace_bombs
from trace_mutations import kineto_json

SOURCE = REPO / "tests" / "fixtures" / "gpu" / "cudagraph_decode_stack.json.gz"
DEPTH = 5000
RANKS = 8


def run_everything(path: Path) -> None:
    from tracer.api import explain_trace
    from tracer.graph import build_graph
    from tracer.render.dot import to_dot
    from tracer.render.html import render_report

    analysis = explain_trace(path, source=(REPO,))
    graph = build_graph(analysis, top=12)  # what `kerneltrace graph` and `report` draw by default
    to_dot(graph).source  # noqa: B018
    render_report(analysis, top=20)


def best_of(repeat: int, action) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def shapes(document: dict) -> dict[str, tuple[dict, str]]:
    """name -> (document, the baseline's name)."""
    events = document["traceEvents"]
    out: dict[str, tuple[dict, str]] = {"normal": (document, "normal")}

    def edited(edit) -> dict:
        copied = copy.deepcopy(document)
        for number, event in enumerate(copied["traceEvents"]):
            if isinstance(event, dict):
                edit(number, event)
        return copied

    def stream(number: int, event: dict) -> None:
        if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and isinstance(event.get("args"), dict):
            event["args"]["stream"] = event["tid"] = 1000 + number

    def thread(number: int, event: dict) -> None:
        if event.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime", "python_function"):
            event["tid"] = 100_000 + number

    def name(number: int, event: dict) -> None:
        if event.get("ph") == "X":
            event["name"] = f"{event.get('name')}#{number}"

    out["a stream per replayed kernel"] = (edited(stream), "normal")
    out["a thread per CPU event"] = (edited(thread), "normal")
    out["a name per event"] = (edited(name), "normal")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed) - 1
    end = max(e["ts"] + (e.get("dur") or 0) for e in timed) + 1
    cpu = next(e for e in timed if e.get("cat") == "cpu_op")
    flat = copy.deepcopy(document)
    deep = copy.deepcopy(document)
    width = (end - start) / DEPTH
    for level in range(DEPTH):
        base = {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"range{level}",
            "pid": cpu["pid"],
            "tid": cpu["tid"],
        }
        flat["traceEvents"].append({**base, "ts": start + level * width, "dur": width * 0.5})
        deep["traceEvents"].append(
            {**base, "ts": start + level * 1e-3, "dur": end - start - 2 * level * 1e-3}
        )
    out[f"{DEPTH} side-by-side ranges"] = (flat, f"{DEPTH} side-by-side ranges")
    out[f"ranges nested {DEPTH} deep"] = (deep, f"{DEPTH} side-by-side ranges")
    return out


def bomb_figures(work: Path) -> list[tuple[str, float, int, int]]:
    """(bomb, seconds, peak MB, exit code) of `kerneltrace explain` on each, capped at 4 GB."""
    cap = 4 << 30
    rows = []
    for name, make in trace_bombs.BOMBS.items():
        path = make(work / f"{name}.json.gz")
        started = time.perf_counter()
        done = subprocess.run(
            ["/usr/bin/time", "-f", "peak %M", sys.executable, "-c", "from tracer.cli import main; main()",
             "explain", str(path)],
            capture_output=True,
            text=True,
            cwd=REPO,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)),
            check=False,
        )  # fmt: skip
        took = time.perf_counter() - started
        peak = int(done.stderr.rsplit("peak ", 1)[1].split()[0]) // 1024
        code = (
            int(done.stderr.split("exited with non-zero status ")[1].split()[0])
            if "non-zero" in done.stderr
            else 0
        )
        rows.append((f"{name} ({path.stat().st_size / 1e6:.1f} MB file)", took, peak, code))
        path.unlink()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    document = json.loads(gzip.decompress(SOURCE.read_bytes()))
    work = Path(tempfile.mkdtemp(prefix="kerneltrace-worst-"))
    try:
        run_everything(SOURCE)  # imports and caches warm
        timings: dict[str, float] = {}
        rows = []
        for name, (shaped, baseline) in shapes(document).items():
            path = work / "shape.json"
            path.write_bytes(kineto_json(shaped))
            timings[name] = best_of(args.repeat, lambda shape=path: run_everything(shape))
            rows.append((name, len(shaped["traceEvents"]), timings[name], timings[name] / timings[baseline]))
        ranks = work / "ranks"
        ranks.mkdir()
        for rank in range(RANKS):
            shutil.copy(SOURCE, ranks / f"run-TP-{rank}.trace.json.gz")
        from tracer.ranks import explain_rank_directory

        one = best_of(args.repeat, lambda: explain_rank_directory(ranks, workers=1, select="TP-0."))
        directory = best_of(args.repeat, lambda: explain_rank_directory(ranks, workers=1))
        rows.append(
            (
                f"a directory of {RANKS} ranks (1 process)",
                RANKS * len(document["traceEvents"]),
                directory,
                directory / (RANKS * one),
            )
        )
        bombs = bomb_figures(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("| shape | events | seconds | x its baseline |")
    print("| --- | --: | --: | --: |")
    for name, events, seconds, ratio in rows:
        print(f"| {name} | {events:,} | {seconds:.2f} | {ratio:.2f} |")
    print()
    print("| bomb | refused in (s) | peak RSS (MB) | exit code |")
    print("| --- | --: | --: | --: |")
    for name, seconds, peak, code in bombs:
        print(f"| {name} | {seconds:.2f} | {peak} | {code} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
