"""A real torch 2.14 trace (CallFrom on every Python frame): exact lines with no static scan at all."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from tracer.join import attribute
from tracer.load import load_trace


@pytest.fixture(scope="module")
def fixture_lines(cpu_fixtures: Path) -> dict[str, int]:
    marker = re.compile(r"# cast:(\w+)$")
    text = (cpu_fixtures / "make_callfrom_trace.py").read_text().splitlines()
    return {m[1]: n for n, line in enumerate(text, 1) if (m := marker.search(line))}


def test_callfrom_names_exact_lines(cpu_fixtures: Path, fixture_lines: dict[str, int]) -> None:
    trace = load_trace(cpu_fixtures / "callfrom_torch214.json.gz")
    assert trace.meta.has_call_from is True
    result = attribute(trace, source_roots=[cpu_fixtures])  # no sites: CallFrom alone
    table = trace.events
    by_types: dict[tuple[str, str], set[int | None]] = defaultdict(set)
    for op, origin_id in zip(result.op_rows, result.origin_ids):
        if table.name[op] == "aten::copy_":
            origin = result.origins[origin_id]
            types = table.args[op]["Input type"]
            by_types[(types[0], types[1])].add(origin.line)
            if origin.ops[0] == "aten::to":  # a .to()/.float() call (not `+ 1e-6`'s scalar copy)
                assert origin.file == "make_callfrom_trace.py"
                assert origin.confidence == 1.0 and "CallFrom names line" in origin.evidence[0]
    # Norm.forward's two .to() calls, on different lines of one function.
    assert by_types[("float", "c10::BFloat16")] >= {fixture_lines["up"], fixture_lines["float_beside_to"]}
    assert fixture_lines["down"] in by_types[("c10::BFloat16", "float")]
    assert by_types[("c10::BFloat16", "c10::Half")] == {fixture_lines["whole_pool"]}
    assert by_types[("c10::Half", "c10::BFloat16")] == {fixture_lines["store"]}
    up = next(o for o in result.origins if o.line == fixture_lines["up"])
    assert up.source == "hidden = hidden.to(torch.float32)  # cast:up"
    # CallFrom also gives every frame its executing line, module calls included.
    forward = next(
        f for f in reversed(up.frames) if f.function == "forward" and f.file == "make_callfrom_trace.py"
    )
    assert forward.call_line == fixture_lines["up"]
    linear = next(o for o in result.origins if o.ops[:2] == ("aten::linear", "aten::addmm"))
    assert linear.line == fixture_lines["up"] + 13  # h = self.proj(self.norm(x))
    assert linear.source == "h = self.proj(self.norm(x))"
