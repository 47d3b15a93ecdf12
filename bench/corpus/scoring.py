"""Score the join against the corpus truth: coverage, accuracy and calibration per trace.

Each attributed row (a kernel/memcpy/memset, or on CPU traces a leaf CPU op) takes the truth of
its outermost CPU op (`TruthLookup`), found here by time containment on the event table (a GPU row
through its runtime launch, matched by correlation id), not through the join. Rows with no truth
are left out and counted.
"""

from __future__ import annotations

import bisect
import gzip
import importlib.metadata
import importlib.util
import json
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.corpus.architectures import trace_architectures
from bench.corpus.frames import same_file
from bench.corpus.recorder import file_digest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "corpus"
BUCKETS = (">=0.9", "0.5-0.9", "<0.5")
MODES = ("stack", "callfrom", "nostack", "named")
DEFAULT_MODES = MODES[:3]  # ``named`` repeats ``nostack`` for the traces of a named model: asked for
RANKED_MODES = ("nostack", "named")  # no Python frames: candidates ranked, scored at rank 1 / top 3


def bucket_of(confidence: float) -> str:
    return BUCKETS[0] if confidence >= 0.9 else BUCKETS[1] if confidence >= 0.5 else BUCKETS[2]


@dataclass(frozen=True)
class CorpusTrace:
    """One trace of the corpus and its truth file."""

    family: str
    name: str  # unique in the corpus: family/torch-tag/trace
    group: str  # the zoo shape, the transformers model, the SGLang module
    torch: str
    trace_path: Path
    truth_path: Path

    def truth_document(self) -> dict[str, Any]:
        return json.loads(self.truth_path.read_text())


def find_corpus(root: Path = CORPUS, families: Sequence[str] | None = None) -> list[CorpusTrace]:
    """Every ``<name>.json.gz`` beside a ``<name>.truth.json`` under `root`, sorted by name."""
    found = []
    for truth_path in sorted(root.rglob("*.truth.json")):
        trace_path = truth_path.with_name(truth_path.name.removesuffix(".truth.json") + ".json.gz")
        if not trace_path.is_file():
            continue
        family = truth_path.relative_to(root).parts[0]
        if families and family not in families:
            continue
        document = json.loads(truth_path.read_text())
        name = str(truth_path.relative_to(root)).removesuffix(".truth.json")
        group = document.get("shape") or document.get("model") or document.get("group") or document["name"]
        found.append(CorpusTrace(family, name, group, document.get("torch", "?"), trace_path, truth_path))
    return found


def resolve_roots(spec: Iterable[str]) -> list[Path]:
    """Where a truth file's source is.

    ``repo:`` / ``repo:sub``: the repository (a folder in it); ``module:pkg``: the folder holding the
    installed pkg; ``package:pkg==1.2``: that, when the installed version is 1.2, else
    ``build/src/pkg-1.2`` (where `make setup` unpacks transformers 5.17.0, the GPU machine's).
    """
    roots = []
    for item in spec:
        kind, _, rest = item.partition(":")
        if kind == "repo":
            roots.append(REPO / rest if rest else REPO)
        elif kind in ("module", "package"):
            name, _, version = rest.partition("==")
            unpacked = REPO / "build" / "src" / f"{name}-{version}"
            installed = _installed_root(name)
            if version and _installed_version(name) != version and unpacked.is_dir():
                roots.append(unpacked)
            elif installed is not None:
                roots.append(installed)
        else:
            roots.append(Path(item))
    return roots


def source_dirs(document: dict[str, Any], roots: Sequence[Path]) -> list[Path]:
    """What a user would pass as ``--source`` for this trace: the package the traced code is in
    (``.../site-packages/transformers``), or the folder holding the traced files of the repository
    (``bench/corpus/zoo``). Without frames, every file under ``--source`` is a candidate."""
    found: list[Path] = []
    for name in document.get("sources", {}):
        parts = Path(name).parts
        for root in roots:
            if not (root / name).is_file():
                continue
            top = root / parts[0]
            folder = top if (top / "__init__.py").is_file() else (root / name).parent
            if folder not in found:
                found.append(folder)
            break
    return found or list(roots)


def _installed_root(name: str) -> Path | None:
    found = importlib.util.find_spec(name)
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations))).parent


def _installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def stale_sources(document: dict[str, Any], roots: Sequence[Path]) -> list[str]:
    """Source files whose digest differs from the one recorded with the trace (or that are missing)."""
    stale = []
    for name, digest in (document.get("sources") or {}).items():
        path = next((r / name for r in roots if (r / name).is_file()), None)
        if path is None or (digest is not None and file_digest(path) != digest):
            stale.append(name)
    return stale


def parse_location(text: str) -> tuple[str, int] | None:
    file, _, line = text.rpartition(":")
    return (file, int(line)) if file and line.isdigit() else None


