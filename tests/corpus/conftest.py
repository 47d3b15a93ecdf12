"""The committed truth corpus (tests/fixtures/corpus), scored once per session."""

from __future__ import annotations

import pytest

from bench.corpus.scoring import CORPUS, TraceResult, find_corpus, score_trace


@pytest.fixture(scope="session")
def zoo_scores() -> dict[str, TraceResult]:
    """Every zoo trace scored in stack mode (the join with frames, CallFrom ignored), by trace name."""
    return {trace.name: score_trace(trace, ("stack",)) for trace in find_corpus(CORPUS, ["zoo"])}
