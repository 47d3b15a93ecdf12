"""How much `kerneltrace diff` says the KV fix saves, on CPU runs of the graph tests' small model.

The tests assert what the diff finds (the whole-buffer cast vanished, the gathered cast is new);
times measured on a shared CPU belong here, printed as ratios of the same run:

    python bench/bench_diff_kv.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "graph"))

from kv_cast_model import GATHER_CAST_MARK, WHOLE_CAST_MARK, marked_line, profile_decode

from tracer.api import explain_trace
from tracer.explain.diff import diff_analyses


def main() -> int:
    model_dir = REPO / "tests" / "graph"
    with tempfile.TemporaryDirectory() as directory:
        before = profile_decode(Path(directory) / "whole_cast.json", gather_first=False)
        after = profile_decode(Path(directory) / "gather_then_cast.json", gather_first=True)
        diff = diff_analyses(
            explain_trace(before, source=(model_dir,)), explain_trace(after, source=(model_dir,))
        )
    whole = next(r for r in diff.origins if r.location.endswith(f":{marked_line(WHOLE_CAST_MARK)}"))
    gather = next(r for r in diff.origins if r.location.endswith(f":{marked_line(GATHER_CAST_MARK)}"))
    print(f"step time after/before: {diff.step_ratio:.2f} (the fix: < 1)")
    print(f"op time after/before: {diff.after_gpu_ns / diff.before_gpu_ns:.2f}")
    print(f"gathered cast / whole-buffer cast: {gather.after_ns / whole.before_ns:.3f} (64 of 16384 rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
