"""Check: `explain --json` prints the same bytes with this tree as with a baseline tree (old code).

Runs every trace under tests/fixtures (and any TRACE given) through `kerneltrace explain --json`
twice per tree: in one process each, at 1 load worker and at N. Prints the traces whose output
differs (exit 1 if any). The baseline is `git archive REF` of this repository (default: main).

    python bench/same_output.py [--ref main | --baseline-tree DIR] [--workers 4] [TRACE ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SOURCE_ROOT = REPO / "build" / "src" / "transformers-5.17.0"

# One process per (tree, workers): each trace's output digest (and exit code), as JSON lines.
_CHILD = r"""
import hashlib, json, sys
from click.testing import CliRunner
from tracer.cli import main
runner = CliRunner()
for line in sys.stdin:
    trace, *extra = json.loads(line)
    result = runner.invoke(main, ["explain", trace, "--json", *extra])
    digest = hashlib.sha256(result.output.encode()).hexdigest()
    print(json.dumps([trace, result.exit_code, digest]), flush=True)
"""


def fixture_traces() -> list[Path]:
    found = sorted(p for p in FIXTURES.rglob("*") if p.name.endswith((".json", ".json.gz")))
    return [p for p in found if "expected" not in p.name and not p.name.endswith(".sites.json")]


def baseline_tree(ref: str, into: Path) -> Path:
    """The package as of `ref`, unpacked from `git archive` (no worktree, no change to the repository)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", ref, "tracer", "rules"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def digests(tree: Path, jobs: list[list[str]], workers: int, cwd: Path) -> dict[str, tuple[int, str]]:
    """Each job's exit code and output digest with `tree`'s code, run from `cwd` (the same for every
    tree: what explain finds beside the working directory, caches and logs, must not differ)."""
    env = dict(os.environ, PYTHONPATH=str(tree), KERNELTRACE_LOAD_WORKERS=str(workers))
    env.pop("KERNELTRACE_MEMORY_LIMIT", None)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input="".join(json.dumps(job) + "\n" for job in jobs),
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=True,
    )
    out = {}
    for line in proc.stdout.splitlines():
        trace, code, digest = json.loads(line)
        out[trace] = (code, digest)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path, help="more traces (e.g. the bench trace)")
    parser.add_argument("--ref", default="main", help="git ref of the baseline (default: main)")
    parser.add_argument("--baseline-tree", type=Path, help="a directory holding the old tracer/ instead")
    parser.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--no-fixtures", action="store_true", help="only the traces given")
    args = parser.parse_args()

    traces = ([] if args.no_fixtures else fixture_traces()) + [t.resolve() for t in args.traces]
    source = ["--source", str(SOURCE_ROOT)] if SOURCE_ROOT.is_dir() else []
    jobs = [[str(t), *(source if t.stat().st_size > 50e6 else [])] for t in traces]
    with tempfile.TemporaryDirectory(prefix="kt-same-") as tmp:
        old = args.baseline_tree or baseline_tree(args.ref, Path(tmp) / "baseline")
        cwd = Path(tmp) / "cwd"
        cwd.mkdir()
        runs = {
            "baseline, 1 worker": digests(old, jobs, 1, cwd),
            "this tree, 1 worker": digests(REPO, jobs, 1, cwd),
            f"this tree, {args.workers} workers": digests(REPO, jobs, args.workers, cwd),
        }
    reference = runs["baseline, 1 worker"]
    differ = 0
    for label, got in runs.items():
        bad = [t for t in reference if got.get(t) != reference[t]]
        differ += len(bad)
        print(f"{label}: {len(reference) - len(bad)} of {len(reference)} outputs identical to the baseline")
        for trace in bad[:20]:
            print(f"  differs: {trace}")
    exits = {code for code, _ in reference.values()}
    print(
        f"(exit codes seen: {sorted(exits)}; digest of all: "
        f"{hashlib.sha256(json.dumps(sorted(reference.items())).encode()).hexdigest()[:12]})"
    )
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
