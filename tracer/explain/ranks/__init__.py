"""A directory of per-rank traces: which files are ranks, each rank's result, combined and compared.

SGLang writes one trace per tensor-parallel rank into ``SGLANG_TORCH_PROFILER_DIR``, named
``[prefix-]<profile id>-TP-<rank>[-DP-<r>][-PP-<r>][-EP-<r>][-<STAGE>].trace.json.gz``
(``sglang/srt/utils/profile_utils.py``), and CUDA-graph capture traces under
``graph_capture_profile/`` (``cuda_graph_capture-<runner>-TP-<rank>.json.gz``). Each rank is explained
on its own (by `tracer.ranks`, the facade above this stage), its capture trace (if any) attached; clocks are aligned by
``baseTimeNanoseconds``; findings are keyed by (kernel, origin) across ranks; and the report says in
words whether the ranks agree: same hot origin, same calls per step, and which rank is slower, where.
"""

from tracer.explain.ranks.consistency import combine, consistency, finding_label
from tracer.explain.ranks.files import (
    _CAPTURE_RANK,  # noqa: F401  (tests check SGLang's capture file names against it)
    CAPTURE_DIR,
    CAPTURE_PREFIX,
    TRACE_SUFFIXES,
    RankTrace,
    find_rank_traces,
)
from tracer.explain.ranks.records import (
    Collective,
    CombinedFinding,
    RankFigure,
    RankReport,
    RankResult,
    pair_ranks,
    rank_labels,
)
from tracer.explain.ranks.report import RankFailures, rank_report, rank_result

__all__ = [
    "CAPTURE_DIR",
    "CAPTURE_PREFIX",
    "TRACE_SUFFIXES",
    "Collective",
    "CombinedFinding",
    "RankFailures",
    "RankFigure",
    "RankReport",
    "RankResult",
    "RankTrace",
    "combine",
    "consistency",
    "find_rank_traces",
    "finding_label",
    "pair_ranks",
    "rank_labels",
    "rank_report",
    "rank_result",
]
