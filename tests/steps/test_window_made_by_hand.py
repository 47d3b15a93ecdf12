"""A `TraceWindow` built by hand in Python with a bound missing (mypy found it): a one-line
`InputError` naming the trace, where it used to be a `TypeError` from comparing with None."""

from __future__ import annotations

import pytest

from tests.steps.conftest import CORPUS
from tracer.errors import InputError
from tracer.load import TraceWindow, load_trace

PROFILER_6 = CORPUS / "profilerstep_6l.json.gz"


@pytest.mark.parametrize(
    ("window", "said"),
    [
        (TraceWindow(first_step=2), "needs last_step as well as first_step=2"),
        (TraceWindow(start_ms=1.0), "needs both start_ms and end_ms"),
        (TraceWindow(), "needs both start_ms and end_ms"),
    ],
    ids=["first-step-only", "start-only", "empty"],
)
def test_a_window_missing_a_bound_is_a_user_error(window: TraceWindow, said: str) -> None:
    with pytest.raises(InputError, match=said) as raised:
        load_trace(PROFILER_6, window)
    assert raised.value.path == str(PROFILER_6)


def test_a_whole_hand_made_step_window_still_loads() -> None:
    trace = load_trace(PROFILER_6, TraceWindow(first_step=2, last_step=3))
    assert len(trace.events) > 0
