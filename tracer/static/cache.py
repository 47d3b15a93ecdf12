"""On-disk cache of per-file scan results, keyed by content hash, rule-set hash and scanner version.

The cache is only a cache: anyone who can write the file can put anything in it, and a crash or a
full disk can leave it half written. So every entry is checked when read (the schema, each field's
type, and that each site's text is on its line of the very bytes being scanned, under the path being
scanned); anything that fails is rescanned, a file that is not a cache is rebuilt, and a cache that
cannot be used (read-only, locked by another scan) is skipped. Each of these is one warning line.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import sys
from collections.abc import Iterable
from pathlib import Path

import orjson

from tracer.model.site import Site
from tracer.static.sites_json import BadSite, site_from_json

# Bump when the scanner's output for the same input changes.
SCANNER_VERSION = "1"
LOCK_WAIT_S = 1.0  # another scan holding the cache: wait this long, then go on without it
MAX_SKIP_REASON = 1000
_COLUMNS = [("key", "TEXT"), ("sites", "BLOB"), ("skipped", "TEXT")]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kerneltrace"


def entry_key(relative: str, content: bytes, rules_digest: str) -> str:
    """The relative path is part of the key: risk depends on it (tests/ and bench/ rank lower)."""
    digest = hashlib.blake2b(content, digest_size=16)
    # surrogateescape: a file name with bytes that are not UTF-8 keys by those bytes
    digest.update(f"\0{relative}\0{rules_digest}\0{SCANNER_VERSION}".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


_warned: set[str] = set()


def warn_once(kind: str, message: str) -> None:
    """One line on stderr, once per kind per process: the scan goes on."""
    if kind not in _warned:
        _warned.add(kind)
        sys.stderr.write(f"kerneltrace: warning: {message}\n")


class ScanCache:
    """One SQLite file: key -> (sites as JSON, skip reason). Written only by the parent process.

    Never raises: a cache that cannot be opened, read or written costs time, not the scan."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / f"sites-v{SCANNER_VERSION}.sqlite"
        self._db: sqlite3.Connection | None = None
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._db = self._connect()
        except (OSError, sqlite3.Error) as err:
            if isinstance(err, sqlite3.DatabaseError) and not isinstance(err, sqlite3.OperationalError):
                self._rebuild(f"not a kerneltrace cache ({err})")
            elif "locked" in str(err):
                warn_once("locked", f"scan cache {self.path} is in use by another scan: scanning without it")
            else:
                warn_once("open", f"scan cache disabled: {err}")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=LOCK_WAIT_S)
        try:
            columns = [(row[1], row[2].upper()) for row in db.execute("PRAGMA table_info(entries)")]
            if columns and columns != _COLUMNS:
                raise sqlite3.DatabaseError(f"table entries has columns {columns}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, sites BLOB NOT NULL, skipped TEXT)")
        except BaseException:
            db.close()
            raise
        return db

    def _rebuild(self, why: str) -> None:
        """Start the cache file anew (it is only a cache), or go on without one."""
        if self._db is not None:
            self._db.close()
            self._db = None
        try:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{self.path}{suffix}")
            self._db = self._connect()
            warn_once("rebuilt", f"scan cache {self.path} was {why}: rebuilt it")
        except (OSError, sqlite3.Error) as err:
            warn_once("open", f"scan cache {self.path} was {why} and cannot be rebuilt ({err}): scanning without it")

    def lookup(self, entries: list[tuple[str, str, bytes]]) -> dict[str, tuple[list[Site], str | None]]:
        """For (key, relative path, source bytes) entries: the cached (sites, skip reason) of those whose
        entry is present and checks out against the source; the others are left out (to be scanned)."""
        if self._db is None or not entries:
            return {}
        rows: dict[str, tuple[object, object]] = {}
        keys = [key for key, _, _ in entries]
        try:
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                query = f"SELECT key, sites, skipped FROM entries WHERE key IN ({','.join('?' * len(chunk))})"
                for key, blob, skipped in self._db.execute(query, chunk):
                    rows[key] = (blob, skipped)
        except sqlite3.OperationalError as err:  # locked by another scan, or a disk error
            warn_once("read", f"scan cache not read ({err}): scanning without it")
            return {}
        except sqlite3.DatabaseError as err:  # not a database, or a damaged one
            self._rebuild(f"damaged ({err})")
            return {}
        found: dict[str, tuple[list[Site], str | None]] = {}
        bad: list[str] = []
        for key, relative, source in entries:
            if key not in rows:
                continue
            try:
                found[key] = checked_entry(*rows[key], relative, source)
            except (BadSite, ValueError, TypeError, orjson.JSONDecodeError):
                bad.append(key)
        if bad:
            warn_once("entries", f"scan cache {self.path}: {len(bad)} entries did not match their files: rescanned")
            with contextlib.suppress(sqlite3.Error), self._db:
                self._db.executemany("DELETE FROM entries WHERE key = ?", [(k,) for k in bad])
        return found

    def put_many(self, entries: Iterable[tuple[str, list[Site], str | None]]) -> None:
        if self._db is None:
            return
        rows = []
        for key, sites, skipped in entries:
            try:
                rows.append((key, orjson.dumps([s.__dict__ for s in sites]), skipped))
            except orjson.JSONEncodeError:
                continue  # text orjson cannot write: that file is scanned again next time
        try:
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO entries VALUES (?, ?, ?)", rows)
        except sqlite3.Error as err:  # a full disk or a locked cache costs the next run time, not this one
            warn_once("write", f"scan cache not written ({err})")

    def close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None


def checked_entry(blob: object, skipped: object, relative: str, source: bytes) -> tuple[list[Site], str | None]:
    """A cache row as (sites, skip reason), or ValueError: the row's types, and each site against the
    file being scanned (its path, its line range, its text on its line)."""
    if not isinstance(blob, bytes):
        raise ValueError("sites are not a JSON blob")
    if skipped is not None and (not isinstance(skipped, str) or len(skipped) > MAX_SKIP_REASON):
        raise ValueError("skip reason is not a short text")
    data = orjson.loads(blob)
    if not isinstance(data, list):
        raise ValueError("sites are not a list")
    sites = [site_from_json(item) for item in data]
    if sites:
        lines = source.split(b"\n")
        for site in sites:
            if site.path != relative or site.line > len(lines) or (site.end_line or site.line) < site.line:
                raise ValueError(f"site {site.location} is not in {relative}")
            first = site.text.split("\n", 1)[0].strip().encode("utf-8", "surrogateescape")
            if first and first not in lines[site.line - 1]:
                raise ValueError(f"site {site.location}: its text is not on its line")
    return sites, skipped  # type: ignore[return-value]
