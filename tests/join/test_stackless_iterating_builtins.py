"""Without stacks, ``all(...)``, ``any(...)``, ``sum(...)``, ``min``/``max``/``sorted`` run their elements'
protocol only, not any op.

Each was a call that may run a block of its own (`runs_a_block`), so a line like transformers'
``if not all(callable(arg) for arg in mask_functions):`` (`masking_utils.and_masks`) could be said to
run whatever op a window held: the generate loop's ``torch.ones(...)`` and ``input_ids.clone(...)``
went to it (1.1% of the transformers torch 2.14 corpus's truth time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.join.package_source import line_in
from tracer.join.program import BY_ATTRIBUTE, BY_NAME, CALL, CallPoint
from tracer.join.stackless import (
    ITERATING_BUILTINS,
    SKIPPED_OP,
    STACKLESS,
    predicted_ops,
    runs_a_block,
)
from tracer.join.tokens import token_of
from tracer.model.events import Cat


def _top_level_ops(run) -> list[str]:
    """The ops `run` records at the top level, in order, by torch's own profiler (CPU)."""
    import torch

    with torch.profiler.profile() as profiler:
        run()
    tops, end = [], -1
    for event in sorted(profiler.events(), key=lambda e: (e.time_range.start, -e.time_range.end)):
        if event.time_range.start >= end:
            tops.append(event.name)
            end = event.time_range.end
    return tops


@pytest.mark.parametrize(
    ("name", "run"),
    [
        ("all", lambda x, y: all([x, y])),
        ("any", lambda x, y: any([x, y])),
        ("sum", lambda x, y: sum([x, y])),
        ("min", lambda x, y: min(x, y)),
        ("max", lambda x, y: max([x, y])),
        ("sorted", lambda x, y: sorted([y, x])),
    ],
)
def test_a_builtin_over_tensors_records_its_elements_protocol(name: str, run) -> None:
    import torch

    x, y = torch.tensor([1.0]), torch.tensor([2.0])
    recorded = _top_level_ops(lambda: run(x, y))
    point = CallPoint(1, 0, CALL, name, callee=BY_NAME)
    assert set(recorded) <= set(ITERATING_BUILTINS[name])  # nothing else ...
    assert predicted_ops(point) == ITERATING_BUILTINS[name]  # ... and what it records, predicted


@pytest.mark.parametrize("name", sorted(ITERATING_BUILTINS))
def test_a_builtin_that_iterates_runs_no_block(name: str) -> None:
    point = CallPoint(1, 0, CALL, name, callee=BY_NAME)
    assert not runs_a_block(point)
    for op in ("aten::ones", "aten::clone", "aten::copy_", "aten::linear"):
        assert STACKLESS.match(point, token_of(op, Cat.CPU_OP)) is None  # no op it cannot run
    assert STACKLESS.skip(point) < SKIPPED_OP  # over Python values it runs none


def test_torch_all_is_still_an_op() -> None:
    assert "aten::all" in predicted_ops(
        CallPoint(1, 0, CALL, "all", callee=BY_ATTRIBUTE)
    )  # torch.all(x), x.all()
    assert "aten::sum" in predicted_ops(CallPoint(1, 0, CALL, "sum", callee=BY_ATTRIBUTE))


def test_the_generate_loop_is_not_the_mask_check(nostack_scores) -> None:
    """transformers' Qwen2 generate on CPU (torch 2.14; the corpus's, its truth from CallFrom), every
    frame stripped: the generate loop's ops (``generation/utils.py``: ``unfinished_sequences =
    torch.ones(...)``, ``input_ids.clone(...)``, the check ``(model_kwargs["attention_mask"] ==
    1).all()``) went to ``and_masks``'s ``if not all(callable(arg) for arg in mask_functions):``
    (7 rows, 2.0% of the trace's truth time, on the device's run of `d45958f`); none does now."""
    import transformers

    package = Path(transformers.__file__).parent.parent
    line = line_in(
        package, "transformers/masking_utils.py", "if not all(callable(arg) for arg in mask_functions)"
    )
    score = nostack_scores("transformers/torch2.14/qwen2_generate")
    assert score.truth_ns > 0
    taken = [
        w
        for w in score.wrong
        if w.said == f"transformers/masking_utils.py:{line}" and "generation/" in w.truth
    ]
    assert not taken, [(w.truth, w.rows) for w in taken]
