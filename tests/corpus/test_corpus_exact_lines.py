"""Exact lines per zoo shape: every op with a truth must get its true line (issue 13's target).

Shapes in `KNOWN_FAILING` (none today) would be ``xfail(strict=False)`` with the join's figure;
``KT_EXACT_LINES=strict`` asserts every shape regardless.
"""

from __future__ import annotations

import os

import pytest

from bench.corpus.scoring import CORPUS, find_corpus
from bench.corpus.zoo import SHAPES


def corpus_traces(family: str | None = None):
    return find_corpus(CORPUS, [family] if family else None)


STRICT = os.environ.get("KT_EXACT_LINES") == "strict"
# Shapes the join does not yet get exactly right, with its figure (none today: every shape of the
# zoo gets its true line for all of its op time, on both torch versions).
KNOWN_FAILING: dict[str, str] = {}
ZOO = corpus_traces("zoo")


def _marks(trace):
    reason = KNOWN_FAILING.get(trace.group)
    if reason and not STRICT:
        return [pytest.mark.xfail(strict=False, reason=f"current join: {reason} (issue 13)")]
    return []


@pytest.mark.parametrize("trace", [pytest.param(t, marks=_marks(t), id=t.name) for t in ZOO])
def test_every_op_gets_its_true_line(trace, zoo_scores) -> None:
    score = zoo_scores[trace.name].scores["stack"]
    wrong = [f"{w.said} (truth {w.truth}, conf {w.confidence:.2f})" for w in score.wrong]
    assert score.answered_ns == score.truth_ns, f"no line for {1 - score.coverage:.1%} of truth time"
    assert score.right_ns == score.answered_ns, "; ".join(wrong[:5])


def test_known_failing_names_real_shapes() -> None:
    assert set(KNOWN_FAILING) <= set(SHAPES)
