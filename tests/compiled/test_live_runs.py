"""Real torch.compile runs here (Inductor's C++ backend): `kerneltrace profile` turns on Inductor's
provenance, keeps its records beside the trace, and the trace is explained after Inductor's cache is
gone (as on another machine); the SGLang plugin turns the same switches on."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracer.api import attribute_trace
from tracer.join.fused_lines import KERNEL_NAME, PROVENANCE

REPO = Path(__file__).resolve().parents[2]
MODEL = textwrap.dedent(
    """\
    import torch


    def fused(x, w):
        y = x.to(torch.float32) * w  # cast and multiply
        z = torch.nn.functional.silu(y)
        return z.to(torch.bfloat16)


    class Model:
        def __init__(self):
            self.compiled = torch.compile(fused)
            self.x = torch.randn(256, 1024, dtype=torch.bfloat16)
            self.w = torch.randn(1024)

        def step(self):
            return self.compiled(self.x, self.w)
    """
)
RUN = textwrap.dedent(
    """\
    import sys

    from compiled_model import Model

    model = Model()
    for _ in range(int(sys.argv[1])):
        model.step()
    """
)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> Path:
    """`kerneltrace profile --with-stack` of the compiled model in a fresh process, with its own
    Inductor cache, removed afterwards (the trace is explained as on another machine)."""
    tmp_path = tmp_path_factory.mktemp("live")
    app = tmp_path / "app"
    app.mkdir()
    (app / "compiled_model.py").write_text(MODEL)
    (app / "run_compiled.py").write_text(RUN)
    cache = tmp_path / "torchinductor_kt"
    env = {k: v for k, v in os.environ.items() if k != "TORCH_TRACE"}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(cache), PYTHONPATH=os.pathsep.join([str(REPO), str(app)]))
    out = tmp_path / "out" / "t.json.gz"
    command = [sys.executable, "-c", "from tracer.cli import main; main()", "profile", "--with-stack"]
    command += ["--step-function", "compiled_model.Model.step", "--steps", "2", "-o", str(out)]
    command += ["--", "python", "run_compiled.py", "4"]
    done = subprocess.run(command, check=False, cwd=app, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.rmtree(cache)
    return out


def _copy(trace: Path, into: Path, *kept: str) -> Path:
    """The trace alone in `into`, with the kept records named (``torch_trace``, ``generated``)."""
    into.mkdir()
    shutil.copy(trace, into)
    if "torch_trace" in kept:
        shutil.copy(trace.with_name("t.torch_trace.log.gz"), into)
    if "generated" in kept:
        shutil.copytree(trace.with_name("t.generated"), into / "t.generated")
    return into / trace.name


def _without_stacks(trace: Path) -> None:
    """The trace as `profile` without --with-stack writes it: no Python frames."""
    data = json.loads(gzip.decompress(trace.read_bytes()))
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") != "python_function"]
    trace.write_bytes(gzip.compress(json.dumps(data).encode()))


def _kernel_origin(trace: Path, source: list[Path]):
    attributions = attribute_trace(trace, source=source)
    table = attributions.trace.events
    [origin] = {
        attributions.origins[o]
        for r, o in zip(attributions.gpu_rows, attributions.origin_ids)
        if table.name[r] == "graph_0_cpp_fused__to_copy_mul_silu_0"
    }
    return origin


@pytest.mark.slow
def test_profile_keeps_inductors_records_beside_the_trace(profiled):
    kept = profiled.with_name("t.torch_trace.log.gz")
    assert kept.is_file() and kept.stat().st_size < 200_000
    assert len(list(profiled.with_name("t.generated").glob("c*.py"))) == 1


@pytest.mark.slow
def test_without_stacks_the_kept_records_name_the_lines_and_the_region(profiled, tmp_path):
    trace = _copy(profiled, tmp_path / "nostack", "torch_trace")
    _without_stacks(trace)
    origin = _kernel_origin(trace, [])
    assert [(Path(f.file).name, f.line, f.ops) for f in origin.fused] == [
        ("compiled_model.py", 5, ("to", "mul")),
        ("compiled_model.py", 6, ("silu",)),
        ("compiled_model.py", 7, ("to",)),
    ]
    region = origin.compiled
    assert region.provenance == PROVENANCE and region.function == "fused" and region.def_line == 4
    assert origin.confidence == 1.0
    # no frames: the `## Call CompiledFxGraph <key> ##` range's key found the graph in the kept records
    assert region.graph.endswith(".py") and "torchinductor_kt" in region.graph
    assert (Path(region.call_file).name, region.call_line, region.call_at_compile) == (
        "run_compiled.py",
        7,
        True,
    )


@pytest.mark.slow
def test_with_stacks_the_generated_module_alone_is_enough(profiled, tmp_path):
    trace = _copy(profiled, tmp_path / "module", "generated")
    origin = _kernel_origin(trace, [profiled.parents[1] / "app"])
    # C++ kernels carry no source-node comments: the ATen ops the kernel's name spells are placed
    assert [(f.line, f.ops) for f in origin.fused] == [
        (5, ("_to_copy", "mul")),
        (6, ("silu",)),
        (7, ("_to_copy",)),
    ]
    assert origin.compiled.provenance == KERNEL_NAME and origin.confidence < 0.9
    assert origin.compiled.call_line == 17 and origin.compiled.call_function == "step"


@pytest.mark.slow
def test_the_sglang_plugin_turns_on_inductors_provenance(tmp_path):
    """The switches and the structured trace's directory (that a compile then writes the provenance
    there is the profile test's: the same `record_provenance`)."""
    script = textwrap.dedent(
        """\
        import os
        import torch._logging._internal as internal
        import tracer.plugins.sglang as plugin
        from torch._inductor import config

        os.environ["KERNELTRACE_INDUCTOR"] = "0"
        print(plugin.record_inductor_provenance())
        del os.environ["KERNELTRACE_INDUCTOR"]
        print(plugin.record_inductor_provenance())
        print(config.trace.provenance_tracking_level, config.cpp.enable_kernel_profile)
        print(internal.LOG_TRACE_HANDLER.root_dir)
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_TRACE", "KERNELTRACE_INDUCTOR")}
    env.update(SGLANG_TORCH_PROFILER_DIR=str(tmp_path), PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    off, said, switches, directory = done.stdout.splitlines()[:4]
    assert off == "Inductor provenance off"
    assert "trace.provenance_tracking_level=1" in said and str(tmp_path / "torch_trace") in said
    assert switches == "1 True" and directory == str(tmp_path / "torch_trace")
