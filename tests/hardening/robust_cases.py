"""Fuzz classes beyond one trace file (issue #17): bombs, directories of ranks with bad ones, corrupt scan
caches, side inputs, odd file names, pathological shapes. Shared by `bench/fuzz_traces.py` (thousands of
cases) and `tests/hardening/test_fuzz_classes.py` (a seeded part in every test run).

`make_case(kind, seeds, rng, directory, number)` writes one case's files and returns a `RobustCase`;
`run_case(case)` runs it in this process and returns an `Outcome` (trace_fuzz's): a result, a one-line
`InputError` naming the right file, or a failure saying what went wrong (the would-be exit 3).
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
import os
import random
import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trace_bombs
import trace_fuzz
from trace_mutations import DOCUMENT_MUTATIONS, HOSTILE_TEXT, WRITERS, kineto_json

REPO = Path(__file__).resolve().parents[2]
CLASSES = ("bomb", "rank_directory", "scan_cache", "side_input", "odd_path", "many_streams")
SCAN_SOURCES = (
    REPO / "examples" / "glm5_kv_cast" / "model.py",
    REPO / "examples" / "glm5_kv_cast" / "run.py",
    REPO / "tests" / "fixtures" / "ranks" / "make_rank_traces.py",
)


@dataclass
class RobustCase:
    """One generated case: its class, what was done, the path it runs on, and what to expect."""

    kind: str
    variant: str
    path: Path
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.variant} {self.path.name}"


# ---------------------------------------------------------------------------------------------------
# Making cases
# ---------------------------------------------------------------------------------------------------


def make_case(
    kind: str, seeds: list[tuple[str, dict]], rng: random.Random, directory: Path, number: int
) -> RobustCase:
    return _MAKERS[kind](seeds, rng, directory / f"case{number}")


@functools.cache
def _bomb_bytes(name: str, gib: int) -> bytes:
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"kerneltrace-bomb-{os.getpid()}-{name}-{gib}.json.gz"
    try:
        trace_bombs.BOMBS[name](path, total=(gib << 30) + (64 << 20))
        return path.read_bytes()
    finally:
        path.unlink(missing_ok=True)


def _bomb(seeds, rng: random.Random, base: Path) -> RobustCase:
    name = rng.choice(sorted(trace_bombs.BOMBS))
    gib = rng.choice((1, 2, 4, 8)) if name != "lying_size_field" else 4
    path = base.with_suffix(".json.gz")
    path.write_bytes(_bomb_bytes(name, gib))
    how = rng.choice(("explain", "explain", "capture", "annotate", "window"))
    options: dict[str, Any] = {"how": how}
    if how == "capture":
        seed = base.parent / f"{base.name}-seed.json"
        seed.write_bytes(kineto_json(rng.choice(seeds)[1]))
        options["trace"] = str(seed)
    return RobustCase("bomb", f"{name}-{gib}GiB-{how}", path, options)


_BAD_RANKS = {
    "truncated": lambda data, rng: data[: max(1, len(data) // 3)],
    "not_gzip": lambda data, rng: b"not a trace at all",
    "empty": lambda data, rng: b"",
    "corrupt_gzip": lambda data, rng: WRITERS["corrupt_gzip"](data, random.Random(0)),
    "bomb": None,
}


def _rank_directory(seeds, rng: random.Random, base: Path) -> RobustCase:
    base.mkdir()
    good = rng.randint(0, 3)
    bad = rng.randint(0 if good else 1, 3)
    names = []
    for rank in range(good):
        data = kineto_json(rng.choice(seeds[:2])[1])  # the CPU traces: explained without error
        (base / f"run-TP-{rank}.trace.json.gz").write_bytes(gzip.compress(data, 1))
    for rank in range(good, good + bad):
        kind = rng.choice(sorted(_BAD_RANKS))
        path = base / f"run-TP-{rank}.trace.json.gz"
        if kind == "bomb":
            path.write_bytes(_bomb_bytes("whitespace_between_events", 1))
        else:
            data = kineto_json(rng.choice(seeds)[1])
            written = _BAD_RANKS[kind](gzip.compress(data, 1) if kind != "not_gzip" else data, rng)
            path.write_bytes(written)
        names.append(kind)
    return RobustCase(
        "rank_directory", f"{good}good-{'+'.join(sorted(names)) or 'none'}", base,
        {"good": good, "bad": bad, "workers": rng.choice((1, 2))},
    )  # fmt: skip


_CACHE_DAMAGE = (
    "garbage",
    "truncated",
    "wrong_schema",
    "rows_random",
    "rows_swapped",
    "key_changed",
    "key_bad",
    "no_table",
)


def _scan_cache(seeds, rng: random.Random, base: Path) -> RobustCase:
    source = base / "src"
    source.mkdir(parents=True)
    for path in rng.sample(SCAN_SOURCES, rng.randint(1, len(SCAN_SOURCES))):
        shutil.copy(path, source / path.name)
    return RobustCase("scan_cache", rng.choice(_CACHE_DAMAGE), base, {"seed": rng.randrange(1 << 30)})


def _side_value(rng: random.Random) -> bytes:
    choice = rng.randrange(9)
    if choice == 0:
        return b"[" * 100_000 + b"]" * 100_000
    if choice == 1:
        return b'{"num_hidden_layers": ' + b"9" * rng.choice((30, 400, 5000)) + b"}"
    if choice == 2:
        return b"\xff\xfe not utf-8 \x00"
    if choice == 3:
        return b""
    if choice == 4:  # a sites file with a field of the wrong type
        site = {"path": "m.py", "line": 9, "col": 0, "kind": "to", "method": "to", "function": "f",
                "def_line": 1, "receiver": "x"}  # fmt: skip
        key = rng.choice(sorted(site))
        site[key] = rng.choice(("9", None, [1], {"a": 1}, -5, 1.5, True, rng.choice(HOSTILE_TEXT)))
        return json.dumps({"sites": [site]}).encode()
    if choice == 5:  # a config with values of the wrong type
        value = rng.choice((True, "78", 10**30, -3, 0, None, [78], {"n": 1}, 1.5))
        return json.dumps(
            {rng.choice(("num_hidden_layers", "n_layer", "num_experts", "top_k")): value}
        ).encode()
    if choice == 6:
        return json.dumps({"num_hidden_layers": rng.randint(1, 100)}).encode()  # a good config
    if choice == 7:
        return json.dumps(rng.choice(([], 3, "x", None, {"sites": 3}))).encode()
    return bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))


def _side_input(seeds, rng: random.Random, base: Path) -> RobustCase:
    base.mkdir()
    trace = base / "trace.json"
    trace.write_bytes(kineto_json(rng.choice(seeds)[1]))
    option = rng.choice(("config", "sites", "rules"))
    special = rng.random()
    if special < 0.1:
        side, variant = Path("/dev/zero"), "dev_zero"
    elif special < 0.2:
        side, variant = base / "fifo", "fifo"
        os.mkfifo(side)
    elif special < 0.25:
        side, variant = base, "directory"
    else:
        side, variant = base / "side.json", "content"
        side.write_bytes(_side_value(rng))
    if option == "rules":
        rules = base / "rules"
        rules.mkdir()
        if variant in ("fifo",):
            os.mkfifo(rules / "r.toml")
        elif variant == "content":
            (rules / "r.toml").write_bytes(_rule_file(rng))
        elif variant == "dev_zero":
            (rules / "r.toml").symlink_to("/dev/zero")
        side = rules
    return RobustCase("side_input", f"{option}-{variant}", trace, {option: str(side)})


def _rule_file(rng: random.Random) -> bytes:
    pattern = rng.choice(("^(a|aa)+$", "(", "x+", "^(\\w+\\s?)+$", "[", "pool|cache"))
    weight = rng.choice(("1", '"heavy"', "1e400", "[1]", "{a = 1}"))
    on = rng.choice(('"receiver"', '"text"', '"nothing"', "5"))
    return f'[[factor]]\nid = "f"\non = {on}\nweight = {weight}\nreason = "r"\npattern = {json.dumps(pattern)}\n'.encode()


_ODD_NAMES = (  # (variant, the file name's bytes)
    ("not_utf8", b"n\xffame"),
    ("latin1", b"\xe9t\xe9"),
    ("escape", b"\x1b[31mred"),
    ("space", b"sp ace"),
    ("noncharacter", b"\xef\xbf\xbfnonchar"),
    ("tab", b"tab\there"),
    ("dash", b"-dash"),
    ("long", b"x" * 200),
)


def _odd_path(seeds, rng: random.Random, base: Path) -> RobustCase:
    base.mkdir()
    variant, stem = rng.choice(_ODD_NAMES)
    name = stem + rng.choice((b".json", b".json.gz"))
    path = Path(os.fsdecode(os.fsencode(str(base)) + b"/" + name))
    document = copy.deepcopy(rng.choice(seeds)[1])
    for mutation in rng.sample(("hostile_names", "hostile_call_from", "odd_frames"), rng.randint(0, 2)):
        DOCUMENT_MUTATIONS[mutation](document, rng)
    data = kineto_json(document)
    path.write_bytes(gzip.compress(data, 1) if name.endswith(b".gz") else data)
    return RobustCase("odd_path", f"{variant}{name[len(stem) :].decode()}", path)


def _many_streams(seeds, rng: random.Random, base: Path) -> RobustCase:
    document = copy.deepcopy(rng.choice(seeds)[1])
    events = [e for e in document.get("traceEvents", []) if isinstance(e, dict)]
    variant = rng.choice(
        ("stream_per_kernel", "thread_per_event", "name_per_event", "deep_ranges", "many_pids")
    )
    if variant == "stream_per_kernel":
        for n, e in enumerate(events):
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and isinstance(e.get("args"), dict):
                e["args"]["stream"] = e["tid"] = 1000 + n
    elif variant == "thread_per_event":
        for n, e in enumerate(events):
            e["tid"] = 100_000 + n
    elif variant == "name_per_event":
        for n, e in enumerate(events):
            if e.get("ph") == "X":
                e["name"] = f"{e.get('name')}#{n}"
    elif variant == "many_pids":
        for n, e in enumerate(events):
            e["pid"] = n % 500
    else:  # ranges nested thousands deep around the whole trace
        timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
        if timed:
            start = min(e["ts"] for e in timed) - 1
            end = max(e["ts"] + (e.get("dur") or 0) for e in timed) + 1
            cpu = next((e for e in timed if e.get("cat") in ("cpu_op", "user_annotation")), timed[0])
            depth = rng.choice((500, 2000, 5000))
            for level in range(depth):
                document["traceEvents"].append({
                    "ph": "X", "cat": "user_annotation", "name": f"range{level}", "pid": cpu.get("pid"),
                    "tid": cpu.get("tid"), "ts": start + level * 1e-3, "dur": end - start - 2 * level * 1e-3,
                })  # fmt: skip
    path = base.with_suffix(".json")
    path.write_bytes(kineto_json(document))
    return RobustCase("many_streams", variant, path)


_MAKERS = {
    "bomb": _bomb,
    "rank_directory": _rank_directory,
    "scan_cache": _scan_cache,
    "side_input": _side_input,
    "odd_path": _odd_path,
    "many_streams": _many_streams,
}


# ---------------------------------------------------------------------------------------------------
# Running cases
# ---------------------------------------------------------------------------------------------------


def run_case(case: RobustCase) -> trace_fuzz.Outcome:
    """Run one case in this process; anything but the expected result or one-line error is a failure."""
    import traceback

    from tracer.errors import InputError

    try:
        return _RUNNERS[case.kind](case)
    except InputError as err:
        line = str(err)
        if "\n" in line or "\r" in line:
            return trace_fuzz.Outcome("failure", f"multi-line InputError: {line[:300]!r}")
        return trace_fuzz.Outcome("failure", f"unexpected InputError: {line[:300]!r}")
    except Exception:  # noqa: BLE001  (anything else is what the fuzzing looks for)
        return trace_fuzz.Outcome("failure", traceback.format_exc(limit=-8))


def _expect_error(err: Exception, *paths: Path | str) -> trace_fuzz.Outcome:
    line = str(err)
    if "\n" in line or "\r" in line:
        return trace_fuzz.Outcome("failure", f"multi-line InputError: {line[:300]!r}")
    if not any(line.startswith(str(p)) for p in paths):
        return trace_fuzz.Outcome("failure", f"InputError does not name the file: {line[:300]!r}")
    return trace_fuzz.Outcome("input_error", trace_fuzz.error_kind(getattr(err, "problem", line)))


def _run_bomb(case: RobustCase) -> trace_fuzz.Outcome:
    from tracer.api import attribute_trace, explain_trace
    from tracer.errors import InputError
    from tracer.load.window import TraceWindow

    how = case.options["how"]
    started = time.perf_counter()
    _reset_peak()
    try:
        if how == "capture":
            explain_trace(case.options["trace"], capture=[case.path])
        elif how == "annotate":
            from tracer.render.annotate import write_annotated_trace

            write_annotated_trace(attribute_trace(case.path), case.path.with_suffix(".annotated.json"))
        elif how == "window":
            explain_trace(case.path, window=TraceWindow.parse(window="0:1"))
        else:
            explain_trace(case.path)
    except InputError as err:
        outcome = _expect_error(err, case.path)
        if outcome.kind == "input_error":
            took, peak = time.perf_counter() - started, _peak_mb()
            return trace_fuzz.Outcome("input_error", f"{outcome.detail} [bomb {took:.2f} s {peak} MB]")
        return outcome
    return trace_fuzz.Outcome("failure", "a bomb was not refused")


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM, the peak resident memory
    except OSError:
        pass


def _peak_mb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    return -1


def _run_rank_directory(case: RobustCase) -> trace_fuzz.Outcome:
    from tracer.errors import InputError
    from tracer.explain.ranks import RankFailures
    from tracer.ranks import explain_rank_directory

    good, bad = case.options["good"], case.options["bad"]
    try:
        report, failures = explain_rank_directory(case.path, workers=case.options["workers"])
    except RankFailures as err:
        if good:
            return trace_fuzz.Outcome("failure", f"{good} good ranks, yet none explained: {err}")
        if len(err.failures) != bad:
            return trace_fuzz.Outcome("failure", f"{bad} bad ranks, {len(err.failures)} named")
        for failure in err.failures:
            outcome = _expect_error(failure, case.path)
            if not outcome.ok:
                return outcome
        return trace_fuzz.Outcome("input_error", "no rank could be explained")
    except InputError as err:
        return trace_fuzz.Outcome("failure", f"the directory run stopped: {err}")
    if len(report.ranks) != good or len(failures) != bad:
        return trace_fuzz.Outcome(
            "failure", f"{good} good/{bad} bad, got {len(report.ranks)}/{len(failures)}"
        )
    for failure in failures:
        outcome = _expect_error(failure, case.path)
        if not outcome.ok:
            return outcome
    return trace_fuzz.Outcome("result", f"{good} ranks explained, {bad} named")


def _run_scan_cache(case: RobustCase) -> trace_fuzz.Outcome:
    from tracer.static import cache as scan_cache
    from tracer.static import scan

    rng = random.Random(case.options["seed"])
    cache_dir, key = case.path / "cache", case.path / "config" / "kerneltrace" / "cache.key"
    scan_cache._warned.clear()
    os.environ["XDG_CONFIG_HOME"] = str(case.path / "config")
    try:
        truth = scan([case.path / "src"], cache_dir=False).sites
        scan([case.path / "src"], cache_dir=cache_dir)
        database = cache_dir / f"sites-v{scan_cache.SCANNER_VERSION}.sqlite"
        _damage(case.variant, database, key, rng)
        again = scan([case.path / "src"], cache_dir=cache_dir).sites
        third = scan([case.path / "src"], cache_dir=cache_dir)
    finally:
        os.environ.pop("XDG_CONFIG_HOME", None)
    if again != truth or third.sites != truth:
        return trace_fuzz.Outcome(
            "failure", f"{case.variant}: the scan gave other sites than without a cache"
        )
    return trace_fuzz.Outcome("result", case.variant)


def _damage(variant: str, database: Path, key: Path, rng: random.Random) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    if variant == "garbage":
        data = bytearray(database.read_bytes())
        for _ in range(rng.randint(1, 50)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        database.write_bytes(bytes(data))
    elif variant == "truncated":
        data = database.read_bytes()
        database.write_bytes(data[: rng.randrange(len(data))])
    elif variant in ("wrong_schema", "no_table"):
        database.unlink()
        with sqlite3.connect(database) as db:
            if variant == "wrong_schema":
                db.execute("CREATE TABLE entries (key TEXT, sites TEXT)")
            else:
                db.execute("CREATE TABLE other (x)")
    elif variant in ("rows_random", "rows_swapped"):
        with sqlite3.connect(database) as db:
            rows = db.execute("SELECT key, sites, skipped, mac FROM entries").fetchall()
            for key_value, sites, skipped, mac in rows:
                if variant == "rows_random":
                    sites = rng.choice(
                        (b"[]", b"not json", b'[{"path": 1}]', sites[: len(sites) // 2], sites)
                    )
                    skipped = rng.choice((None, "syntax error", 5, skipped))
                else:
                    other = rng.choice(rows)
                    sites, skipped, mac = other[1], other[2], other[3]
                db.execute(
                    "UPDATE entries SET sites = ?, skipped = ?, mac = ? WHERE key = ?",
                    (sites, skipped, mac, key_value),
                )
    elif variant == "key_changed":
        key.write_bytes(os.urandom(32))
    elif variant == "key_bad":
        key.write_bytes(b"x")


def _run_side_input(case: RobustCase) -> trace_fuzz.Outcome:
    from tracer.api import explain_trace
    from tracer.errors import InputError

    option, side = next(iter(case.options.items()))
    try:
        if option == "rules":
            from tracer.static import load_rule_set, scan

            load_rule_set([Path(side)])
            scan(list(SCAN_SOURCES), rules_dirs=[Path(side)], cache_dir=False)
        else:
            explain_trace(case.path, **{option: side})
    except InputError as err:
        return _expect_error(err, side, case.path)
    return trace_fuzz.Outcome("result", case.variant)


def _run_pipeline(case: RobustCase) -> trace_fuzz.Outcome:
    outcome = trace_fuzz.run_pipeline(case.path, ())
    return outcome


_RUNNERS = {
    "bomb": _run_bomb,
    "rank_directory": _run_rank_directory,
    "scan_cache": _run_scan_cache,
    "side_input": _run_side_input,
    "odd_path": _run_pipeline,
    "many_streams": _run_pipeline,
}
