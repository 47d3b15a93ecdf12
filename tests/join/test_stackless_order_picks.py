"""Without stacks, the files aligned with a window are picked by the order of its ops too, not only by
their names (`FunctionSpellings.best_in_order`, `StacklessRanker._standing_out`): transformers' Qwen3
attention normalises each head's projection (``self.q_norm(self.q_proj(x).view(s))``), which no name
says (every decoder file spells ``linear``, ``pow``, ``mean``, ``rsqrt``); its file ranked 116th of
2,719 by names and was never aligned, so Llama's copies took its lines. Different code that fits about
alike goes by how much of each file the trace used (`_used_first`). Measured on the corpus (every
frame stripped): transformers (torch 2.14) rank 1 78.1 -> 81.3%, GPU (torch 2.11) 91.0 -> 91.9%."""

from __future__ import annotations

from tracer.join.copies import FunctionCopies
from tracer.join.stackless import Candidate, _SameLines, _used_first

NO_COPIES = _SameLines(FunctionCopies([]))


def test_qwen3s_file_is_aligned_by_the_order_of_its_ops(nostack_scores) -> None:
    """transformers' Qwen3 forward on CPU: 9.7% of the op time ranked first before (every line went to
    Llama's copies of it, or to other attentions), 94.3% now."""
    scores = nostack_scores("transformers/torch2.13/qwen3_forward")
    assert scores.rank1 >= 0.9
    assert scores.buckets[">=0.9"].answered_ns == 0 and scores.buckets["0.5-0.9"].answered_ns == 0


def test_opts_decoder_layer_is_aligned_by_the_order_of_its_ops(nostack_scores) -> None:
    """OPT's layer spells few rare names itself (``relu`` through ``ACT2FN``, ``cat`` through the cache,
    ``sdpa`` through the attention table): its file ranked 236th by names, but first for running
    ``dropout``, ``add``, ``layer_norm``, ``linear`` in that order. 22.5% ranked first before, 69% now."""
    scores = nostack_scores("transformers/torch2.13/opt_generate")
    assert scores.rank1 >= 0.6
    assert scores.buckets[">=0.9"].answered_ns == 0 and scores.buckets["0.5-0.9"].answered_ns == 0


def _candidate(file: str, score: float) -> Candidate:
    return Candidate(file=file, line=10, score=score, function=f"{file[:-3]}.forward")


def test_code_that_fits_alike_goes_by_how_much_of_its_file_the_trace_used() -> None:
    """LFM2's MLP fits a Qwen3 window a hair better than Qwen3's own (-12.935 against -12.932): the
    trace used 53% of LFM2's functions (not its convolutions) and 69% of Qwen3's."""
    lfm2, qwen3, far = (
        _candidate("lfm2.py", -12.935),
        _candidate("qwen3.py", -12.932),
        _candidate("x.py", -11.0),
    )
    used = {"lfm2.py": 0.529, "qwen3.py": 0.692, "x.py": 0.9}
    ordered, said = _used_first((lfm2, qwen3, far), used, NO_COPIES)
    assert ordered == (qwen3, lfm2, far)  # the far one is no tie, however used its file
    assert said and "qwen3.py" in said[0] and "69%" in said[0]
    # used alike (at least 80% of the most used), or apart by more than the margin: as scored
    assert _used_first((lfm2, qwen3), {"lfm2.py": 0.6, "qwen3.py": 0.692}, NO_COPIES) == ((lfm2, qwen3), ())
    assert _used_first((lfm2, far), used, NO_COPIES) == ((lfm2, far), ())


def test_a_fit_a_quiet_op_better_is_still_alike() -> None:
    """Mixtral's ``lm_head`` window runs on into the next forward's embedding: HiggsAudioV2's generation
    forward, which runs its model again after its ``lm_head``, fits it 0.26 better (less than a view's
    reward) in a file the trace used 41% of, against Mixtral's 65%: Mixtral's line first (torch 2.13's
    forward: 28 -> 97% rank 1)."""
    higgs, mixtral = _candidate("higgs.py", -8.76), _candidate("mixtral.py", -8.5)
    ordered, _ = _used_first((higgs, mixtral), {"higgs.py": 0.41, "mixtral.py": 0.65}, NO_COPIES)
    assert ordered == (mixtral, higgs)
    assert (
        _used_first(
            (_candidate("higgs.py", -8.9), mixtral), {"higgs.py": 0.41, "mixtral.py": 0.65}, NO_COPIES
        )[1]
        == ()
    )


def test_a_copy_of_the_first_is_no_different_code() -> None:
    """OLMo's modular file holds copies of its model file's code, few functions, all of them used
    (100% against the model file's 67%): which copy ran is the copies' tie-break's, not this one's."""
    body = "def forward(self, x):\n    y = x.float()\n    return y.to(torch.bfloat16)\n"
    same = _SameLines(FunctionCopies([(name, lambda: body) for name in ("modeling.py", "modular.py")]))
    model, modular = Candidate("modeling.py", 2, -8.3, "forward"), Candidate("modular.py", 2, -8.1, "forward")
    assert _used_first((model, modular), {"modeling.py": 0.67, "modular.py": 1.0}, same) == (
        (model, modular),
        (),
    )