def strip_stacks(trace_path: Path, out_dir: Path) -> Path:
    """A copy of the trace with every python_function event removed (the no-stack form)."""
    opener = gzip.open if trace_path.suffix == ".gz" else open
    with opener(trace_path, "rb") as handle:
        document = orjson.loads(handle.read())
    document["traceEvents"] = [e for e in document["traceEvents"] if e.get("cat") != "python_function"]
    document["with_stack"] = False
    out = out_dir / (trace_path.name.removesuffix(".gz").removesuffix(".json") + ".nostack.json")
    out.write_bytes(orjson.dumps(document))
    return out


class TruthLookup:
    """A row's truth: that of the nearest CPU op around it (itself included) that has one, by time
    containment per thread (ops nest perfectly); a GPU row is looked up at its runtime launch.

    Normally only top-level ops have a truth, so this is the outermost op's; where user code ran
    inside an op (an autograd Function), the ops inside have their own lines.
    """

    def __init__(self, table, truth: dict[int, tuple[str, int]]) -> None:
        from tracer.model.events import Cat

        self.table, self.truth = table, truth
        ops: dict[tuple[int, int], list[int]] = defaultdict(list)
        launches: dict[int, int] = {}
        for row in range(len(table)):
            cat = table.cat[row]
            if cat == Cat.CPU_OP:
                ops[(table.pid[row], table.tid[row])].append(row)
            elif cat in (Cat.RUNTIME, Cat.DRIVER) and table.correlation[row] >= 0:
                launches[table.correlation[row]] = row  # the last launch of a correlation wins
        self.launches = launches
        self.parent: dict[int, int] = {}
        self.sorted: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
        ts, dur = table.ts_ns, table.dur_ns
        for key, rows in ops.items():
            rows.sort(key=lambda r: (ts[r], -dur[r], r))
            stack: list[int] = []
            for row in rows:
                while stack and ts[stack[-1]] + dur[stack[-1]] < ts[row] + dur[row]:
                    stack.pop()
                if stack:
                    self.parent[row] = stack[-1]
                stack.append(row)
            self.sorted[key] = ([ts[r] for r in rows], rows)

    def innermost_op(self, row: int) -> int | None:
        from tracer.model.events import Cat

        table = self.table
        if Cat(table.cat[row]).is_gpu:
            row = self.launches.get(table.correlation[row], -1)
            if row < 0:
                return None
        if table.cat[row] == Cat.CPU_OP:
            return row
        found = self.sorted.get((table.pid[row], table.tid[row]))
        if found is None:
            return None
        starts, rows = found
        at = bisect.bisect_right(starts, table.ts_ns[row]) - 1
        op = rows[at] if at >= 0 else None
        end = table.ts_ns[row] + table.dur_ns[row]
        while op is not None and table.ts_ns[op] + table.dur_ns[op] < end:
            op = self.parent.get(op)
        return op

    def chain_names(self, row: int) -> set[str]:
        """The names of the CPU ops around `row` (itself included), innermost to outermost."""
        names = set()
        op = self.innermost_op(row)
        while op is not None:
            names.add(self.table.name[op])
            op = self.parent.get(op)
        return names

    def truth_of(self, row: int) -> tuple[str, int] | None:
        op = self.innermost_op(row)
        while op is not None:
            found = self.truth.get(self.table.ext_id[op])
            if found is not None:
                return found
            op = self.parent.get(op)
        return None


ADDED = (  # the Score counters that add up across traces
    "rows", "total_ns", "truth_ns", "untruthed_rows", "answered_ns", "right_ns", "rank1_ns", "top3_ns",
    "rank1_copy_ns", "same_as_callfrom_ns", "callfrom_answered_ns",
)  # fmt: skip
CAST_OPS = frozenset(
    {"aten::_to_copy", "aten::copy_"}
)  # `--rows casts`: a cast or copy in the row's op chain


@dataclass
class Bucket:
    answered_ns: int = 0
    wrong_ns: int = 0
    wrong_origins: set[tuple[str, int]] = field(default_factory=set)  # (trace, origin id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "answered_ns": self.answered_ns,
            "wrong_ns": self.wrong_ns,
            "wrong_origins": len(self.wrong_origins),
        }


@dataclass
class WrongAnswer:
    """One origin's wrong answer: what it said, what ran, how sure it was."""

    trace: str
    group: str
    said: str
    truth: str
    confidence: float
    evidence: tuple[str, ...]
    time_ns: int = 0
    rows: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__, evidence=list(self.evidence))


