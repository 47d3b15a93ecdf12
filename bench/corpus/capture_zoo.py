"""Record the zoo (bench/corpus/zoo) on CPU: trace + truth per shape.

    python3 -m bench.corpus.capture_zoo --out tests/fixtures/corpus/zoo [--shapes a,b]

Writes ``OUT/torch<major.minor>/<shape>.json.gz`` and ``.truth.json`` (see bench/corpus/recorder.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script: import from the repository, not from this folder
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
    sys.path.insert(0, str(REPO))

import torch

from bench.corpus.recorder import Workload, record
from bench.corpus.zoo import SHAPES


def torch_tag() -> str:
    major, minor = torch.__version__.split(".")[:2]
    return f"torch{major}.{minor}"


def repo_source(name: str) -> Path | None:
    path = REPO / name
    return path if path.is_file() else None


def shape_workload(name: str) -> Workload:
    shape = SHAPES[name]
    return Workload(
        name=name,
        build=shape.build,
        steps=shape.steps,
        warmup=shape.warmup,
        about=shape.exercises,
        extra={"family": "zoo", "shape": name, "module": shape.module},
    )


def pick(names: str | None, known: dict) -> list[str]:
    if not names:
        return list(known)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"unknown: {', '.join(unknown)} (known: {', '.join(known)})")
    return wanted


def print_recording(rec) -> None:
    r = rec.report
    agreement = f"{r.callfrom_agree}/{r.callfrom_checked}" if r.has_call_from else "-"
    print(
        f"{rec.name:32} {rec.trace_bytes / 1024:7.1f} KB  top ops {r.top_ops:5}  dropped {r.dropped:3}  "
        f"truth {r.truth_time_share:6.1%} of time  CallFrom {agreement}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", help="comma-separated shape names (default: all)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(1)
    out = args.out / torch_tag()
    for name in pick(args.shapes, SHAPES):
        rec = record(
            shape_workload(name), out, device=device, source_roots=["repo:"], find_source=repo_source
        )
        print_recording(rec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
