"""Damaged or stale records beside a compiled trace: the kernel still gets its lines from the next
source of evidence, at a confidence below 0.9, with a line of evidence naming what was not used."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.compiled.scoring import FIXTURES
from tracer.api import attribute_trace
from tracer.cli import main
from tracer.join.fused_lines import KERNEL_NAME

CASE = "fused_cast_silu"
KERNEL = "triton_poi_fused__to_copy_mul_silu_0"
MODULES = sorted((FIXTURES / "generated" / CASE).glob("c*.py"))


def _truncated_log(into: Path) -> None:
    (into / "torch_trace.log.gz").write_bytes((FIXTURES / "torch_trace.log.gz").read_bytes()[:5000])


def _garbage_log(into: Path) -> None:
    (into / "torch_trace.log.gz").write_bytes(gzip.compress(b'{"not a structured trace'))


def _stale_modules(into: Path) -> None:  # another compile's module under this one's name
    other = next((FIXTURES / "generated" / "mlp").glob("c*.py"))
    (into / "generated").mkdir()
    for module in MODULES:
        shutil.copy(other, into / "generated" / module.name)


def _binary_modules(into: Path) -> None:
    (into / "generated").mkdir()
    for module in MODULES:
        (into / "generated" / module.name).write_bytes(bytes(range(256)) * 8)


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (_truncated_log, "torch_trace.log.gz is damaged (EOFError"),
        (_garbage_log, "torch_trace.log.gz beside the trace is not a structured trace"),
        (_stale_modules, "makes no launch of this kernel (stale, or another compile's): not used"),
        (_binary_modules, "launches nothing (not an Inductor-generated module?): not used"),
    ],
)
def test_a_damaged_record_lowers_the_confidence_and_says_why(tmp_path, damage, said):
    shutil.copy(FIXTURES / f"{CASE}.json.gz", tmp_path)
    damage(tmp_path)
    attributions = attribute_trace(tmp_path / f"{CASE}.json.gz", source=[FIXTURES])
    table = attributions.trace.events
    [origin] = {
        attributions.origins[o]
        for r, o in zip(attributions.gpu_rows, attributions.origin_ids)
        if table.name[r] == KERNEL
    }
    assert [f.line for f in origin.fused] == [101, 102, 103]  # the kernel's name, placed on the source
    assert origin.compiled.provenance == KERNEL_NAME and origin.confidence < 0.9
    assert any(said in line for line in origin.evidence), origin.evidence


def test_the_cli_explains_a_trace_with_damaged_records_without_a_traceback(tmp_path):
    shutil.copy(FIXTURES / f"{CASE}.json.gz", tmp_path)
    _truncated_log(tmp_path)
    _binary_modules(tmp_path)
    done = CliRunner().invoke(main, ["explain", str(tmp_path / f"{CASE}.json.gz"), "--source", str(FIXTURES)])
    assert done.exit_code == 0 and "Traceback" not in done.output
    assert KERNEL in done.output
