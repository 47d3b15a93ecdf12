"""Time the static scan on the installed sglang against `ruff check --select ALL` on the same files.

Prints a table: full package cold, `--preset sglang-hot` cold, full package warm (nothing changed),
and ruff, with ratios. Writes nothing into the repository (caches go to a temporary directory).

    python bench/bench_scan.py [--package sglang] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tracer.static import preset_paths, resolve_package, scan


def timed(label: str, func):
    started = time.perf_counter()
    value = func()
    seconds = time.perf_counter() - started
    print(f"  {label}: {seconds:.1f} s", file=sys.stderr)
    return seconds, value


def ruff_seconds(target: Path, workdir: Path) -> float | None:
    ruff = shutil.which("ruff")
    if ruff is None:
        return None
    # --isolated: no config from the package; --no-cache: cold, like ours; --exit-zero: findings are fine
    command = [
        ruff,
        "check",
        "--select",
        "ALL",
        "--no-cache",
        "--isolated",
        "--quiet",
        "--exit-zero",
        str(target),
    ]
    started = time.perf_counter()
    subprocess.run(command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default="sglang")
    parser.add_argument("--preset", default="sglang-hot")
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args()
    package = resolve_package(args.package)
    files = sum(1 for _ in package.rglob("*.py"))
    megabytes = sum(p.stat().st_size for p in package.rglob("*.py")) / 1e6
    print(
        f"{args.package} at {package}: {files} files, {megabytes:.1f} MB; {os.cpu_count()} CPUs",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="kerneltrace-bench-") as tmp:
        tmp_path = Path(tmp)
        full_cold, result = timed(
            "full cold", lambda: scan([package], jobs=args.jobs, cache_dir=tmp_path / "full")
        )
        full_warm, warm = timed(
            "full warm", lambda: scan([package], jobs=args.jobs, cache_dir=tmp_path / "full")
        )
        hot_cold, hot = timed(
            f"{args.preset} cold",
            lambda: scan(preset_paths(args.preset), jobs=args.jobs, cache_dir=tmp_path / "hot"),
        )
        ruff = ruff_seconds(package, tmp_path)
        print(f"  ruff check --select ALL: {ruff:.1f} s" if ruff else "  ruff not found", file=sys.stderr)
    assert warm.cache_hits == warm.files_scanned and warm.sites == result.sites

    rows = [
        (
            "kerneltrace scan, full package, cold",
            full_cold,
            60.0,
            f"{len(result.sites)} sites, {len(result.skipped)} skipped",
        ),
        (
            f"kerneltrace scan --preset {args.preset}, cold",
            hot_cold,
            10.0,
            f"{len(hot.sites)} sites, {hot.files_scanned} files",
        ),
        ("kerneltrace scan, full package, warm", full_warm, 2.0, f"{warm.cache_hits} cache hits"),
    ]
    print("\n| run | seconds | target | vs ruff | notes |\n| --- | ---: | ---: | ---: | --- |")
    for name, seconds, target, notes in rows:
        ratio = f"{seconds / ruff:.1f}x" if ruff else "-"
        flag = "" if seconds <= target else " (over)"
        print(f"| {name} | {seconds:.1f} | <= {target:g}{flag} | {ratio} | {notes} |")
    if ruff:
        print(f"| ruff check --select ALL --no-cache, same files | {ruff:.1f} | | 1.0x | {files} files |")
        verdict = "under" if full_cold < 10 * ruff else "OVER"
        print(f"\nfull cold / ruff = {full_cold / ruff:.1f}x ({verdict} the 10x target)")


if __name__ == "__main__":
    main()
