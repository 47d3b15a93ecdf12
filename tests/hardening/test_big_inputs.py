"""A trace bigger than memory allows is refused before parsing, with the way forward; --steps and
--window load only part of it, dropping the rest while parsing, with the same findings for that part."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from trace_fuzz import run_cli

from tracer.api import attribute_trace, explain_trace
from tracer.errors import InputError
from tracer.load import TraceWindow, load_trace
from tracer.load.memory import MEMORY_LIMIT_ENV, estimated_peak, json_size
from tracer.model.events import NONE, Cat


@pytest.fixture(scope="module")
def glm5(own_gpu_traces: Path) -> Path:
    """The founding case on an H200: 2 decode steps (ProfilerStep#1, #2) of 78 layers, 29.7 MB of JSON."""
    return own_gpu_traces / "glm5_cast_whole_stack.json.gz"


@pytest.fixture(scope="module")
def step2_analysis(glm5: Path, repo_root: Path):
    return explain_trace(glm5, source=(repo_root,), window=TraceWindow.parse(steps="2"))


def test_gzip_size_is_read_from_the_trailer(glm5: Path) -> None:
    assert json_size(glm5, compressed=True) == len(gzip.decompress(glm5.read_bytes()))


def test_a_trace_too_big_for_memory_is_refused_with_the_way_forward(
    glm5: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MEMORY_LIMIT_ENV, str(200 << 20))  # as if 200 MB were available
    with pytest.raises(InputError) as caught:
        explain_trace(glm5)
    message = str(caught.value)
    assert message.startswith(f"{glm5}: too big for this machine's memory")
    assert "--steps N-M" in message and "--window START_MS:END_MS" in message and MEMORY_LIMIT_ENV in message
    assert "\n" not in message
    done = run_cli("explain", str(glm5), text=True, timeout=120)
    assert done.returncode == 2 and done.stderr == f"kerneltrace: error: {message}\n"


def test_a_window_that_fits_is_loaded_where_the_whole_trace_is_refused(
    glm5: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = json_size(glm5, compressed=True)
    # Between what one of the two steps needs and what the whole trace needs.
    monkeypatch.setenv(MEMORY_LIMIT_ENV, str((estimated_peak(size, 0.75) + estimated_peak(size)) // 2))
    with pytest.raises(InputError, match="too big"):
        load_trace(glm5)
    trace = load_trace(glm5, TraceWindow.parse(steps="2"))
    assert any(note.startswith("loaded only ProfilerStep#2: ") for note in trace.notes)
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "lots")
    with pytest.raises(InputError, match=f"{MEMORY_LIMIT_ENV}: 'lots' is not a number of bytes"):
        load_trace(glm5)


def test_step_window_gives_the_full_traces_findings_for_that_step(
    glm5: Path, repo_root: Path, step2_analysis
) -> None:
    """Reference: the FULL trace's attribution, restricted to the kernels launched inside
    ProfilerStep#2 (by their launch's time), grouped by kernel and origin."""
    full = attribute_trace(glm5, source=(repo_root,))
    events = full.trace.events
    start, end = next(
        (events.ts_ns[r], events.end_ns(r))
        for r in events.rows(Cat.USER_ANNOTATION)
        if events.name[r] == "ProfilerStep#2"
    )
    launch_ts = {events.correlation[r]: events.ts_ns[r] for r in events.rows(Cat.RUNTIME, Cat.DRIVER)}
    expected: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for i, row in enumerate(full.gpu_rows):
        if not Cat(events.cat[row]).is_gpu:
            continue
        op = full.op_rows[i]
        launched = (
            events.ts_ns[op] if op != NONE else launch_ts.get(events.correlation[row], events.ts_ns[row])
        )
        if start <= launched < end:
            key = (events.name[row], full.origins[full.origin_ids[i]].location)
            expected[key][0] += 1
            expected[key][1] += events.dur_ns[row]
    got = {(f.kernel, f.origin.location): [f.calls, f.total_ns] for f in step2_analysis.findings}
    assert got == dict(expected)
    top = step2_analysis.findings[0]
    assert (top.kernel_short, top.origin.location, top.calls) == (
        "unrolled_elementwise_kernel<direct_copy_kernel_cuda>",
        "examples/glm5_kv_cast/model.py:209",
        78,  # once per layer: the founding case's 78 calls/step
    )
    assert step2_analysis.steps == 1


def test_time_window_over_step_2_matches_the_step_window(glm5: Path, repo_root: Path, step2_analysis) -> None:
    document = json.loads(gzip.decompress(glm5.read_bytes()))
    first = round(min(e["ts"] for e in document["traceEvents"] if "ts" in e) * 1000)  # any event's
    events = load_trace(glm5).events
    start, end = next(
        (events.ts_ns[r], events.end_ns(r))
        for r in events.rows(Cat.USER_ANNOTATION)
        if events.name[r] == "ProfilerStep#2"
    )
    window = f"{(start - first) / 1e6:.6f}:{(end - first) / 1e6 + 0.001:.6f}"
    by_time = explain_trace(glm5, source=(repo_root,), window=TraceWindow.parse(window=window))
    summary = [(f.kernel, f.origin.location, f.calls, f.total_ns) for f in by_time.findings]
    assert summary == [(f.kernel, f.origin.location, f.calls, f.total_ns) for f in step2_analysis.findings]


def test_window_and_steps_on_the_command_line(glm5: Path) -> None:
    done = run_cli("explain", str(glm5), "--steps", "2", "--json", timeout=180)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["steps"] == 1 and data["findings"][0]["calls"] == 78
    assert any(note.startswith("loaded only ProfilerStep#2") for note in data["notes"])
    for args, problem in (
        (["--steps", "7"], "no ProfilerStep#7 in the trace (it has ProfilerStep#1..#2)"),
        (["--steps", "2-1"], "--steps: '2-1': the first step is after the last"),
        (["--window", "5:abc"], "--window: '5:abc' is not START_MS:END_MS"),
        (["--window", "1:2", "--steps", "1"], "give one of --window and --steps"),
        (["--window", "99999999:100000000"], "--window starts after the trace ends"),
    ):
        done = run_cli("explain", str(glm5), *args, text=True, timeout=120)
        assert done.returncode == 2 and problem in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_window_on_a_cpu_trace_profiled_here(cpu_stack_trace: Path) -> None:
    """3 identical steps on CPU: step 2 alone has a third of every op's calls.

    Counted per op, not per (op, origin): in about 1 trace in 12 recorded here, one step's
    `aten::empty_strided` calls split differently between two origins in the same file (the loaded
    tables are the same by either loader path), so only the per-op counts are stable."""
    full = explain_trace(cpu_stack_trace)
    step = explain_trace(cpu_stack_trace, window=TraceWindow.parse(steps="2"))
    assert full.steps == 3 and step.steps == 1

    def calls_by_op(analysis) -> Counter:
        calls: Counter = Counter()
        for finding in analysis.findings:
            calls[finding.kernel] += finding.calls
        return calls

    assert {op: count // 3 for op, count in calls_by_op(full).items()} == dict(calls_by_op(step))
    assert calls_by_op(step)["aten::copy_"] > 0
