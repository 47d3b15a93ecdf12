"""On-disk cache of per-file scan results, keyed by content hash, rule-set hash and scanner version."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path

import orjson

from tracer.model.site import Site

# Bump when the scanner's output for the same input changes.
SCANNER_VERSION = "1"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kerneltrace"


def entry_key(relative: str, content: bytes, rules_digest: str) -> str:
    """The relative path is part of the key: risk depends on it (tests/ and bench/ rank lower)."""
    digest = hashlib.blake2b(content, digest_size=16)
    # surrogateescape: a file name with bytes that are not UTF-8 keys by those bytes
    digest.update(f"\0{relative}\0{rules_digest}\0{SCANNER_VERSION}".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


class ScanCache:
    """One SQLite file: key -> (sites as JSON, skip reason). Written only by the parent process."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"sites-v{SCANNER_VERSION}.sqlite"
        self._db = sqlite3.connect(self.path, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, sites BLOB NOT NULL, skipped TEXT)"
        )

    def get_many(self, keys: list[str]) -> dict[str, tuple[list[Site], str | None]]:
        found: dict[str, tuple[list[Site], str | None]] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            rows = self._db.execute(
                f"SELECT key, sites, skipped FROM entries WHERE key IN ({','.join('?' * len(chunk))})", chunk
            )
            for key, blob, skipped in rows:
                found[key] = ([Site.from_dict(d) for d in orjson.loads(blob)], skipped)
        return found

    def put_many(self, entries: Iterable[tuple[str, list[Site], str | None]]) -> None:
        rows = [(key, orjson.dumps([_compact(s) for s in sites]), skipped) for key, sites, skipped in entries]
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO entries VALUES (?, ?, ?)", rows)

    def close(self) -> None:
        self._db.close()


def _compact(site: Site) -> dict:
    data = site.__dict__.copy()
    return data
