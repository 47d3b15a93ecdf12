"""Peak memory of `annotate` against `explain` on one big trace (issue #17, item 4: annotate used to
re-read the whole document; it now rewrites the trace chunk by chunk as the loader reads it).

    python bench/bench_annotate_memory.py [--mb 300]

Builds a trace of about --mb MB of JSON from the real llama trace (bench_explain.py's replicator),
runs `kerneltrace explain` and `kerneltrace annotate` on it in fresh processes and prints each one's
peak resident memory (/usr/bin/time) and its ratio to the JSON size.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from bench_explain import SOURCE, build_large_trace


def peak(*args: str) -> tuple[int, float, int]:
    """(peak RSS in MB, wall seconds, exit code) of `kerneltrace ARGS`."""
    done = subprocess.run(
        ["/usr/bin/time", "-f", "peak %M wall %e", sys.executable, "-m", "tracer", *args],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    tail = done.stderr.rsplit("peak ", 1)[1].split()
    return int(tail[0]) // 1024, float(tail[2]), done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        trace = Path(directory) / "big.json"
        build_large_trace(SOURCE, trace, args.mb)
        size_mb = trace.stat().st_size / 1e6
        rows = [
            ("explain", peak("explain", str(trace), "--top", "3")),
            ("annotate", peak("annotate", str(trace), "-o", str(Path(directory) / "annotated.json.gz"))),
        ]
    print(f"trace: {size_mb:.0f} MB of JSON")
    print("| command | peak RSS (MB) | x JSON size | seconds | exit |")
    print("| --- | --: | --: | --: | --: |")
    for name, (mb, seconds, code) in rows:
        print(f"| {name} | {mb} | {mb / size_mb:.2f} | {seconds:.1f} | {code} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
