"""The truth corpus is well formed, and the accuracy bench runs on it (figures: bench/ACCURACY.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.corpus.scoring import BUCKETS, CORPUS, find_corpus, resolve_roots, score_trace, stale_sources
from bench.corpus.zoo import SHAPES


def corpus_traces(family: str | None = None):
    return find_corpus(CORPUS, [family] if family else None)


TRACES = corpus_traces()
MAX_TRACE_BYTES = {"gpu": 600 * 1024}  # kernels and launches add to the Python frames
DEFAULT_MAX_TRACE_BYTES = 400 * 1024
ISSUE_SHAPES = {  # issue 13's failing shapes, each must be in the zoo
    "if_else_one_arm",
    "every_other_step",
    "loop_trip_count_per_layer",
    "to_keywords_non_blocking",
    "type_method",
    "unbound_to",
    "partial_to",
}


def test_corpus_is_there() -> None:
    families = {t.family for t in TRACES}
    assert {"zoo", "transformers", "sglang"} <= families, families
    models = {t.group for t in corpus_traces("transformers")}
    assert len(models) >= 10, models


@pytest.mark.parametrize("trace", TRACES, ids=lambda t: t.name)
def test_trace_is_well_formed(trace) -> None:
    document = trace.truth_document()
    report = document["report"]
    assert report["truth_time_share"] >= 0.95, "truth for < 95% of top-level op time"
    assert report["dropped"] <= 0.01 * report["top_ops"], "runs A and B did different work"
    assert report["duplicate_ext_ids"] == 0
    assert report["unknown_files"] == [], "truth names files the trace's frames never name"
    if report["callfrom_checked"]:  # ops under a child frame of their user frame (0 when all run in it)
        assert report["callfrom_agreement"] >= 0.99, report["callfrom_disagreements"][:3]
    assert trace.trace_path.stat().st_size <= MAX_TRACE_BYTES.get(trace.family, DEFAULT_MAX_TRACE_BYTES)
    stale = stale_sources(document, resolve_roots(document["source_roots"]))
    assert not stale, f"{stale} changed since the trace was recorded: recapture (see {CORPUS}/README.md)"


@pytest.mark.parametrize("family", sorted({t.family for t in TRACES}))
def test_recorder_agrees_with_call_from(family) -> None:
    """Where A was recorded on torch >= 2.14, CallFrom checks the recorder (issue 13's independent truth)."""
    reports = [t.truth_document()["report"] for t in corpus_traces(family)]
    with_call_from = [r for r in reports if r["has_call_from"]]
    if not with_call_from:
        pytest.skip(f"no {family} trace from torch >= 2.14")
    checked = sum(r["callfrom_checked"] for r in with_call_from)
    agree = sum(r["callfrom_agree"] for r in with_call_from)
    assert checked > 0 and agree / checked >= 0.99


def test_zoo_has_every_shape_on_both_torch_versions() -> None:
    assert len(SHAPES) >= 30
    assert set(SHAPES) >= ISSUE_SHAPES
    recorded = {(t.group, t.name.split("/")[1]) for t in corpus_traces("zoo")}
    tags = {tag for _, tag in recorded}
    assert {"torch2.13", "torch2.14"} <= tags, tags
    missing = [(name, tag) for name in SHAPES for tag in sorted(tags) if (name, tag) not in recorded]
    assert not missing


def test_scores_are_consistent(zoo_scores) -> None:
    for name, result in zoo_scores.items():
        score = result.scores["stack"]
        assert score.right_ns <= score.answered_ns <= score.truth_ns <= score.total_ns, name
        assert score.truth_share >= 0.95, name  # rows whose outermost op has a truth
        assert sum(b.answered_ns for b in score.buckets.values()) == score.answered_ns
        assert all(w.confidence >= 0 for w in score.wrong)


@pytest.mark.parametrize(
    "name",
    [
        "transformers/torch2.13/llama_forward",
        "transformers/torch2.14/mixtral_forward",
        "sglang/torch2.13/kv_pool",
    ],
)
def test_real_model_traces_score(name: str) -> None:
    """A fast subset of the real-model families: truth reaches the rows, the figures add up."""
    trace = next((t for t in TRACES if t.name == name), None)
    if trace is None:
        pytest.skip(f"{name} is not in the corpus")
    score = score_trace(trace, ("stack",)).scores["stack"]
    assert score.truth_share >= 0.95
    assert score.right_ns <= score.answered_ns <= score.truth_ns
    assert score.coverage > 0.5


def test_all_modes_on_a_callfrom_trace() -> None:
    trace = next(t for t in corpus_traces("zoo") if t.name == "zoo/torch2.14/if_else_one_arm")
    result = score_trace(trace)
    assert set(result.scores) == {"stack", "callfrom", "nostack"}
    assert result.scores["callfrom"].accuracy == 1.0  # every op here is under a builtin frame
    nostack = result.scores["nostack"]
    assert nostack.rank1_ns <= nostack.top3_ns <= nostack.truth_ns


def test_bench_prints_and_writes_json(tmp_path: Path, capsys) -> None:
    import runpy

    out = tmp_path / "accuracy.json"
    module = runpy.run_path(str(Path(__file__).resolve().parents[2] / "bench" / "accuracy.py"))
    assert (
        module["main"](
            ["--families", "zoo", "--groups", "ternary,partial_to", "--by-group", "--json", str(out)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "Join with stacks" in printed and "ternary" in printed
    document = json.loads(out.read_text())
    assert {"zoo/torch2.13", "zoo/torch2.14"} <= set(document["families"])
    assert set(document["families"]["zoo/torch2.13"]["stack"]["buckets"]) == set(BUCKETS)


def test_gpu_rows_find_their_op_through_the_launch(own_gpu_traces: Path) -> None:
    """On a real H200 trace, each kernel's op found through its launch (correlation id, then time
    containment: what the bench does) is the op its External id names."""
    from bench.corpus.scoring import TruthLookup
    from tracer.load import load_trace
    from tracer.model.events import Cat

    table = load_trace(own_gpu_traces / "glm5_gather_then_cast_stack.json.gz").events
    lookup = TruthLookup(table, {})
    op_by_ext = {table.ext_id[r]: r for r in range(len(table)) if table.cat[r] == Cat.CPU_OP}
    kernels = [r for r in range(len(table)) if table.cat[r] == Cat.KERNEL and table.ext_id[r] in op_by_ext]
    assert len(kernels) > 1000
    assert all(lookup.innermost_op(r) == op_by_ext[table.ext_id[r]] for r in kernels)


def test_source_roots_find_the_recorded_version(repo_root: Path) -> None:
    """A truth file names its package version; the H200's transformers 5.17.0 is read from build/src."""
    from bench.corpus.scoring import resolve_roots

    unpacked = repo_root / "build" / "src" / "transformers-5.17.0"
    if not unpacked.is_dir():
        pytest.skip("build/src/transformers-5.17.0 is made by `make setup`")
    import transformers

    if transformers.__version__ != "5.17.0":
        assert resolve_roots(["package:transformers==5.17.0"]) == [unpacked]
    assert resolve_roots(["repo:"]) == [repo_root]


HOLDOUT = Path(__file__).resolve().parents[1] / "fixtures" / "holdout"


@pytest.mark.parametrize(
    "name", ["transformers/torch2.13/gemma3_forward", "transformers/torch2.13/nemotron_generate"]
)
def test_holdout_models_get_their_true_lines_with_stacks(name: str) -> None:
    """Models the join was never tuned on (`tests/fixtures/holdout/README.md`): with stacks, their op
    time still lands on its true lines, and no answer at confidence >= 0.9 is wrong."""
    trace = next((t for t in find_corpus(HOLDOUT) if t.name == name), None)
    if trace is None:
        pytest.skip(f"{name} is not in the hold-out set")
    score = score_trace(trace, ("stack",)).scores["stack"]
    assert score.truth_share >= 0.99
    assert score.right_ns >= 0.98 * score.truth_ns
    sure = score.buckets[">=0.9"]
    assert sure.answered_ns >= 0.8 * score.truth_ns and sure.wrong_ns == 0


def test_bench_reports_the_holdout_halves_apart(tmp_path: Path, capsys) -> None:
    """`bench/accuracy.py --corpus tests/fixtures/holdout` prints and writes a row per half: the dev
    models (read when a failure is looked into) and the check models (only measured)."""
    import runpy

    from bench.corpus.capture_transformers import HOLDOUT_MODELS, MODELS
    from bench.corpus.holdout import CHECK, DEV

    assert set(HOLDOUT_MODELS) == set(DEV) | set(CHECK) and not set(DEV) & set(CHECK)
    assert not set(HOLDOUT_MODELS) & set(MODELS)  # the corpus's models are no hold-out's
    out = tmp_path / "holdout.json"
    module = runpy.run_path(str(Path(__file__).resolve().parents[2] / "bench" / "accuracy.py"))
    argv = ["--corpus", str(HOLDOUT), "--groups", "phi,gemma", "--modes", "stack", "--json", str(out)]
    assert module["main"](argv) == 0
    assert "hold-out halves" in capsys.readouterr().out
    document = json.loads(out.read_text())
    halves = document["holdout"]
    assert set(halves) == {"transformers hold-out dev/torch2.13", "transformers hold-out check/torch2.13"}
    phi = document["traces"]["transformers/torch2.13/phi_forward"]["stack"]
    dev = halves["transformers hold-out dev/torch2.13"]["stack"]
    assert dev["truth_ns"] > phi["truth_ns"]  # phi's generate trace counts too


def test_bench_compares_each_trace_with_a_baseline(tmp_path: Path, capsys) -> None:
    """`--compare FILE` prints each trace whose no-stack rank 1 moved against a `--json` document or a
    baseline of `bench/baselines/` (main's per-trace figures, kept in the repository), and the totals
    over the traces both scored."""
    import runpy

    root = Path(__file__).resolve().parents[2]
    baseline = json.loads((root / "bench" / "baselines" / "corpus.json").read_text())
    assert baseline["commit"] and len(baseline["traces"]) >= 150
    ternary = "zoo/torch2.13/ternary"
    assert baseline["traces"][ternary]["nostack"]["rank1"] > 0.5
    baseline["traces"][ternary]["nostack"]["rank1"] = 0.5  # as if this trace had moved since
    base = tmp_path / "base.json"
    base.write_text(json.dumps(baseline))
    module = runpy.run_path(str(root / "bench" / "accuracy.py"))
    argv = ["--families", "zoo", "--groups", "ternary", "--modes", "nostack", "--compare", str(base)]
    assert module["main"](argv) == 0
    printed = capsys.readouterr().out
    assert "nostack: rank1 per trace against 9737146" in printed
    row = next(line for line in printed.splitlines() if ternary in line)
    assert "50.0%" in row
    assert "nostack: 2 trace(s) in both" in printed  # torch 2.13's and 2.14's
    assert f"{len(baseline['traces']) - 2} of the base's traces not scored in this run" in printed


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"traces": {', "not a JSON document of bench/accuracy.py"),  # truncated
        ('[{"traces": {}}]', "no 'traces' object"),
        ('{"families": {}}', "no 'traces' object"),
    ],
)
def test_bench_refuses_a_baseline_it_cannot_read(tmp_path: Path, capsys, text: str, said: str) -> None:
    import runpy

    bad = tmp_path / "base.json"
    bad.write_text(text)
    module = runpy.run_path(str(Path(__file__).resolve().parents[2] / "bench" / "accuracy.py"))
    assert module["main"](["--families", "zoo", "--groups", "ternary", "--compare", str(bad)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"{bad}: {said}") and "\n" not in error


def test_bench_skips_a_baseline_s_entries_it_cannot_read(tmp_path: Path, capsys) -> None:
    """A trace's entry without the figures compared is left out of the comparison: no traceback."""
    import runpy

    base = tmp_path / "base.json"
    traces = {
        "zoo/torch2.13/ternary": {"nostack": {"truth_ns": 10, "rank1": 0.25}},
        "zoo/torch2.14/ternary": {"nostack": {"rank1": "high"}},
    }
    base.write_text(json.dumps({"commit": "abc1234", "traces": traces}))
    module = runpy.run_path(str(Path(__file__).resolve().parents[2] / "bench" / "accuracy.py"))
    argv = ["--families", "zoo", "--groups", "ternary", "--modes", "nostack", "--compare", str(base)]
    assert module["main"](argv) == 0
    assert "nostack: 1 trace(s) in both" in capsys.readouterr().out


def test_named_mode_names_the_class_a_config_would() -> None:
    """The bench's ``named`` mode passes the class a model's config.json names (``architectures``):
    read from the traced transformers version's auto mappings (config class -> model type -> causal
    LM class), for transformers traces only."""
    from bench.corpus.architectures import trace_architectures
    from bench.corpus.scoring import resolve_roots, source_dirs

    def named(trace) -> tuple[str, ...]:
        document = trace.truth_document()
        return trace_architectures(document, source_dirs(document, resolve_roots(document["source_roots"])))

    by_name = {
        t.name: t for t in (*corpus_traces("transformers"), *corpus_traces("gpu"), *corpus_traces("zoo"))
    }
    assert named(by_name["transformers/torch2.13/mistral_forward"]) == ("MistralForCausalLM",)
    assert named(by_name["transformers/torch2.14/gpt2_forward"]) == ("GPT2LMHeadModel",)  # not ...ForCausalLM
    assert named(by_name["gpu/torch2.11/llama_forward"]) == ("LlamaForCausalLM",)  # transformers 5.17.0
    assert named(by_name["zoo/torch2.13/ternary"]) == ()  # no model: the mode skips the trace
    assert score_trace(by_name["zoo/torch2.13/ternary"], ("named",)).scores == {}
