"""Record the zoo (and a few transformers models) on a GPU: trace + truth per case, one process.

    python3 bench/corpus/capture_gpu.py --out DIR --tar FILE.tar      # on the GPU machine, repo = cwd
    python3 bench/corpus/capture_gpu.py --out DIR --device cpu        # dry run here

Writes ``DIR/torch<major.minor>/<case>.json.gz`` + ``.truth.json`` (the zoo shapes by name, the
models as ``<model>_<forward|generate>``) and ``DIR/summary.json`` (environment, each case's report
or its error: one failing case does not stop the others). ``--tar`` packs all of it into one file
(the GPU machine returns at most 8 files). Needs only this repository, torch and, for the models,
transformers (any version: the truth files name it, and `bench/accuracy.py` finds that version's
source installed or unpacked under build/src/transformers-<version>).
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script: import from the repository, not from this folder
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
    sys.path.insert(0, str(REPO))

import torch

from bench.corpus.capture_zoo import pick, print_recording, repo_source, shape_workload, torch_tag
from bench.corpus.recorder import environment, record
from bench.corpus.zoo import SHAPES

DEFAULT_MODELS = "llama,mixtral,qwen3"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tar", type=Path, help="also pack OUT into this one .tar file")
    parser.add_argument("--shapes", help="comma-separated zoo shapes (default: all)")
    parser.add_argument("--models", default=DEFAULT_MODELS, help="transformers models ('' for none)")
    parser.add_argument("--kinds", default="forward,generate")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: use --device cpu for a dry run", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    out = args.out / torch_tag()
    summary: dict = {"environment": environment(device), "cases": {}, "errors": {}}
    started = time.perf_counter()

    def run(name: str, workload, roots, find_source) -> None:
        try:
            rec = record(workload, out, device=device, source_roots=roots, find_source=find_source)
        except Exception:  # noqa: BLE001 - recorded; the next case still runs
            summary["errors"][name] = traceback.format_exc()
            print(f"{name}: FAILED (see summary.json)", flush=True)
            return
        summary["cases"][name] = {"bytes": rec.trace_bytes, **rec.report.to_dict()}
        print_recording(rec)

    for name in pick(args.shapes, SHAPES):
        workload = shape_workload(name)
        workload.extra["family"] = "gpu"
        run(name, workload, ["repo:"], repo_source)
    if args.models:
        try:
            import transformers

            from bench.corpus.capture_transformers import (
                MODELS,
                model_workload,
                source_roots,
                transformers_source,
            )

            transformers.logging.set_verbosity_error()
        except Exception:  # noqa: BLE001
            summary["errors"]["transformers"] = traceback.format_exc()
            MODELS = {}
        for model in pick(args.models, MODELS) if MODELS else []:
            for kind in args.kinds.split(","):
                workload = model_workload(model, kind)
                workload.extra["family"] = "gpu"
                run(f"{model}_{kind}", workload, source_roots(), transformers_source)
    summary["seconds"] = round(time.perf_counter() - started, 1)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    if args.tar:
        with tarfile.open(args.tar, "w") as archive:
            archive.add(args.out, arcname=".")
    print(
        f"{len(summary['cases'])} cases, {len(summary['errors'])} errors, {summary['seconds']} s -> {args.out}"
    )
    return 0 if not summary["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
