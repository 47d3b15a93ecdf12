"""Property: any mutation of a real trace ends in a result or a one-line InputError naming the file.

The same mutations as `bench/fuzz_traces.py` (which runs 10,000+ cases), with a budget small enough
for every test run; hypothesis shrinks a failure to the fewest mutations that still break.
"""

from __future__ import annotations

import copy
import os
import random
import tempfile
from pathlib import Path

import trace_fuzz
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Any JSON value, for "wrong types in every field": scalars of every kind, nested lists and objects.
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.sampled_from(trace_fuzz.HOSTILE_TEXT),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
# The same examples on every run (a CI failure is then a change's, not a draw's); set
# KERNELTRACE_FUZZ_EXPLORE=1 to draw new ones (as bench/fuzz_traces.py does at scale).
FUZZ_SETTINGS = settings(
    max_examples=int(os.environ.get("KERNELTRACE_FUZZ_EXAMPLES", "120")),  # CI budget: ~15 s in all
    derandomize=not os.environ.get("KERNELTRACE_FUZZ_EXPLORE"),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _run(document: dict, writer: str, rnd: random.Random, options=()) -> trace_fuzz.Outcome:
    with tempfile.TemporaryDirectory() as directory:
        data = trace_fuzz.WRITERS[writer](trace_fuzz.kineto_json(document), rnd)
        path = Path(directory) / ("case.json.gz" if "gzip" in writer else "case.json")
        path.write_bytes(data)
        with trace_fuzz.time_bound(60):
            return trace_fuzz.run_pipeline(path, options)


@FUZZ_SETTINGS
@given(
    data=st.data(),
    mutations=st.lists(st.sampled_from(sorted(trace_fuzz.DOCUMENT_MUTATIONS)), max_size=3),
    writer=st.sampled_from(sorted(trace_fuzz.WRITERS)),
    rnd=st.randoms(use_true_random=False),
)
def test_mutated_real_traces_end_in_a_result_or_one_line_error(fuzz_seeds, data, mutations, writer, rnd):
    name, seed = data.draw(st.sampled_from(fuzz_seeds), label="seed")
    document = copy.deepcopy(seed)
    for mutation in mutations:
        trace_fuzz.DOCUMENT_MUTATIONS[mutation](document, rnd)
    outcome = _run(document, writer, rnd, trace_fuzz.explain_options(rnd))
    assert outcome.ok, f"{name} {mutations} {writer}: {outcome.detail}"


@FUZZ_SETTINGS
@given(
    data=st.data(),
    field=st.sampled_from(trace_fuzz.EVENT_FIELDS + tuple(f"args.{a}" for a in trace_fuzz.ARG_FIELDS)),
    value=JSON_VALUES,
    share=st.sampled_from((0.01, 0.2, 1.0)),
)
def test_any_json_value_in_any_field_of_a_real_trace(fuzz_seeds, data, field, value, share):
    """`ts` as a string, `args` as a list, pid an object, External id a dict, ...: in some or all events."""
    name, seed = data.draw(st.sampled_from(fuzz_seeds), label="seed")
    document = copy.deepcopy(seed)
    rnd = random.Random(0)
    for event in document["traceEvents"]:
        if not isinstance(event, dict) or rnd.random() > share:
            continue
        if field.startswith("args."):
            args = event["args"] if isinstance(event.get("args"), dict) else {}
            args[field.removeprefix("args.")] = copy.deepcopy(value)
            event["args"] = args
        else:
            event[field] = copy.deepcopy(value)
    outcome = _run(document, "plain", rnd)
    assert outcome.ok, f"{name}: {field}={value!r} in {share:.0%} of events: {outcome.detail}"
