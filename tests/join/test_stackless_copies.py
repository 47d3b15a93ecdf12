"""Without stacks, copies of one function in many files (transformers keeps the RMSNorm, rotary and
MLP code of Llama in each model file made from it): the ops around a hot op fit every copy alike, so
the stackless ranking answers in the copy whose file the rest of the trace fits
(`StacklessRanker.agree`). Scored on the corpus's real transformers trace with every frame stripped,
the whole installed transformers package (2,700 files) as the source."""

from __future__ import annotations

import pytest

from bench.corpus.scoring import CORPUS, find_corpus, score_trace


@pytest.fixture(scope="module")
def llama_generate():
    trace = next(
        (
            t
            for t in find_corpus(CORPUS, ["transformers"])
            if t.name == "transformers/torch2.13/llama_generate"
        ),
        None,
    )
    if trace is None:
        pytest.skip("the corpus's llama_generate trace is missing")
    return score_trace(trace, ("nostack",)).scores["nostack"]


def test_copies_answered_in_the_file_that_ran(llama_generate) -> None:
    # before: 0.1% ranked first (a copy in another model's file won every tie), 73.6% in the top 3
    assert llama_generate.rank1 >= 0.75
    assert llama_generate.rank1_copy >= llama_generate.rank1  # the line, or the same line of a copy
    assert llama_generate.top3 >= llama_generate.rank1


def test_copies_stay_a_ranking(llama_generate) -> None:
    assert llama_generate.buckets[">=0.9"].answered_ns == 0
    assert llama_generate.buckets["0.5-0.9"].answered_ns == 0
