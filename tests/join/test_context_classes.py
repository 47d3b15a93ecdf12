"""The join builds one Origin per context class; asking the builder for every GPU activity gives the same."""

from __future__ import annotations

import numpy as np
import pytest

from tracer.join import sites_for_trace
from tracer.join.attribute import _Join
from tracer.join.origins import OriginBuilder
from tracer.join.sites import SiteIndex
from tracer.join.source_lines import SourceLines
from tracer.join.state import JoinState
from tracer.load import load_trace


class _EveryAnchor(_Join):
    """The join as it was: `OriginBuilder.origin_id` once per anchor, in order."""

    def _origin_ids(self, anchors, replays, calls):
        origin_id = self.origins.origin_id
        return np.asarray(
            [origin_id(self.state, a, r, calls) for a, r in zip(anchors.tolist(), replays.tolist())]
        )


class _Counting(_Join):
    """The join as it is, counting the anchors the builder was asked about."""

    asked = 0

    def _origin_ids(self, anchors, replays, calls):
        builder = self.origins
        plain = builder.origin_id

        def counted(*args):
            _Counting.asked += 1
            return plain(*args)

        builder.origin_id = counted
        return super()._origin_ids(anchors, replays, calls)


def _join(join_class, trace, sites, roots, use_call_from=True):
    state = JoinState(trace, use_call_from and trace.meta.has_call_from)
    return join_class(state, OriginBuilder(trace, SiteIndex(sites), SourceLines(roots), state.use_call_from))


def _attribute(join_class, trace, roots, use_call_from=True):
    sites = sites_for_trace(trace, roots) if roots else []
    return _join(join_class, trace, sites, roots, use_call_from).run()


CASES = [
    ("shared", "hf_llama_generate_stack.json.gz", "transformers"),
    ("shared", "hf_deepseekv3_generate_stack.json.gz", "transformers"),
    ("own", "glm5_cast_whole_stack.json.gz", "glm5"),
    ("own", "cudagraph_decode_stack.json.gz", "glm5"),
    ("own", "glm5_cast_whole_nostack.json.gz", None),
]


@pytest.mark.parametrize(("where", "name", "source"), CASES, ids=[c[1] for c in CASES])
def test_classes_give_the_origins_of_one_call_per_activity(
    where, name, source, shared_gpu_traces, own_gpu_traces, transformers_src, repo_root
):
    trace = load_trace((shared_gpu_traces if where == "shared" else own_gpu_traces) / name)
    roots = {"transformers": [transformers_src], "glm5": [repo_root / "examples" / "glm5_kv_cast"], None: []}
    for use_call_from in (True, False):
        every = _attribute(_EveryAnchor, trace, roots[source], use_call_from)
        _Counting.asked = 0
        classes = _attribute(_Counting, trace, roots[source], use_call_from)
        assert classes.origin_ids.tolist() == every.origin_ids.tolist()
        assert classes.origins == every.origins
        assert [o.candidates for o in classes.origins] == [o.candidates for o in every.origins]
        assert classes.op_rows.tolist() == every.op_rows.tolist()
        assert _Counting.asked < len(every.gpu_rows)


def test_llama_asks_the_builder_once_per_context(shared_gpu_traces, transformers_src):
    """4,620 GPU activities in 822 contexts (263 Origins): the builder sees one activity per context."""
    trace = load_trace(shared_gpu_traces / "hf_llama_generate_stack.json.gz")
    roots = [transformers_src]
    every = _join(_EveryAnchor, trace, sites_for_trace(trace, roots), roots)
    every.run()
    _Counting.asked = 0
    result = _attribute(_Counting, trace, roots)
    assert len(result.gpu_rows) == 4_620
    assert _Counting.asked == len(every.origins._by_context) == 822
    assert len(result.origins) == 263
