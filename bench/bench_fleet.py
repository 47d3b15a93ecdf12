"""Fleet benchmark: a directory of 64 per-rank traces explained by the local process pool and by Ray.

The ranks are built from the two real H200 rank traces of tests/fixtures/steps/gpu_two_procs: each
rank copies one of them with its ids shifted (External id, correlation, flows, record functions), its
clock shifted, a different share of its time kept (so sizes differ), its distributedInfo rank set, and
one straggler rank whose GPU kernels run 1.3x longer. The directory is explained three ways in this
run: `explain_rank_directory(engine="local")` (the process pool), and `engine="ray"` on a local Ray
cluster of 2 and of 4 worker CPUs (a real `ray.init`). The reports must be identical (checked: the
JSON bytes). A sampler records the largest resident set of any one process (one rank's task) and of
all of them together. Then a paper estimate for 96 ranks x 4 GB, from the measured rate per byte.

    python bench/bench_fleet.py [--ranks 64] [--dir build/fleet] [--ray-cpus 2 4]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import sys
import threading
import time
from pathlib import Path
from typing import Self

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's kerneltrace, whatever else is installed
BASES = sorted((REPO / "tests" / "fixtures" / "steps" / "gpu_two_procs").glob("*.json.gz"))
RUN = "1790000300.0"
STRAGGLER_SLOWDOWN = 1.3
ID_KEYS = ("External id", "correlation", "Record function id", "Python id", "Python parent id")


def build_fleet(directory: Path, ranks: int) -> dict[str, int]:
    """Write `ranks` rank traces into `directory` (kept between runs: rebuilt when the count differs)."""
    stamp = directory / "fleet.json"
    if stamp.exists() and orjson.loads(stamp.read_bytes()).get("ranks") == ranks:
        return orjson.loads(stamp.read_bytes())
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.json.gz"):
        old.unlink()
    # One workload on every rank (the first base trace: its two ranks ran different work), so that the
    # straggler's slowdown is the only difference between ranks beside their lengths.
    base = orjson.loads(gzip.decompress(BASES[0].read_bytes()))
    straggler = ranks * 3 // 5
    json_bytes = 0
    for rank in range(ranks):
        document = base
        keep = 0.6 + 0.4 * ((rank * 37) % ranks) / max(1, ranks - 1)  # share of the time span kept
        data = _rank_trace(document, rank, ranks, keep, STRAGGLER_SLOWDOWN if rank == straggler else 1.0)
        json_bytes += len(data)
        (directory / f"{RUN}-TP-{rank}-DECODE.trace.json.gz").write_bytes(
            gzip.compress(data, compresslevel=1)
        )
    facts = {"ranks": ranks, "straggler": straggler, "json_bytes": json_bytes}
    stamp.write_bytes(orjson.dumps(facts))
    return facts


def _rank_trace(document: dict, rank: int, ranks: int, keep: float, slowdown: float) -> bytes:
    events = document["traceEvents"]
    timed = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    first, last = min(timed), max(timed)
    cutoff = first + keep * (last - first)
    shift_us = rank * 0.137  # clocks a little apart, as on real hosts
    id_shift = rank * 10_000_000
    head = {k: v for k, v in document.items() if k != "traceEvents"}
    head["distributedInfo"] = {**head.get("distributedInfo", {}), "rank": rank, "world_size": ranks}
    lines = []
    for event in events:
        ts = event.get("ts")
        if isinstance(ts, (int, float)) and ts > cutoff:
            continue
        event = dict(event)
        if isinstance(ts, (int, float)):
            event["ts"] = ts + shift_us
        if slowdown != 1.0 and event.get("cat") == "kernel" and isinstance(event.get("dur"), (int, float)):
            event["dur"] = event["dur"] * slowdown
        args = event.get("args")
        if isinstance(args, dict) and any(k in args for k in ID_KEYS):
            event["args"] = {
                k: (v + id_shift if k in ID_KEYS and isinstance(v, int) and v > 0 else v)
                for k, v in args.items()
            }
        if event.get("ph") in ("s", "f") and isinstance(event.get("id"), int):
            event["id"] += id_shift
        lines.append(orjson.dumps(event))
    body = b"".join(b"%s: %s,\n" % (orjson.dumps(k), orjson.dumps(v)) for k, v in head.items())
    return b"{\n" + body + b'"traceEvents": [\n' + b",\n".join(lines) + b"\n]}\n"


class RssSampler:
    """The largest resident set of one process (this one or a descendant: a pool worker, a Ray
    worker) and of all of them together, sampled every 0.1 s."""

    def __init__(self) -> None:
        import psutil

        self._me = psutil.Process()
        self.one = self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        while not self._stop.wait(0.1):
            sizes = []
            for process in [self._me, *self._me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    sizes.append(process.memory_info().rss)
            self.one = max(self.one, max(sizes))
            self.total = max(self.total, sum(sizes))


def explain(directory: Path, engine: str, workers: int) -> tuple[float, bytes, RssSampler]:
    from tracer.ranks import explain_rank_directory

    with RssSampler() as rss:
        start = time.perf_counter()
        report, failures = explain_rank_directory(directory, engine=engine, workers=workers)
        seconds = time.perf_counter() - start
    assert not failures, failures
    return seconds, orjson.dumps(report.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY), rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--dir", type=Path, default=REPO / "build" / "fleet")
    parser.add_argument("--ray-cpus", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--rank-mb-per-s", type=float, default=66.0, help="a big rank's rate, one process")
    args = parser.parse_args()
    started = time.perf_counter()
    facts = build_fleet(args.dir, args.ranks)
    gz = sum(p.stat().st_size for p in args.dir.glob("*.json.gz"))
    json_mb = facts["json_bytes"] / 1e6
    print(
        f"fleet: {facts['ranks']} ranks, {json_mb:.0f} MB of JSON ({gz / 1e6:.0f} MB gzipped), straggler rank "
        f"{facts['straggler']} (built in {time.perf_counter() - started:.0f} s); this machine: {os.cpu_count()} cores"
    )
    rows = []
    cores = os.cpu_count() or 1
    seconds, local_json, rss = explain(args.dir, "local", cores)
    rows.append((f"local process pool, {cores} workers", seconds, rss))
    outputs = {"local": local_json}
    for cpus in args.ray_cpus:
        import ray

        from tracer.engines.ray import cluster

        with cluster(num_cpus=cpus):  # a real local Ray cluster, started and stopped here
            assert ray.is_initialized()
            seconds, outputs[f"ray{cpus}"], rss = explain(args.dir, "ray", cpus)
        rows.append((f"Ray, local cluster of {cpus} worker CPUs", seconds, rss))
    same = all(output == outputs["local"] for output in outputs.values())
    print(
        f"{'engine':<40} {'seconds':>8} {'MB/s':>6} {'vs local':>9} {'max RSS of a task':>18} {'all processes':>14}"
    )
    for label, seconds, rss in rows:
        print(
            f"{label:<40} {seconds:>8.1f} {json_mb / seconds:>6.1f} {rows[0][1] / seconds:>8.2f}x "
            f"{rss.one / 1e6:>15.0f} MB {rss.total / 1e6:>11.0f} MB"
        )
    print(f"reports identical (JSON bytes) across engines: {same}")
    report = orjson.loads(local_json)
    for line in report["consistency"]:
        if "slower" in line or "hot origin" in line:
            print(f"  {line if len(line) < 240 else line[:240] + '...'}")
    per_task = rows[0][2].one / (facts["json_bytes"] / facts["ranks"])
    print(
        f"measured here: {json_mb / rows[0][1] / cores:.1f} MB/s per core, a task's peak {per_task:.1f}x its rank's JSON"
    )
    _paper_estimate(args.rank_mb_per_s)


def _paper_estimate(mb_per_s: float) -> None:
    """96 ranks x 4 GB of JSON on 12 nodes of 8 ranks, at a big rank's measured rate per process
    (bench_explain.py: 535 MB in 7.6-8.4 s in one process) and the loader's memory estimate. The small
    ranks above run slower per byte: each pays a fixed start (imports, step search) of ~1 s."""
    ranks, gb, nodes, cores, node_gb = 96, 4.0, 12, 16, 128
    from tracer.load.memory import estimated_peak

    peak = estimated_peak(int(gb * 1e9)) / 1e9
    per_rank_s = gb * 1e3 / mb_per_s
    fit = max(1, min(cores, int(node_gb * 0.7 // peak)))  # Ray's memory resource is ~70% of the node's
    per_node = ranks // nodes
    waves = -(-per_node // fit)
    print(
        f"paper estimate, {ranks} ranks x {gb:g} GB on {nodes} nodes ({cores} cores, {node_gb} GB each; "
        f"{per_node} ranks per node): at {mb_per_s:.0f} MB/s per rank process a rank takes ~{per_rank_s:.0f} s; "
        f"its load needs ~{peak:.1f} GB (estimated_peak, ~1x the JSON), so {min(fit, per_node)} run side by "
        f"side per node in {waves} wave(s): ~{waves * per_rank_s:.0f} s for the fleet plus Ray's start, "
        f"~{min(fit, per_node) * peak:.0f} GB per node at most; in one process on one machine: "
        f"~{ranks * per_rank_s / 3600:.1f} h"
    )


if __name__ == "__main__":
    main()
