"""The scan cache is only a cache: whatever is in the file, a scan gives the same sites as without it,
with at most one warning line per kind of trouble, and rebuilds or skips what it cannot trust."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import orjson
import pytest
from trace_fuzz import run_cli

from tracer.static import scan
from tracer.static.cache import SCANNER_VERSION

SOURCE = "import torch\n\n\ndef decode(pool, q):\n    k = pool.get_key_buffer(0).to(q.dtype)\n    return k\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "attn.py").write_text(SOURCE)
    return tmp_path


def _scan(project: Path) -> tuple[list[tuple[str, int, str]], int, str]:
    env = {"XDG_CACHE_HOME": str(project / "cache"), "XDG_CONFIG_HOME": str(project / "config")}
    done = run_cli("scan", str(project / "src"), "--json", env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    return (
        [(s["path"], s["line"], s["text"]) for s in data["sites"]],
        data["cache_hits"],
        done.stderr.decode(),
    )


def _database(project: Path) -> Path:
    return project / "cache" / "kerneltrace" / f"sites-v{SCANNER_VERSION}.sqlite"


def test_the_cache_is_used(project: Path) -> None:
    first, hits, _ = _scan(project)
    again, hits_again, stderr = _scan(project)
    assert first == again and (hits, hits_again) == (0, 1) and stderr == ""


def _rewrite_rows(project: Path, blob: bytes, skipped: object = None) -> None:
    with sqlite3.connect(_database(project)) as db:
        db.execute("UPDATE entries SET sites = ?, skipped = ?", (blob, skipped))  # the MAC left as it was


def _injected_site(path: str, line: int, text: str) -> bytes:
    site = {"path": path, "line": line, "col": 0, "kind": "to", "method": "to", "function": "f", "def_line": 1,
            "receiver": "x", "text": text, "rule": "KT101", "risk": 99.0}  # fmt: skip
    return orjson.dumps([site])


@pytest.mark.parametrize(
    "blob, skipped",
    [
        (b"not json", None),
        (b'{"a": 1}', None),
        (orjson.dumps([{"path": "attn.py", "line": "5"}]), None),
        (orjson.dumps([[1, 2]]), None),
        (_injected_site("elsewhere.py", 5, "x.to(y)"), None),  # findings for another file
        (_injected_site("attn.py", 5, "evil.to(injected)"), None),  # text that is not on the line
        (_injected_site("attn.py", 500, "x"), None),  # a line the file does not have
        (orjson.dumps([]), None),  # findings hidden: "no sites in this file"
        (orjson.dumps([]), "syntax error"),  # a file made to look unreadable
    ],
)
def test_entries_that_do_not_match_their_file_are_rescanned(project: Path, blob: bytes, skipped) -> None:
    truth, _, _ = _scan(project)
    _rewrite_rows(project, blob, skipped)
    sites, hits, stderr = _scan(project)
    assert sites == truth and hits == 0
    assert stderr.count("\n") == 1 and "entries did not match their files: rescanned" in stderr
    assert _scan(project)[1:] == (1, "")  # the rescanned entry replaced the bad one


@pytest.mark.parametrize(
    "damage",
    ["garbage", "wrong_schema", "empty_file"],
)
def test_a_file_that_is_not_a_cache_is_rebuilt(project: Path, damage: str) -> None:
    truth, _, _ = _scan(project)
    database = _database(project)
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    if damage == "garbage":
        database.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    elif damage == "wrong_schema":
        database.unlink()
        with sqlite3.connect(database) as db:
            db.execute("CREATE TABLE entries (key INTEGER, other TEXT)")
    else:
        database.write_bytes(b"")
    sites, _, stderr = _scan(project)
    assert sites == truth
    assert stderr.count("\n") <= 1 and "Traceback" not in stderr
    assert _scan(project)[1:] == (1, "")


def test_a_locked_cache_is_skipped_quickly_in_one_line(project: Path) -> None:
    _scan(project)
    (project / "src" / "attn.py").write_text(SOURCE + "\n# changed: the scan must write its entry\n")
    truth = [("attn.py", 5, "pool.get_key_buffer(0).to(q.dtype)")]
    holder = sqlite3.connect(_database(project))
    holder.execute("BEGIN EXCLUSIVE")  # another scan writing (readers still read: WAL)
    try:
        sites, hits, stderr = _scan(project)
    finally:
        holder.rollback()
        holder.close()
    assert sites == truth and hits == 0
    assert stderr == "kerneltrace: warning: scan cache not written (database is locked)\n"


def test_the_signing_key_lives_apart_from_the_cache(project: Path) -> None:
    _scan(project)
    key = project / "config" / "kerneltrace" / "cache.key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    key.write_bytes(b"\0" * 32)  # another key: every row is now unsigned
    assert _scan(project)[1] == 0
    key.write_bytes(b"short")  # not a key: the cache is skipped, the scan is not
    sites, hits, stderr = _scan(project)
    assert sites and hits == 0 and stderr.count("\n") == 1 and "scan cache disabled" in stderr


def test_a_read_only_cache_directory(project: Path) -> None:
    (project / "cache").mkdir()
    (project / "cache" / "kerneltrace").write_text("a file where the cache directory goes")
    assert scan([project / "src"], cache_dir=project / "cache" / "kerneltrace").sites
