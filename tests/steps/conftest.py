"""The step corpus (tests/fixtures/steps/truth.json): each case's trace, how to explain it, its truth."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "steps"
SHARED = REPO / "tests" / "fixtures" / "transformers"  # copies of ../shared/fixtures/gpu-traces
TRUTH = json.loads((CORPUS / "truth.json").read_text())
if (
    CORPUS / "truth_gpu.json"
).exists():  # capture_gpu_steps.py's traces, once captured on a GPU and committed
    TRUTH.update(
        {
            k: v
            for k, v in json.loads((CORPUS / "truth_gpu.json").read_text()).items()
            if not k.startswith("_")
        }
    )


@dataclass(frozen=True)
class Case:
    """One corpus entry: where its trace is, the explain arguments, and what the script that made it
    says is true (steps; calls per step of ops, kernels, op chains or marked lines)."""

    name: str
    trace: str
    explain_args: tuple[str, ...]
    steps: int | list[int]
    layers: int
    calls_per_step: dict
    truth: dict

    @property
    def is_ranks(self) -> bool:
        return self.trace.endswith("/")


def cases() -> list[Case]:
    return [
        Case(
            name,
            t["trace"],
            tuple(t.get("explain_args", ())),
            t["steps"],
            t["layers"],
            t.get("calls_per_step", {}),
            t,
        )
        for name, t in TRUTH.items()
    ]


def resolve(ref: str, tmp_dir: Path) -> Path:
    """A truth.json trace reference as a path: ``repo:`` from the repository root, ``shared:`` from
    tests/fixtures/transformers (copies of ../shared/fixtures/gpu-traces), ``derived:`` a trace with
    its ProfilerStep ranges taken out
    (written to `tmp_dir`), else the corpus folder."""
    kind, _, rest = ref.partition(":")
    if not rest:
        return CORPUS / ref
    if kind == "repo":
        return REPO / rest
    if kind == "shared":
        return SHARED / rest
    if kind == "derived":
        return without_profiler_steps(REPO / rest, tmp_dir / Path(rest).name)
    raise ValueError(ref)


def without_profiler_steps(source: Path, out: Path) -> Path:
    """The trace at `source` without its ProfilerStep#N ranges (what a trace of the same run made
    without a profiler schedule would hold): written once to `out`."""
    if not out.exists():
        data = json.loads(gzip.decompress(source.read_bytes()))
        data["traceEvents"] = [
            e for e in data["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")
        ]
        with gzip.open(out, "wt") as f:
            json.dump(data, f)
    return out


def explain_kwargs(case: Case, tmp_dir: Path) -> dict:
    """`tracer.api.explain_trace` arguments from the case's command-line arguments, and the folder
    of the scripts that made the trace as the source, except where the truth names op chains, not
    lines (SGLang's code): there a trace without stacks would rank lines, which is not what is
    checked here (tests/join and bench/accuracy.py check the ranking)."""
    chains_only = set(case.calls_per_step) == {"chains"}
    kwargs: dict = {"source": [] if chains_only else [CORPUS]}
    args = list(case.explain_args)
    while args:
        flag, value = args.pop(0), args.pop(0)
        if flag == "--layers":
            kwargs["layers"] = int(value)
        elif flag == "--capture":
            kwargs["capture"] = resolve(value, tmp_dir)
        else:
            raise ValueError(flag)
    return kwargs


def marked_line(marker: str) -> int:
    """The line of make_step_traces.py ending in ``# <marker>``."""
    lines = (CORPUS / "make_step_traces.py").read_text().splitlines()
    return next(i for i, text in enumerate(lines, start=1) if text.rstrip().endswith(f"# {marker}"))


@pytest.fixture(scope="session")
def derived_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("derived")
