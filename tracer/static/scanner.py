"""`scan()`: files -> sites, with the pre-filter, worker processes and the on-disk cache."""

from __future__ import annotations

import ast
import multiprocessing
import os
import re
import stat
import threading
import time
import tokenize
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from io import BytesIO
from pathlib import Path
from typing import Literal

from tracer.model.site import Site
from tracer.progress import report as report_progress
from tracer.static.cache import ScanCache, default_cache_dir, entry_key
from tracer.static.files import SourceFile, discover
from tracer.static.rules import RuleSet, load_rule_set

MAX_FILE_BYTES = 8 * 1024 * 1024  # generated tables and vendored blobs: not code worth mapping
MAX_HIT_LINES = 5_000  # sglang's busiest file has a few hundred
_IN_PROCESS_BYTES = 1_500_000  # below this much uncached source, workers cost more than they save
_CHUNK_BYTES = 400_000
NESTED_TOO_DEEP = "cannot parse: nested too deeply for Python's parser"


@dataclass(frozen=True)
class SkippedFile:
    """A file the scan could not read or parse, and why, in one line."""

    path: str
    reason: str


@dataclass(frozen=True)
class ScanResult:
    """What a scan found: sites by risk (highest first), and what it could not read."""

    sites: tuple[Site, ...]
    files_scanned: int
    skipped: tuple[SkippedFile, ...]
    seconds: float
    cache_hits: int

    def to_dict(self) -> dict:
        return {
            "files_scanned": self.files_scanned,
            "seconds": round(self.seconds, 3),
            "cache_hits": self.cache_hits,
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "sites": [s.to_dict() for s in self.sites],
        }


@dataclass(frozen=True)
class FileScan:
    """One file's outcome: its sites, or why it was skipped; `notes` are single candidates lost."""

    sites: tuple[Site, ...]
    skipped: str | None = None
    notes: tuple[str, ...] = ()


# ---- one file ----


def decode_source(source: bytes) -> str:
    """Text as Python reads it (PEP 263 coding cookie, BOM); ValueError when it cannot be."""
    if b"\0" in source:
        raise ValueError("binary file (contains NUL bytes)")
    try:
        encoding, _ = tokenize.detect_encoding(BytesIO(source).readline)
    except SyntaxError as err:
        raise ValueError(f"unknown source encoding: {err.msg if hasattr(err, 'msg') else err}") from None
    try:
        return source.decode(encoding)
    except (UnicodeDecodeError, LookupError) as err:
        raise ValueError(
            f"undecodable as {encoding}: {err.reason if hasattr(err, 'reason') else err}"
        ) from None


