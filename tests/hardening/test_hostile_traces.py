"""Each kind of damaged trace, made from a REAL trace, with the outcome it must have.

Results where the trace still says something (wrong types are read as absent, with a note); one-line
`InputError`s naming the file where it does not; never a traceback, never a hang.
"""

from __future__ import annotations

import copy
import gzip
import random
from pathlib import Path

import pytest
import trace_fuzz
from trace_fuzz import run_cli, time_bound, write_trace

from tracer.api import explain_trace
from tracer.errors import InputError
from tracer.load import load_trace
from tracer.model.events import Cat

COPY_KERNEL = "unrolled_elementwise_kernel<direct_copy_kernel_cuda>"  # the FP8->BF16 cast


def _summary(analysis) -> list[tuple[str, str, int, int]]:
    return [(f.kernel, f.origin.location, f.calls, f.total_ns) for f in analysis.findings]


def _one_line_error(path: Path, match: str) -> InputError:
    with pytest.raises(InputError) as caught, time_bound(60):
        explain_trace(path)
    text = str(caught.value)
    assert "\n" not in text and text.startswith(f"{path}: ")
    assert match in caught.value.problem
    return caught.value


@pytest.fixture
def cudagraph(cudagraph_document: dict) -> dict:
    """A fresh copy of the real CUDA-graph trace to damage."""
    return copy.deepcopy(cudagraph_document)


@pytest.fixture(scope="module")
def cudagraph_analysis(cudagraph_document: dict, tmp_path_factory: pytest.TempPathFactory):
    return explain_trace(write_trace(cudagraph_document, tmp_path_factory.mktemp("base") / "base.json"))


