"""On-disk cache of per-file scan results, keyed by content hash, rule-set hash and scanner version.

The cache is only a cache: anyone who can write the file could put anything in it (findings for
code that is not there, or no findings for code that is), and a crash or a full disk can leave it
half written. So each row carries a MAC (keyed BLAKE2b) under a secret kept apart from the cache, in
the user's config directory, and every entry is checked when read: its MAC, the schema, each field's
type, each site's path and line against the very file being scanned. Anything that fails is
rescanned, a file that is not a cache is rebuilt, and a cache that cannot be used (read-only, locked
by another scan) is skipped. Each of these is one warning line.
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
SCANNER_VERSION = "2"  # 2: rows carry a MAC
LOCK_WAIT_S = 1.0  # another scan holding the cache: wait this long, then go on without it
MAX_SKIP_REASON = 1000
_COLUMNS = [("key", "TEXT"), ("sites", "BLOB"), ("skipped", "TEXT"), ("mac", "BLOB")]
KEY_BYTES = 32


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kerneltrace"


def default_key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "kerneltrace" / "cache.key"


def secret_key(path: Path) -> bytes:
    """The key the cache's rows are signed with: read, or made once (0600, O_EXCL); OSError if neither."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = os.urandom(KEY_BYTES)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:  # another scan made it first
            return secret_key(path)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
        return key
    with os.fdopen(fd, "rb") as handle:
        key = handle.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise OSError(f"{path} is not a kerneltrace cache key")
    return key


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

    def __init__(self, directory: Path, key_path: Path | None = None) -> None:
        self.path = directory / f"sites-v{SCANNER_VERSION}.sqlite"
        self._db: sqlite3.Connection | None = None
        try:
            self._key = secret_key(key_path or default_key_path())
            directory.mkdir(parents=True, exist_ok=True)
            self._db = self._connect()
        except (OSError, sqlite3.Error, ValueError) as err:
            if isinstance(err, (sqlite3.DatabaseError, ValueError)) and not isinstance(
                err, sqlite3.OperationalError
            ):
                self._rebuild(f"not a kerneltrace cache ({err})")
            elif "locked" in str(err):
                warn_once("locked", f"scan cache {self.path} is in use by another scan: scanning without it")
            else:
                warn_once("open", f"scan cache disabled: {err}")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=LOCK_WAIT_S)
        db.text_factory = lambda data: data.decode("utf-8", "replace")  # damaged text: a bad row, not a crash
        try:
            columns = [(row[1], row[2].upper()) for row in db.execute("PRAGMA table_info(entries)")]
            if columns and columns != _COLUMNS:
                raise sqlite3.DatabaseError(f"table entries has columns {columns}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, sites BLOB NOT NULL, skipped TEXT, mac BLOB)"
            )
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
        except (OSError, sqlite3.Error, ValueError) as err:
            warn_once(
                "open", f"scan cache {self.path} was {why} and cannot be rebuilt ({err}): scanning without it"
            )

    def lookup(self, entries: list[tuple[str, str, bytes]]) -> dict[str, tuple[list[Site], str | None]]:
        """For (key, relative path, source bytes) entries: the cached (sites, skip reason) of those whose
        entry is present and checks out against the source; the others are left out (to be scanned)."""
        if self._db is None or not entries:
            return {}
        rows: dict[str, tuple[object, object, object]] = {}
        keys = [key for key, _, _ in entries]
        try:
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                query = f"SELECT key, sites, skipped, mac FROM entries WHERE key IN ({','.join('?' * len(chunk))})"
                for key, blob, skipped, mac in self._db.execute(query, chunk):
                    rows[key] = (blob, skipped, mac)
        except sqlite3.OperationalError as err:  # locked by another scan, or a disk error
            warn_once("read", f"scan cache not read ({err}): scanning without it")
            return {}
        except (sqlite3.DatabaseError, ValueError) as err:  # not a database, or a damaged one
            self._rebuild(f"damaged ({err})")
            return {}
        found: dict[str, tuple[list[Site], str | None]] = {}
        bad: list[str] = []
        for key, relative, source in entries:
            if key not in rows:
                continue
            blob, skipped, mac = rows[key]
            try:
                if mac != self._mac(key, blob, skipped):
                    raise ValueError("not signed with this user's key")
                found[key] = checked_entry(blob, skipped, relative, source)
            except (BadSite, ValueError, TypeError, orjson.JSONDecodeError):
                bad.append(key)
        if bad:
            warn_once(
                "entries", f"scan cache {self.path}: {len(bad)} entries did not match their files: rescanned"
            )
            with contextlib.suppress(sqlite3.Error), self._db:
                self._db.executemany("DELETE FROM entries WHERE key = ?", [(k,) for k in bad])
        return found

    def put_many(self, entries: Iterable[tuple[str, list[Site], str | None]]) -> None:
        if self._db is None:
            return
        rows = []
        for key, sites, skipped in entries:
            try:
                blob = orjson.dumps([s.__dict__ for s in sites])
            except orjson.JSONEncodeError:
                continue  # text orjson cannot write: that file is scanned again next time
            rows.append((key, blob, skipped, self._mac(key, blob, skipped)))
        try:
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?)", rows)
        except sqlite3.Error as err:  # a full disk or a locked cache costs the next run time, not this one
            warn_once("write", f"scan cache not written ({err})")

    def _mac(self, key: str, blob: object, skipped: object) -> bytes:
        mac = hashlib.blake2b(key=self._key, digest_size=16)
        for part in (key, blob, skipped):
            data = part if isinstance(part, bytes) else repr(part).encode("utf-8", "surrogatepass")
            mac.update(len(data).to_bytes(8, "little") + data)
        return mac.digest()

    def close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None


def checked_entry(
    blob: object, skipped: object, relative: str, source: bytes
) -> tuple[list[Site], str | None]:
    """A cache row as (sites, skip reason), or ValueError: the row's types, and each site against the
    file being scanned (its path, its line range)."""
    if not isinstance(blob, bytes):
        raise TypeError("sites are not a JSON blob")
    if skipped is not None and (not isinstance(skipped, str) or len(skipped) > MAX_SKIP_REASON):
        raise ValueError("skip reason is not a short text")
    data = orjson.loads(blob)
    if not isinstance(data, list):
        raise TypeError("sites are not a list")
    sites = [site_from_json(item) for item in data]
    if sites:
        lines = source.count(b"\n") + 1
        for site in sites:
            if site.path != relative or site.line > lines or (site.end_line or site.line) < site.line:
                raise ValueError(f"site {site.location} is not in {relative}")
    return sites, skipped