@dataclass
class Score:
    """One mode's figures for a set of rows (a trace, a group, a family)."""

    rows: int = 0
    total_ns: int = 0
    truth_ns: int = 0  # rows whose outermost op has a truth
    untruthed_rows: int = 0
    answered_ns: int = 0  # truth rows whose origin names a line
    right_ns: int = 0
    rank1_ns: int = 0  # no-stack mode: the truth is the origin's line / in its top 3
    top3_ns: int = 0
    rank1_copy_ns: int = 0  # no-stack mode: the origin's line is the truth or the same line of a copy of it
    # stack mode on a CallFrom trace: time where the join (CallFrom ignored) names the line the join
    # with CallFrom names, of the time the latter names one (a truth-free check any 2.14 trace allows)
    same_as_callfrom_ns: int = 0
    callfrom_answered_ns: int = 0
    answers: dict[int, str] = field(default_factory=dict, repr=False)  # row -> location (not saved)
    buckets: dict[str, Bucket] = field(default_factory=lambda: {b: Bucket() for b in BUCKETS})
    wrong: list[WrongAnswer] = field(default_factory=list)

    @property
    def coverage(self) -> float | None:
        return self.answered_ns / self.truth_ns if self.truth_ns else None

    @property
    def accuracy(self) -> float | None:
        return self.right_ns / self.answered_ns if self.answered_ns else None

    @property
    def truth_share(self) -> float | None:
        return self.truth_ns / self.total_ns if self.total_ns else None

    @property
    def same_as_callfrom(self) -> float | None:
        return self.same_as_callfrom_ns / self.callfrom_answered_ns if self.callfrom_answered_ns else None

    @property
    def rank1(self) -> float | None:
        return self.rank1_ns / self.truth_ns if self.truth_ns else None

    @property
    def top3(self) -> float | None:
        return self.top3_ns / self.truth_ns if self.truth_ns else None

    @property
    def rank1_copy(self) -> float | None:
        return self.rank1_copy_ns / self.truth_ns if self.truth_ns else None

    def add(self, other: Score) -> None:
        for name in ADDED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name, bucket in other.buckets.items():
            mine = self.buckets[name]
            mine.answered_ns += bucket.answered_ns
            mine.wrong_ns += bucket.wrong_ns
            mine.wrong_origins |= bucket.wrong_origins
        self.wrong.extend(other.wrong)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "total_ns": self.total_ns,
            "truth_ns": self.truth_ns,
            "untruthed_rows": self.untruthed_rows,
            "truth_share": self.truth_share,
            "coverage": self.coverage,
            "accuracy": self.accuracy,
            "rank1": self.rank1,
            "same_as_callfrom": self.same_as_callfrom,
            "top3": self.top3,
            "rank1_copy": self.rank1_copy,
            "buckets": {name: bucket.to_dict() for name, bucket in self.buckets.items()},
            "wrong_at_0.9": [w.to_dict() for w in self.wrong if w.confidence >= 0.9],
        }


@dataclass
class TraceResult:
    trace: CorpusTrace
    scores: dict[str, Score]  # by mode
    stale: list[str]
    truth_share_recorded: float | None
    callfrom_agreement: float | None


class SourceCopies:
    """Copies of functions under source folders (`tracer.join.copies`), named as origins name files."""

    def __init__(self, dirs: Sequence[Path]) -> None:
        from tracer.join.copies import FunctionCopies
        from tracer.join.source_lines import read_source_text
        from tracer.static.files import discover

        # the files and their names as the stackless ranking finds them under --source
        files = discover(list(dirs)) if dirs else []
        self._names = [found.relative for found in files]
        self._copies = FunctionCopies(
            (found.relative, lambda found=found: read_source_text(found.absolute) or "") for found in files
        )
        self._resolved: dict[str, str | None] = {}

    def is_copy(self, location: str, truth: tuple[str, int]) -> bool:
        """`location` is the truth's line in a copy of the truth's function."""
        parsed = parse_location(location)
        name = self._name(truth[0])
        if parsed is None or name is None:
            return False
        return any(
            line == parsed[1] and same_file(file, parsed[0])
            for file, line, _ in self._copies.same_line(name, truth[1])
        )

    def _name(self, file: str) -> str | None:
        if file not in self._resolved:
            self._resolved[file] = next((n for n in self._names if same_file(n, file)), None)
        return self._resolved[file]


def _ranked(origin) -> list[str]:
    first = origin.location if origin.file is not None and origin.line is not None else None
    ranked = [first] if first else []
    ranked += [c for c in origin.candidates if c != first]
    return ranked


def _matches(location: str, truth: tuple[str, int]) -> bool:
    parsed = parse_location(location)
    return parsed is not None and parsed[1] == truth[1] and same_file(parsed[0], truth[0])


