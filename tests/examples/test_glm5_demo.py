"""The README's main job, end to end on CPU: the demo names the cast line, the layer invariant and the fix."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from io import StringIO

import pytest
from rich.console import Console

from examples.glm5_kv_cast.demo import run_demo
from examples.glm5_kv_cast.model import PRESETS

CAST_LINE = "examples/glm5_kv_cast/model.py:209"
FIX_LINE = "examples/glm5_kv_cast/model.py:214"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = StringIO()
    result = run_demo("cpu-small", 2, tmp_path_factory.mktemp("demo"), Console(file=out, width=200))
    return result, out.getvalue()


def test_diagnosis_names_the_whole_pool_cast_line(demo):
    result, printed = demo
    top = result.before.findings[0]
    layers = PRESETS["cpu-small"].num_hidden_layers
    assert top.origin.location == CAST_LINE
    assert top.origin.source.strip() == "self.pool.get_key_buffer(layer_id).to(q.dtype)"
    assert top.origin.rule == "KT101" and top.origin.confidence == 1.0
    assert top.origin.ops == ("aten::to", "aten::_to_copy", "aten::copy_")
    assert top.calls_per_step == layers
    assert top.invariant == f"{layers} calls/step = once per layer ({layers} layers)"
    # the whole fp8 pool (16384 tokens x 576) read, the bf16 copy written
    assert top.bytes_per_call == 16384 * 576 * (1 + 2)
    assert "then aten::index kept 256 of 16384 rows" in top.waste
    assert CAST_LINE in printed and "once per layer" in printed


def test_the_fix_removes_the_cast_and_moves_fewer_bytes(demo):
    result, _ = demo
    rows = {row.where: row for row in result.diff.origins}
    assert rows[CAST_LINE].change == "vanished"
    assert rows[FIX_LINE].change == "new"
    fixed_cast = next(
        f for f in result.after.findings if f.origin.location == FIX_LINE and f.kernel == "aten::copy_"
    )
    assert fixed_cast.bytes_per_call == 256 * 576 * (1 + 2)  # only the live rows are cast
    whole_cast = next(
        f for f in result.before.findings if f.origin.location == CAST_LINE and f.kernel == "aten::copy_"
    )
    # Bytes, not time (timings belong in bench/): the whole pool (16384 rows) against the 256 live ones.
    assert whole_cast.bytes_per_call == 16384 * 576 * (1 + 2) == 64 * fixed_cast.bytes_per_call


def test_report_and_graph_name_the_line(demo):
    result, _ = demo
    svg_text = " ".join(ET.parse(result.graph_svg).getroot().itertext())
    assert "glm5_kv_cast/model.py:209" in svg_text
    html = result.report_html.read_text()
    assert "model.py:209" in html and "get_key_buffer(layer_id).to(q.dtype)" in html