def read_source(path: Path) -> bytes | str:
    """A file's bytes, or the one-line reason it is not read.

    Only regular files are read, and at most `MAX_FILE_BYTES`: a FIFO named ``.py`` would block the
    scan forever and ``/dev/zero`` behind a symlink would never end. The file is opened non-blocking
    and checked through its descriptor, so swapping it between a check and the read changes nothing.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        return f"cannot read: {err.strerror or err}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file (a FIFO, device or socket named .py)"
        if info.st_size > MAX_FILE_BYTES:
            return _too_large(info.st_size)
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        return f"cannot read: {err.strerror or err}"
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:  # grew after the size check
        return _too_large(len(data))
    return data


def _too_large(size: int) -> str:
    return f"too large to scan ({size / 1e6:.1f} MB > {MAX_FILE_BYTES / 1e6:.0f} MB)"


def scan_source(
    source: bytes | str, relative: str, rules: RuleSet, *, prefilter: bool = True, patterns=None
) -> FileScan:
    """Sites in one file's source. `prefilter=False` runs the whole-file libcst reference path."""
    from tracer.static import fastscan

    raw = source.encode("utf-8") if isinstance(source, str) else source
    if len(raw) > MAX_FILE_BYTES:
        return FileScan((), _too_large(len(raw)))
    try:
        text = source if isinstance(source, str) else decode_source(raw)
    except ValueError as err:
        return FileScan((), str(err))
    if not prefilter:
        return _scan_reference(raw, text, relative, rules)
    pattern, aliases = patterns or (fastscan.prefilter_pattern(rules), fastscan.alias_pattern(rules))
    hits = fastscan.hit_lines(raw, pattern, aliases)
    if not hits:
        return FileScan(())
    if len(hits) > MAX_HIT_LINES:  # generated code or data: each site costs ~1 ms to place and score
        return FileScan(
            (),
            f"{len(hits):,} lines hold candidate sites (over {MAX_HIT_LINES:,}): generated code? not scanned",
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in the scanned code are not ours
            tree = ast.parse(raw, filename=relative)
    except SyntaxError as err:
        return FileScan((), _syntax_reason(err))
    except (RecursionError, MemoryError):  # CPython's parser signals deep nesting with either
        return FileScan((), NESTED_TOO_DEEP)
    except ValueError as err:
        return FileScan((), f"cannot parse: {err}")
    sites, notes = fastscan.scan_tree(tree, text, hits, rules, relative)
    return FileScan(number_sites(sites), None, tuple(notes))


def _scan_reference(raw: bytes, text: str, relative: str, rules: RuleSet) -> FileScan:
    import libcst as cst

    from tracer.static.refscan import scan_module_reference

    try:
        compile(raw, relative, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as err:
        return FileScan((), _syntax_reason(err))
    try:
        sites = scan_module_reference(text, rules, relative)
    except cst.ParserSyntaxError as err:
        return FileScan((), f"libcst cannot parse: {err.message} (line {err.raw_line})")
    return FileScan(number_sites(sites))


def _syntax_reason(err: SyntaxError) -> str:
    where = f" at line {err.lineno}" if err.lineno else ""
    return f"syntax error{where}: {err.msg}"


def number_sites(sites: list[Site]) -> tuple[Site, ...]:
    """Sort by position and set `nth` among identical text in one function (keeps ids unique)."""
    ordered = sorted(sites, key=lambda s: (s.line, s.col, s.rule))
    seen: dict[tuple[str, str, str], int] = defaultdict(int)
    numbered = []
    for site in ordered:
        key = (site.function, site.kind, site.text)
        nth = seen[key]
        seen[key] += 1
        numbered.append(site if nth == site.nth else replace(site, nth=nth))
    return tuple(numbered)


# ---- workers ----

_WORKER_RULES: RuleSet | None = None
_WORKER_PATTERNS = None


def _worker_init(rules: RuleSet) -> None:
    global _WORKER_RULES, _WORKER_PATTERNS
    from tracer.static import fastscan

    _WORKER_RULES = rules
    _WORKER_PATTERNS = (fastscan.prefilter_pattern(rules), fastscan.alias_pattern(rules))
    import libcst  # noqa: F401  (pay the import once per worker, not in the first chunk)


def _scan_chunk(chunk: list[tuple[bytes, str]]) -> list[FileScan]:
    # Workers get the bytes the parent read (and keyed the cache by), never re-read the file: one
    # that changes or disappears during the scan must not store another content's sites under the key.
    assert _WORKER_RULES is not None
    return [_guarded(source, relative, _WORKER_RULES, _WORKER_PATTERNS) for source, relative in chunk]


def _guarded(source: bytes, relative: str, rules: RuleSet, patterns) -> FileScan:
    try:
        return scan_source(source, relative, rules, patterns=patterns)
    except (RecursionError, MemoryError):
        return FileScan((), "cannot scan: nesting too deep")


def _open_cache(cache_dir: Path | Literal[False] | None) -> ScanCache | None:
    """The cache, or None when disabled (an unusable one disables itself, with one warning line)."""
    if cache_dir is False:
        return None
    return ScanCache(default_cache_dir() if cache_dir is None else cache_dir)


def _start_method() -> str:
    """`fork` is cheapest and works from a REPL or stdin, but forking a process that runs other threads
    (a progress bar's refresher) can deadlock the child; then a fork server starts clean workers."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


# ---- the public entry point ----


def scan(
    paths: Sequence[str | Path],
    *,
    rules_dirs: Sequence[Path] = (),
    include: Sequence[str] = (),
    jobs: int | None = None,
    cache_dir: Path | Literal[False] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ScanResult:
    """Map every copy/cast/layout site under `paths` (files or directories).

    `cache_dir=None` uses the default cache (`$XDG_CACHE_HOME/kerneltrace`), `False` disables it.
    `progress(done, total)` is called as files finish, in bytes of source (the scan's pace: big files
    go first to the workers, so a count of files would crawl, then race). Raises `InputError` for a missing path or a
    bad rule file; files that cannot be read or parsed are listed in `ScanResult.skipped`.
    Files are read, looked up, scanned and let go batch by batch: memory holds one batch of source.
    """
    started = time.perf_counter()
    rules = load_rule_set(rules_dirs)
    files = discover(paths, include)
    total = len(files)
    cache = _open_cache(cache_dir)
    results: dict[int, FileScan] = {}
    cache_hits = 0
    pool = _Pool(rules, jobs)
    sizes = [_file_size(file.absolute) for file in files]
    total_bytes = sum(sizes)
    done_bytes = 0

    def advance(finished: Iterable[int]) -> None:
        nonlocal done_bytes
        done_bytes += sum(sizes[i] for i in finished)
        if progress:
            progress(done_bytes, total_bytes)
        report_progress("scanning source", done_bytes, total_bytes)

    try:
        for batch in _read_batches(files):
            sources = {i: s for i, s in batch.items() if isinstance(s, bytes)}
            for index, reason in batch.items():
                if isinstance(reason, str):
                    results[index] = FileScan((), reason)
            keys = {i: entry_key(files[i].relative, s, rules.digest) for i, s in sources.items()}
            cached = (
                cache.lookup([(keys[i], files[i].relative, s) for i, s in sources.items()]) if cache else {}
            )
            for index in sources:
                if keys[index] in cached:
                    cached_sites, cached_reason = cached[keys[index]]
                    results[index] = FileScan(tuple(cached_sites), cached_reason)
                    cache_hits += 1
            todo = [i for i in sources if keys[i] not in cached]
            advance(i for i in batch if i in results)
            fresh = pool.scan(files, sources, todo, advance)
            results.update(fresh)
            if cache is not None:
                cache.put_many((keys[i], list(r.sites), r.skipped) for i, r in fresh.items())
            del sources, batch
    finally:
        pool.close()
        if cache is not None:
            cache.close()
    sites: list[Site] = []
    skipped: list[SkippedFile] = []
    for index, file in enumerate(files):
        result = results[index]
        sites.extend(result.sites)
        if result.skipped:
            skipped.append(SkippedFile(file.relative, result.skipped))
        skipped.extend(SkippedFile(file.relative, note) for note in result.notes)
    sites.sort(key=lambda s: (-s.risk, s.path, s.line, s.col))
    return ScanResult(tuple(sites), total, tuple(skipped), time.perf_counter() - started, cache_hits)


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # gone or unreadable: its reason is found when it is read
        return 0


BATCH_BYTES = 64 << 20  # source read ahead of the scan: bounds the scan's memory


def _read_batches(files: list[SourceFile]) -> Iterator[dict[int, bytes | str]]:
    """Each file's bytes (or why it was not read), in batches of about `BATCH_BYTES`."""
    batch: dict[int, bytes | str] = {}
    size = 0
    for index, file in enumerate(files):
        batch[index] = read_source(file.absolute)
        size += len(batch[index]) if isinstance(batch[index], bytes) else 0
        if size >= BATCH_BYTES:
            yield batch
            batch, size = {}, 0
    if batch:
        yield batch


class _Pool:
    """Scans a batch's files in this process when they are few, else in worker processes (started
    once, on the first batch big enough to need them)."""

    def __init__(self, rules: RuleSet, jobs: int | None) -> None:
        self.rules = rules
        self.jobs = jobs or os.cpu_count() or 1
        self._executor: ProcessPoolExecutor | None = None
        self._patterns: tuple[re.Pattern[bytes], re.Pattern[bytes]] | None = None

    def scan(
        self,
        files: list[SourceFile],
        sources: dict[int, bytes],
        todo: list[int],
        advance: Callable[[Iterable[int]], None],
    ) -> dict[int, FileScan]:
        if not todo:  # every file came from the cache: importing libcst (~0.3 s) would be for nothing
            advance(())
            return {}
        from tracer.static import fastscan

        results: dict[int, FileScan] = {}
        todo_bytes = sum(len(sources[i]) for i in todo)
        if self.jobs <= 1 or (todo_bytes < _IN_PROCESS_BYTES and self._executor is None):
            if self._patterns is None:
                self._patterns = (fastscan.prefilter_pattern(self.rules), fastscan.alias_pattern(self.rules))
            finished: list[int] = []
            for index in todo:
                results[index] = _guarded(sources[index], files[index].relative, self.rules, self._patterns)
                finished.append(index)
                if len(finished) == 20:
                    advance(finished)
                    finished = []
            advance(finished)
            return results
        # Big files first so that no worker is left with a large file at the end; chunks of similar size.
        order = sorted(todo, key=lambda i: -len(sources[i]))
        chunks: list[list[int]] = []
        current: list[int] = []
        current_bytes = 0
        for index in order:
            current.append(index)
            current_bytes += len(sources[index])
            if current_bytes >= _CHUNK_BYTES:
                chunks.append(current)
                current, current_bytes = [], 0
        if current:
            chunks.append(current)
        if self._executor is None:
            context = multiprocessing.get_context(_start_method())
            self._executor = ProcessPoolExecutor(
                max_workers=self.jobs, mp_context=context, initializer=_worker_init, initargs=(self.rules,)
            )
        futures = {
            self._executor.submit(_scan_chunk, [(sources[i], files[i].relative) for i in chunk]): chunk
            for chunk in chunks
        }
        for future in as_completed(futures):
            chunk = futures[future]
            for index, result in zip(chunk, future.result()):
                results[index] = result
            advance(chunk)
        return results

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None
