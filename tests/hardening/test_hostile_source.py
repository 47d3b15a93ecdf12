"""Hostile source trees for the scanner: every bad file is skipped with its reason; the scan never
crashes, hangs or reads without bound, and a file that changes during the scan cannot poison the cache."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from trace_fuzz import run_cli, time_bound

from tracer.static import scan
from tracer.static import scanner as scanner_module

GOOD = "def forward(self, x):\n    return x.float()\n"


def _reasons(result) -> dict[str, str]:
    return {item.path: item.reason for item in result.skipped}


def test_deep_nesting_huge_undecodable_and_binary_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "parens.py").write_text(
        "def forward(x):\n    return x.float() + " + "(" * 5000 + "1" + ")" * 5000 + "\n"
    )
    # No brackets, so the tokenizer's 200-level limit does not catch them: the parser (or our
    # visitor) would recurse past the interpreter's limit.
    (tmp_path / "nots.py").write_text(
        "def forward(x):\n    y = x.float()\n    return " + "not " * 100_000 + "x\n"
    )
    (tmp_path / "sums.py").write_text(
        "def forward(x):\n    return " + " + ".join(["x.float()"] * 1500) + "\n"
    )
    (tmp_path / "chain.py").write_text("def forward(x):\n    return x" + ".float()" * 100_000 + "\n")
    (tmp_path / "huge.py").write_bytes(b"x = y.float()\n" + b"#" * (20 << 20))  # 20 MB
    (tmp_path / "latin1.py").write_bytes(b"def forward(x):\n    return x.float()  # caf\xe9\n")
    (tmp_path / "program.py").write_bytes(Path(sys.executable).resolve().read_bytes()[:200_000])  # a real ELF
    with time_bound(120):
        result = scan([tmp_path], cache_dir=False, jobs=1)
    reasons = _reasons(result)
    assert result.files_scanned == 8
    assert reasons["parens.py"] == "syntax error at line 2: too many nested parentheses"
    assert reasons["nots.py"] == "cannot parse: nested too deeply for Python's parser"
    assert reasons["sums.py"] == "cannot scan: nesting too deep"
    assert reasons["chain.py"] == "cannot parse: nested too deeply for Python's parser"
    assert reasons["huge.py"] == "too large to scan (21.0 MB > 8 MB)"
    assert reasons["latin1.py"] == "undecodable as utf-8: invalid continuation byte"
    assert reasons["program.py"] == "binary file (contains NUL bytes)"
    assert [(s.path, s.line, s.rule) for s in result.sites] == [("good.py", 2, "KT102")]


def test_symlink_loops_fifos_and_devices_are_skipped_without_blocking(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "good.py").write_text(GOOD)
    (tree / "pkg" / "loop").symlink_to(tree)  # a directory loop: never followed
    (tree / "a.py").symlink_to(tree / "b.py")  # a file loop: a.py -> b.py -> a.py
    (tree / "b.py").symlink_to(tree / "a.py")
    (tree / "dangling.py").symlink_to(tree / "gone.py")
    (tree / "zero.py").symlink_to("/dev/zero")  # read without bound before: never ends
    os.mkfifo(tree / "fifo.py")  # opened blocking before: waits forever for a writer
    with time_bound(60):
        result = scan([tree], cache_dir=False, jobs=1)
    reasons = _reasons(result)
    assert reasons == {
        "a.py": "cannot read: Too many levels of symbolic links",
        "b.py": "cannot read: Too many levels of symbolic links",
        "dangling.py": "cannot read: No such file or directory",
        "fifo.py": "not a regular file (a FIFO, device or socket named .py)",
        "zero.py": "not a regular file (a FIFO, device or socket named .py)",
    }
    assert [(s.path, s.line) for s in result.sites] == [("pkg/good.py", 2)]


def test_the_cli_lists_skipped_files_and_exits_0(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(GOOD)
    os.mkfifo(tmp_path / "fifo.py")
    (tmp_path / "nots.py").write_text("x = " + "not " * 100_000 + "y.float()\n")
    done = run_cli("scan", str(tmp_path), "--no-cache", text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "skipped fifo.py: not a regular file" in done.stderr
    assert "skipped nots.py: cannot parse: nested too deeply" in done.stderr
    assert "1 sites in 3 files, 2 skipped" in done.stdout


def _sglang_sample(sglang_root: Path, target: Path) -> list[Path]:
    """Real sglang files, enough bytes (> 1.5 MB) that `scan` hands them to worker processes."""
    source = sglang_root / "sglang" / "srt" / "layers" / "attention"
    copied, total = [], 0
    for path in sorted(source.glob("*.py")):
        copied.append(Path(shutil.copy(path, target / path.name)))
        total += path.stat().st_size
        if total > 2_000_000:
            break
    assert total > scanner_module._IN_PROCESS_BYTES
    return copied


def test_files_changing_or_vanishing_during_a_parallel_scan(
    tmp_path: Path, sglang_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan reads each file once; workers scan those bytes. Before, workers re-read the file, so a
    file changed (or deleted) mid-scan stored the new content's sites (or "cannot read") in the cache
    under the old content's key, and every later scan of the old content got them back."""
    tree = tmp_path / "tree"
    tree.mkdir()
    files = _sglang_sample(sglang_root, tree)
    reference = scan([tree], cache_dir=False, jobs=1)
    changed, vanished = files[0], files[1]
    original = changed.read_bytes()

    def meddle(done: int, total: int) -> None:
        # Called after every file was read and before any was scanned: change one, delete another.
        if done == 0 and changed.read_bytes() == original:
            changed.write_text("# replaced during the scan\n" + GOOD)
            vanished.unlink()

    cache = tmp_path / "cache"
    with time_bound(300):
        during = scan([tree], cache_dir=cache, jobs=2, progress=meddle)
    assert [s.id for s in during.sites] == [s.id for s in reference.sites]
    assert during.skipped == reference.skipped
    # Put the original content back: the cache must hold that content's sites, not the replacement's.
    changed.write_bytes(original)
    shutil.copy(sglang_root / "sglang" / "srt" / "layers" / "attention" / vanished.name, vanished)
    again = scan([tree], cache_dir=cache, jobs=1)
    assert again.cache_hits == len(files)
    assert [s.id for s in again.sites] == [s.id for s in reference.sites]


def test_a_file_that_vanishes_between_listing_and_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "gone.py").write_text(GOOD)
    listed = scanner_module.discover

    def discover_then_delete(paths, include=()):
        found = listed(paths, include)
        (tmp_path / "gone.py").unlink()  # the file goes away right after the directory walk
        return found

    monkeypatch.setattr(scanner_module, "discover", discover_then_delete)
    result = scan([tmp_path], cache_dir=False, jobs=1)
    assert _reasons(result) == {"gone.py": "cannot read: No such file or directory"}
    assert [s.path for s in result.sites] == ["good.py"]
