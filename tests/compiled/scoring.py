"""Score the join's fused lines against a truth: the share of compiled-kernel time on the right user lines.

Compiled-kernel time: every GPU kernel (or, in a CPU trace, leaf op) whose Origin the join put in
compiled code (`Origin.compiled`). A kernel is right when the set of lines its Origin says it fused
(`Origin.fused`, or its one line) is exactly the truth's set for its launch.

Two truths: `read_truth` (a file listing, per case, each launch's lines by construction) keyed by the
launch (the kernel, or the op that launched it: ``aten::mm``), and `provenance_truth`, which reads
Inductor's kernel stack traces from the structured trace with its own few lines of parsing and
finds each kernel's launch by the order of launches in ``call`` (the i-th launching op of a run is
the i-th launch of the generated code): independent of how `tracer.join.compiled` matches them.

    PYTHONPATH=. python3 tests/compiled/scoring.py     # the README's table: each fixture, each level
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tracer.model.events import Cat
from tracer.model.origin import Attributions, Origin

_PLUMBING = ("Torch-Compiled Region", "CompiledFunction", "TorchDynamo", "AOTDispatcher", "Pregraph")
_CPP_OP = re.compile(r"^graph_\d+_(cpp_\w+)$")


@dataclass
class Score:
    right_ns: int = 0
    total_ns: int = 0
    misses: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.right_ns / self.total_ns if self.total_ns else 0.0

    def add(self, other: Score) -> None:
        self.right_ns += other.right_ns
        self.total_ns += other.total_ns
        self.misses.extend(other.misses)


def lines_of(origin: Origin) -> frozenset[tuple[str, int]]:
    """The (file name, line) pairs an Origin says its kernel came from."""
    if origin.fused:
        return frozenset((Path(f.file).name, f.line) for f in origin.fused)
    if origin.file is not None and origin.line is not None:
        return frozenset({(Path(origin.file).name, origin.line)})
    return frozenset()


def launch_key(attributions: Attributions, i: int) -> str:
    """The launch of row i: the first op below the compiled region's plumbing, or the kernel itself
    for a CUDA-graph replay."""
    table = attributions.trace.events
    origin = attributions.origins[attributions.origin_ids[i]]
    if not origin.replay:
        for op in origin.ops:
            if not op.startswith(_PLUMBING):
                match = _CPP_OP.match(op)
                return match[1] if match else op
    return table.name[attributions.gpu_rows[i]]


def compiled_rows(attributions: Attributions) -> list[int]:
    return [i for i, o in enumerate(attributions.origin_ids) if attributions.origins[o].compiled is not None]


def read_truth(path: Path) -> dict[str, dict[str, frozenset[tuple[str, int]]]]:
    """case -> launch -> lines, from a truth file (``case launch file:l1,l2``; ``#`` comments)."""
    truth: dict[str, dict[str, frozenset[tuple[str, int]]]] = defaultdict(dict)
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        case, launch, where = line.split()
        file, _, numbers = where.rpartition(":")
        truth[case][launch] = frozenset((file, int(n)) for n in numbers.split(","))
    return truth


def score(attributions: Attributions, expected) -> Score:
    """`expected(i)` -> the truth's lines for compiled row i (None: the truth has none for it)."""
    table = attributions.trace.events
    result = Score()
    for i in compiled_rows(attributions):
        row = attributions.gpu_rows[i]
        origin = attributions.origins[attributions.origin_ids[i]]
        want = expected(i)
        result.total_ns += table.dur_ns[row]
        got = lines_of(origin)
        if want is not None and got == want:
            result.right_ns += table.dur_ns[row]
        else:
            result.misses.append(f"{table.name[row]}: got {sorted(got)}, truth {sorted(want or ())}")
    return result


def score_by_launch(attributions: Attributions, truth: dict[str, frozenset]) -> Score:
    return score(attributions, lambda i: truth.get(launch_key(attributions, i)))


# -- Inductor's provenance as the truth --------------------------------------------------------------
def provenance_truth(attributions: Attributions, torch_trace: Path):
    """`expected` for `score`: each row's launch found by launch order in its run of ``call``, its
    lines the innermost frames of Inductor's kernel stack traces for that launch."""
    codes, stacks = _read_provenance(torch_trace)
    table = attributions.trace.events
    by_thread: dict[tuple[int, int], list[int]] = defaultdict(list)
    for row, cat in enumerate(table.cat):
        if cat == Cat.CPU_OP:
            by_thread[(table.pid[row], table.tid[row])].append(row)
    for rows in by_thread.values():
        rows.sort(key=lambda r: table.ts_ns[r])
    handle_of_op: dict[int, str] = {}
    for row, cat in enumerate(table.cat):
        if cat != Cat.PYTHON_FUNCTION or not table.name[row].endswith("): call"):
            continue
        module = Path(table.name[row].rsplit("(", 1)[0]).name
        handles = codes.get(module)
        if handles is None:
            continue
        names = {_op_of(h) for h in handles}
        start, end = table.ts_ns[row], table.end_ns(row)
        launches, open_until = [], -1
        for op in by_thread[(table.pid[row], table.tid[row])]:
            if start <= table.ts_ns[op] <= end and _trace_op(table.name[op]) in names:
                if table.ts_ns[op] < open_until:  # inside the previous launch (its own sub-ops)
                    continue
                launches.append(op)
                open_until = table.end_ns(op)
        for op, handle in zip(launches, handles):
            handle_of_op[op] = handle
    ops_sorted = sorted(handle_of_op, key=lambda r: table.ts_ns[r])

    def expected(i: int):
        op = attributions.op_rows[i]
        if op < 0:  # a replay: no launching op
            return None
        for launch in ops_sorted:  # the launch op at or around the kernel's op
            if launch == op or (
                (table.pid[launch], table.tid[launch]) == (table.pid[op], table.tid[op])
                and table.ts_ns[launch] <= table.ts_ns[op] <= table.end_ns(launch)
            ):
                return stacks.get(handle_of_op[launch])
        return None

    return expected


def _read_provenance(path: Path):
    """(generated module name -> its launch handles in order, handle -> innermost (file, line) set)."""
    text = gzip.decompress(path.read_bytes()).decode() if path.name.endswith(".gz") else path.read_text()
    codes: dict[str, list[str]] = {}
    stacks: dict[str, frozenset] = {}
    lines = text.split("\n")
    for k, line in enumerate(lines):
        if "] {" not in line or line.startswith("\t"):
            continue
        header = json.loads(line[line.index("] {") + 2 :])
        payload = []
        for follow in lines[k + 1 :]:
            if not follow.startswith("\t"):
                break
            payload.append(follow[1:])
        if "inductor_output_code" in header:
            module = Path(header["inductor_output_code"]["filename"]).name
            codes[module] = re.findall(r"# \[Provenance debug handles\] (\S+)", "\n".join(payload))
        elif header.get("artifact", {}).get("name") == "inductor_provenance_tracking_kernel_stack_traces":
            for handle, traces in json.loads("\n".join(payload)).items():
                inner = set()
                for trace in traces:
                    frames = re.findall(r'File "(.*?)", line (\d+)', trace)
                    if frames:
                        inner.add((Path(frames[-1][0]).name, int(frames[-1][1])))
                stacks[handle] = frozenset(inner)
    return codes, stacks


def _op_of(handle: str) -> str:
    kernel = handle.rsplit(":", 1)[0]
    if kernel.startswith("extern_kernels."):
        return "aten::" + kernel.split(".", 1)[1]
    if kernel.startswith("torch.ops."):
        parts = kernel.split(".")
        return f"{parts[2]}::{parts[3]}"
    return kernel


def _trace_op(name: str) -> str:
    match = _CPP_OP.match(name)
    return match[1] if match else name


# -- the figures ----------------------------------------------------------------------------------------
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "compiled"
H200_CASES = ("fused_cast_silu", "rmsnorm", "mlp", "kv_cast_gather", "llama_whole", "rmsnorm_cudagraphs")
CPU_CASES = ("fused_cast_silu", "rmsnorm", "mlp", "kv_cast_gather", "llama_whole")
FIXTURE_DIRS = {"h200": FIXTURES, "cpu": FIXTURES / "cpu"}
TRUTH = {
    "h200": Path(__file__).resolve().parent / "truth_h200.txt",
    "cpu": Path(__file__).resolve().parent / "truth_cpu.txt",
}
# What is left beside the trace, best first (the join picks the best it finds):
# - "provenance": the structured trace with Inductor's provenance, and the generated modules;
# - "dynamo graph": the structured trace without Inductor's provenance artifacts, and the modules;
# - "generated module": the generated modules alone (source-node names placed on the source);
# - "trace only": nothing (the kernels' names placed on the source).
LEVELS = ("provenance", "dynamo graph", "generated module", "trace only")


def llama_source(device: str) -> Path:
    """The transformers source the Llama run used (5.17.0 on the H200; the installed one on CPU)."""
    if device == "h200":
        return Path(__file__).resolve().parents[2] / "build" / "src" / "transformers-5.17.0"
    import transformers

    return Path(transformers.__file__).resolve().parents[1]


def copy_case(device: str, case: str, into: Path, level: str) -> Path:
    """The trace of `case` alone in `into`, with the records `level` leaves beside it."""
    import shutil

    source = FIXTURE_DIRS[device]
    into.mkdir(parents=True, exist_ok=True)
    shutil.copy(source / f"{case}.json.gz", into)
    if level in ("provenance", "dynamo graph", "generated module") and (source / "generated" / case).is_dir():
        shutil.copytree(source / "generated" / case, into / "generated" / case)
    if level == "provenance":
        shutil.copy(source / "torch_trace.log.gz", into)
    elif level == "dynamo graph":  # the same structured trace without Inductor's provenance artifacts
        lines, skip = [], False
        for line in gzip.decompress((source / "torch_trace.log.gz").read_bytes()).decode().split("\n"):
            if not line.startswith("\t"):
                skip = "inductor_provenance" in line
            if not skip:
                lines.append(line)
        (into / "torch_trace.log.gz").write_bytes(gzip.compress("\n".join(lines).encode()))
    return into / f"{case}.json.gz"


def score_case(device: str, case: str, workdir: Path, level: str) -> tuple[Score, Attributions]:
    """Explain `case` with what `level` leaves beside it; score it against the truth file, or, for
    llama_whole, against Inductor's provenance in the fixture's structured trace."""
    from tracer.api import attribute_trace

    trace = copy_case(device, case, workdir / level.replace(" ", "_"), level)
    roots = [FIXTURES, llama_source(device)] if case == "llama_whole" else [FIXTURES]
    attributions = attribute_trace(trace, source=roots)
    return score(attributions, expected_lines(device, case, attributions)), attributions


def expected_lines(device: str, case: str, attributions: Attributions):
    """`expected` for `score`: the truth file's lines by launch, or Inductor's provenance (llama_whole)."""
    if case == "llama_whole":
        return provenance_truth(attributions, FIXTURE_DIRS[device] / "torch_trace.log.gz")
    truth = read_truth(TRUTH[device])[case]
    return lambda i: truth.get(launch_key(attributions, i))


def confidence_check(attributions: Attributions, expected) -> tuple[int, int]:
    """(ns at confidence >= 0.9, ns of it wrong) over the compiled rows."""
    table = attributions.trace.events
    high = wrong = 0
    for i in compiled_rows(attributions):
        origin = attributions.origins[attributions.origin_ids[i]]
        if origin.confidence >= 0.9:
            dur = table.dur_ns[attributions.gpu_rows[i]]
            high += dur
            want = expected(i)
            if want is None or lines_of(origin) != want:
                wrong += dur
    return high, wrong


if __name__ == "__main__":
    import sys
    import tempfile

    markdown = "--markdown" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        print("| fixture | compiled-kernel time (us) | " + " | ".join(LEVELS) + " |")
        print("| --- | ---: | " + " | ".join("---:" for _ in LEVELS) + " |")
        passing = dict.fromkeys(LEVELS, 0)
        count = 0
        misses = []
        for device, cases in (("h200", H200_CASES), ("cpu", CPU_CASES)):
            for case in cases:
                cells, total = [], 0
                count += 1
                for level in LEVELS:
                    result, attributions = score_case(device, case, Path(tmp) / device / case, level)
                    passing[level] += result.share >= 0.95
                    total = result.total_ns
                    cells.append(f"{result.share:.1%}")
                    misses += [f"{device} {case} {level}: {m[:150]}" for m in result.misses[:2]]
                print(f"| {device} {case} | {total / 1e3:.1f} | " + " | ".join(cells) + " |")
        print(
            f"| fixtures at >= 95% (of {count}) | | "
            + " | ".join(str(passing[level]) for level in LEVELS)
            + " |"
        )
        if not markdown:
            for miss in misses:
                print("miss:", miss)