def test_truncated_and_corrupt_gzip_of_a_real_trace(tmp_path: Path, own_gpu_traces: Path) -> None:
    packed = (own_gpu_traces / "cudagraph_decode_stack.json.gz").read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(packed[: len(packed) // 2])
    _one_line_error(tmp_path / "cut.json.gz", "truncated gzip")
    flipped = bytearray(packed)
    for at in range(1000, 1100):
        flipped[at] ^= 0x55
    (tmp_path / "flipped.json.gz").write_bytes(bytes(flipped))
    _one_line_error(tmp_path / "flipped.json.gz", "corrupt gzip data")
    (tmp_path / "crc.json.gz").write_bytes(packed[:-8] + bytes(4) + packed[-4:])
    _one_line_error(tmp_path / "crc.json.gz", "corrupt gzip data")
    plain = gzip.decompress(packed)
    (tmp_path / "cut.json").write_bytes(plain[: len(plain) // 3])
    _one_line_error(tmp_path / "cut.json", "truncated JSON")


def test_the_cli_prints_one_line_and_exits_2_never_a_traceback(tmp_path: Path, own_gpu_traces: Path) -> None:
    packed = (own_gpu_traces / "cudagraph_decode_stack.json.gz").read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(packed[:5000])
    (tmp_path / "deep.json").write_text('{"traceEvents": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    escapes = "\x1b]8;;http:evil\x07\x1b[2J"  # a file name can hold terminal escapes too (not /)
    (tmp_path / f"evil{escapes}.json").write_bytes(packed[:100])
    for name in ("cut.json.gz", "deep.json", "x" * 300 + ".json", f"evil{escapes}.json"):
        done = run_cli("explain", str(tmp_path / name), text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and "\x1b" not in done.stderr and "\x07" not in done.stderr
        shown = f"kerneltrace: error: {tmp_path / name}".replace(escapes, "")
        assert done.stderr.count("\n") == 1 and done.stderr.startswith(shown)


def test_deep_nesting_is_one_line_or_read_as_absent(
    tmp_path: Path, cudagraph: dict, cudagraph_analysis
) -> None:
    # Past orjson's parse limit (1024 levels): the file is refused, in one line.
    document = copy.deepcopy(cudagraph)
    document["traceEvents"][5]["args"]["Input Dims"] = trace_fuzz.nested_value(100_000, random.Random(0))
    error = _one_line_error(write_trace(document, tmp_path / "deeper.json"), "not JSON")
    assert "depth limit exceeded" in error.problem
    # Deeper than orjson writes (255) but within what it reads: the value is dropped, the rest explained.
    kernel_op = next(
        e for e in cudagraph["traceEvents"] if e.get("cat") == "cpu_op" and e.get("name") == "aten::copy_"
    )
    kernel_op["args"]["Input Dims"] = "@@deep:600:list@@"
    analysis = explain_trace(write_trace(cudagraph, tmp_path / "deep.json"))
    assert [f.kernel for f in analysis.findings] == [f.kernel for f in cudagraph_analysis.findings]
    assert any("wrong type or range" in note for note in analysis.notes)


def test_wrong_types_in_fields_are_read_as_absent_with_a_note(tmp_path: Path, cudagraph: dict) -> None:
    kernels = [e for e in cudagraph["traceEvents"] if e.get("cat") == "kernel"]
    ops = [e for e in cudagraph["traceEvents"] if e.get("cat") == "cpu_op"]
    for event in kernels[::2]:
        event["ts"] = str(event["ts"])  # ts as a string
    for event in ops[::3]:
        event["args"] = list(event.get("args", {}).items())  # args as a list
    for event in ops[1::3]:
        event["pid"], event["tid"] = {"pid": 1}, [1, 2]  # ids as objects
    for event in kernels[1::4]:
        event["args"]["correlation"] = {"not": "an id"}
    for event in kernels[3::4]:
        event["dur"] = -5.0  # an end before the start
    with time_bound(60):
        trace = load_trace(write_trace(cudagraph, tmp_path / "types.json"))
        analysis = explain_trace(tmp_path / "types.json")
    skipped = len(kernels[::2])
    assert f"skipped {skipped} duration events without a usable timestamp" in " ".join(trace.notes)
    assert any("wrong type or range" in note for note in trace.notes)
    assert len(trace.events.rows(Cat.KERNEL)) == len(kernels) - skipped
    assert min(trace.events.dur_ns) >= 0
    assert analysis.findings and analysis.findings[0].kernel_short == COPY_KERNEL


def test_huge_and_out_of_range_numbers(tmp_path: Path, cudagraph: dict) -> None:
    events = cudagraph["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    kernels[0]["dur"] = 1e300
    kernels[1]["ts"] = -1e18
    kernels[2]["args"]["correlation"] = 2**64 - 1  # parsed as an int, beyond int64
    kernels[3]["pid"] = 2**64 - 1
    frames = [e for e in events if e.get("cat") == "python_function"]
    frames[0]["args"]["Python id"] = 10**30  # parsed as a float
    frames[1]["name"] = "x.py(" + "9" * 5000 + "): f"  # int() refuses 5,000 digits
    cudagraph["baseTimeNanoseconds"] = 1e300
    with time_bound(60):
        analysis = explain_trace(write_trace(cudagraph, tmp_path / "numbers.json"))
    assert analysis.findings[0].kernel_short == COPY_KERNEL
    import orjson

    orjson.dumps(analysis.to_dict())  # every number still fits JSON's int64 / double


def test_nan_and_infinity_are_not_json(tmp_path: Path, cudagraph: dict) -> None:
    next(e for e in cudagraph["traceEvents"] if e.get("cat") == "kernel")["dur"] = float("nan")
    _one_line_error(write_trace(cudagraph, tmp_path / "nan.json"), "not JSON")


def test_events_out_of_order_give_the_same_findings(
    tmp_path: Path, cudagraph: dict, cudagraph_analysis
) -> None:
    random.Random(3).shuffle(cudagraph["traceEvents"])
    shuffled = explain_trace(write_trace(cudagraph, tmp_path / "shuffled.json"))
    assert _summary(shuffled) == _summary(cudagraph_analysis)


def test_colliding_ids_and_python_parent_cycles_end(tmp_path: Path, cudagraph: dict) -> None:
    frames = [e for e in cudagraph["traceEvents"] if e.get("cat") == "python_function"]
    for index, frame in enumerate(frames):  # every frame's parent is the next one: one big cycle
        frame["args"]["Python parent id"] = frames[(index + 1) % len(frames)]["args"]["Python id"]
    frames[0]["args"]["Python parent id"] = frames[0]["args"]["Python id"]  # and a self-loop
    for event in cudagraph["traceEvents"]:
        args = event.get("args")
        if isinstance(args, dict):
            for key in ("External id", "correlation"):
                if key in args:
                    args[key] = 7  # every launch, kernel and op share one id
    with time_bound(60):
        analysis = explain_trace(write_trace(cudagraph, tmp_path / "collide.json"))
    assert analysis.findings[0].kernel_short == COPY_KERNEL


def test_kernels_whose_launch_is_missing_are_still_ranked(
    tmp_path: Path, cudagraph: dict, cudagraph_analysis
) -> None:
    cudagraph["traceEvents"] = [
        e for e in cudagraph["traceEvents"] if e.get("cat") not in ("cuda_runtime", "cuda_driver")
    ]
    gpu_ns = sum(
        round(e["dur"] * 1000) for e in cudagraph["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy")
    )
    analysis = explain_trace(write_trace(cudagraph, tmp_path / "nolaunch.json"))
    # Every kernel's time is still counted; the replayed ones lost their origin with their launch.
    assert analysis.total_ns == sum(f.total_ns for f in analysis.findings) == gpu_ns
    top = analysis.findings[0]
    assert (top.kernel_short, top.origin.location, top.calls) == (COPY_KERNEL, "?", 32)
    assert cudagraph_analysis.findings[0].origin.location.startswith("examples/glm5_kv_cast/model.py")


def test_a_five_megabyte_kernel_name_is_cut_not_a_hang(
    tmp_path: Path, cudagraph: dict, cudagraph_analysis
) -> None:
    hot = cudagraph_analysis.findings[0].kernel
    for event in cudagraph["traceEvents"]:
        if event.get("name") == hot:
            event["name"] = "void huge_kernel<" + "K" * 5_000_000 + ">()"
    path = write_trace(cudagraph, tmp_path / "huge.json")
    with time_bound(30):  # before names were cut, regexes over them took 27 s here
        outcome = trace_fuzz.run_pipeline(path)
        analysis = explain_trace(path)
    assert outcome.kind == "result", outcome.detail
    assert len(analysis.findings[0].kernel) <= 16_384
    assert analysis.findings[0].kernel.endswith("more characters]")


def test_worker_processes_read_a_damaged_trace_like_one_process(
    tmp_path: Path, cudagraph: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(5)
    for mutation in ("wrong_event_field", "wrong_arg_field", "missing_args", "hostile_names"):
        trace_fuzz.DOCUMENT_MUTATIONS[mutation](cudagraph, rnd)
    path = write_trace(cudagraph, tmp_path / "damaged.json")
    one = load_trace(path)
    monkeypatch.setenv("KERNELTRACE_LOAD_WORKERS", "2")
    two = load_trace(path)
    assert list(one.events.name) == list(two.events.name)
    assert list(one.events.ts_ns) == list(two.events.ts_ns) and one.events.args == two.events.args
    assert one.notes == two.notes


def _load_row_count(path: str) -> int:
    return len(load_trace(path).events)


def test_loading_inside_a_daemonic_pool_worker(tmp_path: Path, cudagraph: dict, monkeypatch) -> None:
    """A multiprocessing.Pool worker may not start processes: the loader parses in-process there
    (before, a big trace loaded from a pool worker died on "daemonic processes are not allowed to
    have children")."""
    import multiprocessing

    path = write_trace(cudagraph, tmp_path / "trace.json")
    monkeypatch.setenv("KERNELTRACE_LOAD_WORKERS", "2")
    with multiprocessing.get_context("fork").Pool(1) as pool:
        rows = pool.apply(_load_row_count, (str(path),))
    assert rows == len(load_trace(path).events) > 0


def test_garbage_after_the_gzip_member_is_ignored_and_not_mistaken_for_size(
    tmp_path: Path, own_gpu_traces: Path
) -> None:
    from tracer.load.memory import json_size

    packed = (own_gpu_traces / "cudagraph_decode_stack.json.gz").read_bytes()
    path = tmp_path / "trailing.json.gz"
    path.write_bytes(packed + b"\xff\xff\xff\xff garbage \xff\xff\xff\x7f")  # trailer read as ~2 GiB
    assert json_size(path, compressed=True) < 20 * len(packed)
    assert len(load_trace(path).events) == len(
        load_trace(own_gpu_traces / "cudagraph_decode_stack.json.gz").events
    )