def score_attributions(
    attributions,
    truth: dict[int, tuple[str, int]],
    trace: CorpusTrace,
    *,
    ranked: bool,
    rows: str = "all",
    copies: SourceCopies | None = None,
) -> Score:
    """Score one join result: each row against the truth of its outermost op.

    `rows`: "all", or "casts" (only rows with ``aten::_to_copy``/``aten::copy_`` in their op chain).
    `copies`: the source's copies of functions, for no-stack mode's "rank 1 or a copy of it".
    """
    table = attributions.trace.events
    lookup = TruthLookup(table, truth)
    score = Score()
    wrong: dict[tuple[str, str, float], WrongAnswer] = {}  # (said, truth, confidence): origins merged
    for row, origin_id in zip(attributions.gpu_rows, attributions.origin_ids):
        if rows == "casts" and not lookup.chain_names(row) & CAST_OPS:
            continue
        weight = table.dur_ns[row]
        score.rows += 1
        score.total_ns += weight
        true = lookup.truth_of(row)
        if true is None:
            score.untruthed_rows += 1
            continue
        score.truth_ns += weight
        origin = attributions.origins[origin_id]
        if ranked:
            locations = _ranked(origin)
            if locations and _matches(locations[0], true):
                score.rank1_ns += weight
                score.rank1_copy_ns += weight
            elif locations and copies is not None and copies.is_copy(locations[0], true):
                score.rank1_copy_ns += weight
            if any(_matches(loc, true) for loc in locations[:3]):
                score.top3_ns += weight
        if origin.file is None or origin.line is None:
            continue
        score.answered_ns += weight
        score.answers[row] = origin.location
        bucket = score.buckets[bucket_of(origin.confidence)]
        bucket.answered_ns += weight
        if same_file(origin.file, true[0]) and origin.line == true[1]:
            score.right_ns += weight
            continue
        bucket.wrong_ns += weight
        bucket.wrong_origins.add((trace.name, origin_id))
        key = (origin.location, f"{true[0]}:{true[1]}", origin.confidence)
        answer = wrong.get(key)
        if answer is None:
            answer = wrong[key] = WrongAnswer(
                trace.name, trace.group, origin.location, key[1], origin.confidence, tuple(origin.evidence)
            )
        answer.time_ns += weight
        answer.rows += 1
    score.wrong = sorted(wrong.values(), key=lambda w: -w.time_ns)
    return score


def score_trace(
    trace: CorpusTrace,
    modes: Sequence[str] = DEFAULT_MODES,
    *,
    rows: str = "all",
    scratch: Path | None = None,
) -> TraceResult:
    """Run the join on one corpus trace in each mode and score it (`rows`: see `score_attributions`)."""
    from tracer.join import attribute, sites_for_trace, trace_source_files
    from tracer.load import load_trace
    from tracer.static import scan

    document = trace.truth_document()
    roots = resolve_roots(document.get("source_roots", ["repo:"]))
    truth = {int(ext): loc for ext, text in document["truth"].items() if (loc := parse_location(text))}
    loaded = load_trace(trace.trace_path)
    sites = sites_for_trace(loaded, roots)
    scores: dict[str, Score] = {}
    if "stack" in modes:
        result = attribute(loaded, sites, source_roots=roots, use_call_from=False)
        scores["stack"] = score_attributions(result, truth, trace, ranked=False, rows=rows)
    if "callfrom" in modes and loaded.meta.has_call_from:
        result = attribute(loaded, sites, source_roots=roots, use_call_from=True)
        scores["callfrom"] = score_attributions(result, truth, trace, ranked=False, rows=rows)
    dirs = source_dirs(document, roots)
    architectures = trace_architectures(document, dirs) if "named" in modes else ()
    if "nostack" in modes or architectures:
        files = trace_source_files(loaded, roots)
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            bare = load_trace(strip_stacks(trace.trace_path, Path(tmp)))
        bare_sites = list(scan(files).sites) if files else []
        # nostack: the trace and --source alone; named: --config's architectures too (the model's class)
        runs: dict[str, tuple[str, ...]] = {"nostack": ()} if "nostack" in modes else {}
        if architectures:
            runs["named"] = architectures
        for mode, named in runs.items():
            result = attribute(bare, bare_sites, source_roots=dirs, use_call_from=False, architectures=named)
            scores[mode] = score_attributions(
                result, truth, trace, ranked=True, rows=rows, copies=SourceCopies(dirs)
            )
    if "stack" in scores and "callfrom" in scores:
        stack, callfrom = scores["stack"], scores["callfrom"]
        for row, location in callfrom.answers.items():
            weight = loaded.events.dur_ns[row]
            stack.callfrom_answered_ns += weight
            if stack.answers.get(row) == location:
                stack.same_as_callfrom_ns += weight
    report = document.get("report", {})
    return TraceResult(
        trace,
        scores,
        stale_sources(document, roots),
        report.get("truth_time_share"),
        report.get("callfrom_agreement"),
    )


def default_workers() -> int:
    return max(1, min(4, (os.cpu_count() or 1) // 2))
