"""How often the join names the true line: coverage, accuracy and calibration on the truth corpus.

    PYTHONPATH=. python3 bench/accuracy.py                      # every family, all modes
    PYTHONPATH=. python3 bench/accuracy.py --families zoo --groups 'if_else*,partial_to' --by-group
    PYTHONPATH=. python3 bench/accuracy.py --json out.json      # everything, machine-readable
    PYTHONPATH=. python3 bench/accuracy.py --modes nostack --compare bench/baselines/corpus.json

Modes: ``stack`` = the join with Python frames but CallFrom ignored (the torch < 2.14 form);
``callfrom`` = the join using CallFrom (torch >= 2.14 traces only); ``nostack`` = every
python_function event removed (rank-1 and top-3 share of the ranked candidates); ``named`` = the
same, with the model's class named as ``--config``'s ``architectures`` would (transformers traces
only: ``--modes nostack,named``). The corpus and
its truth: tests/fixtures/corpus/README.md. Figures: bench/ACCURACY.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rich.console import Console
from rich.table import Table

from bench.corpus.holdout import split_of
from bench.corpus.scoring import (
    BUCKETS,
    CORPUS,
    DEFAULT_MODES,
    MODES,
    RANKED_MODES,
    Score,
    TraceResult,
    find_corpus,
    score_trace,
)


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def ms(ns: int) -> str:
    return f"{ns / 1e6:.2f}"


def torch_tag(result: TraceResult) -> str:
    parts = result.trace.name.split("/")
    return parts[1] if len(parts) > 2 else result.trace.torch


def aggregate(results: list[TraceResult], key) -> dict[tuple, dict[str, Score]]:
    totals: dict[tuple, dict[str, Score]] = defaultdict(dict)
    for result in results:
        for mode, score in result.scores.items():
            totals[key(result)].setdefault(mode, Score()).add(score)
    return dict(sorted(totals.items()))


def corpus_table(results: list[TraceResult]) -> Table:
    table = Table(title="Corpus: traces, op time with truth, recorder vs CallFrom")
    for column in (
        "family",
        "torch",
        "traces",
        "top-level ops (dropped: A/B differ)",
        "rows",
        "row time with truth",
        "min truth share (op time)",
        "CallFrom agreement (min)",
        "stale traces",
    ):
        table.add_column(column, justify="right" if column not in ("family", "torch") else "left")
    groups: dict[tuple, list[TraceResult]] = defaultdict(list)
    for result in results:
        groups[(result.trace.family, torch_tag(result))].append(result)
    for (family, tag), members in sorted(groups.items()):
        total = Score()
        for r in members:
            if r.scores:
                total.add(next(iter(r.scores.values())))
        shares = [r.truth_share_recorded for r in members if r.truth_share_recorded is not None]
        reports = [r.trace.truth_document()["report"] for r in members]
        dropped = sum(rep["dropped"] for rep in reports)
        top_ops = sum(rep["top_ops"] for rep in reports)
        agreements = [r.callfrom_agreement for r in members if r.callfrom_agreement is not None]
        table.add_row(
            family,
            tag,
            str(len(members)),
            f"{top_ops} ({dropped})",
            str(total.rows),
            pct(total.truth_share),
            pct(min(shares)) if shares else "-",
            pct(min(agreements)) if agreements else "-",
            str(sum(1 for r in members if r.stale)),
        )
    return table


def accuracy_table(
    title: str, totals: dict[tuple, dict[str, Score]], mode: str, label: tuple[str, ...]
) -> Table:
    table = Table(title=title)
    for column in label:
        table.add_column(column)
    if mode in RANKED_MODES:
        columns = (
            "truth time (ms)",
            "rank 1",
            "top 3",
            "rank 1 or a copy",
            "coverage",
            "accuracy",
            "wrong >=0.9 (ms / origins)",
        )
    else:
        columns = (
            "truth time (ms)",
            "coverage",
            "accuracy",
            *(f"conf {b}: ms answered, right, wrong origins" for b in BUCKETS),
            *(("same line as CallFrom",) if mode == "stack" else ()),
        )
    for column in columns:
        table.add_column(column, justify="right")
    for key, scores in totals.items():
        score = scores.get(mode)
        if score is None:
            continue
        cells = [ms(score.truth_ns)]
        if mode in RANKED_MODES:
            high = score.buckets[BUCKETS[0]]
            cells += [
                pct(score.rank1),
                pct(score.top3),
                pct(score.rank1_copy),
                pct(score.coverage),
                pct(score.accuracy),
                f"{ms(high.wrong_ns)} / {len(high.wrong_origins)}",
            ]
        else:
            cells += [pct(score.coverage), pct(score.accuracy)]
            cells += [bucket_cell(score.buckets[name]) for name in BUCKETS]
            if mode == "stack":
                cells.append(pct(score.same_as_callfrom))
        table.add_row(*key, *cells)
    return table


def bucket_cell(bucket) -> str:
    """``ms answered, share of it right, distinct wrong origins``."""
    if not bucket.answered_ns:
        return "-"
    right = 1 - bucket.wrong_ns / bucket.answered_ns
    return f"{ms(bucket.answered_ns)}, {right:.1%}, {len(bucket.wrong_origins)}"


def wrong_table(results: list[TraceResult], mode: str, limit: int) -> Table | None:
    wrong = [w for r in results for w in r.scores.get(mode, Score()).wrong if w.confidence >= 0.9]
    if not wrong:
        return None
    wrong.sort(key=lambda w: (w.trace, -w.time_ns))
    table = Table(title=f"Wrong answers at confidence >= 0.9 ({mode} mode): {len(wrong)}")
    for column in ("trace", "said", "truth", "conf", "rows", "evidence"):
        table.add_column(column)
    for w in wrong[:limit]:
        table.add_row(
            w.trace, w.said, w.truth, f"{w.confidence:.2f}", str(w.rows), "; ".join(w.evidence)[:160]
        )
    return table


# the share a mode is judged by, per trace (`Score.to_dict`'s keys): rank 1 without stacks, else accuracy
HEADLINE = {"nostack": "rank1", "named": "rank1", "stack": "accuracy", "callfrom": "accuracy"}
MOVED = 0.001  # a trace's share that moved less than this (0.1 point) did not move


def compare_table(results: list[TraceResult], base: dict, mode: str) -> tuple[Table, str] | None:
    """Each trace of this run whose headline share (`HEADLINE`) moved against `base` (a ``--json``
    document, or a baseline of `bench/baselines/`), and a line of the totals over the traces both
    scored; None when `base` holds no trace of this run in `mode`."""
    key = HEADLINE[mode]
    then_by_name = {
        name: scores[mode]
        for name, scores in base["traces"].items()
        if isinstance(scores, dict)
        and isinstance(scores.get(mode), dict)
        and isinstance(scores[mode].get("truth_ns"), int)
        and isinstance(scores[mode].get(key), (float, int, type(None)))
    }
    pairs = [
        (r.trace.name, then_by_name[r.trace.name], r.scores[mode].to_dict())
        for r in results
        if mode in r.scores and r.trace.name in then_by_name
    ]
    pairs = [(name, then, now) for name, then, now in pairs if then["truth_ns"] and now["truth_ns"]]
    if not pairs:
        return None
    table = Table(title=f"{mode}: {key} per trace against {base.get('commit', 'the base')} (moved only)")
    for column in ("trace", "then", "now", "change"):
        table.add_column(column, justify="left" if column == "trace" else "right")
    up = down = 0
    for name, then, now in sorted(pairs):
        a, b = then[key] or 0.0, now[key] or 0.0
        if abs(b - a) >= MOVED:
            up, down = up + (b > a), down + (b < a)
            table.add_row(name, pct(a), pct(b), f"{100 * (b - a):+.1f}")

    def total(scores: list[dict]) -> float:  # the share over the traces both hold, weighted by truth time
        return sum((s[key] or 0.0) * s["truth_ns"] for s in scores) / sum(s["truth_ns"] for s in scores)

    then_total = total([then for _, then, _ in pairs])
    now_total = total([now for _, _, now in pairs])
    missing = len(then_by_name) - len(pairs)
    summary = (
        f"{mode}: {len(pairs)} trace(s) in both: {key} {then_total:.1%} -> {now_total:.1%} ({up} up, {down} down)"
        + (f"; {missing} of the base's traces not scored in this run" if missing else "")
    )
    return table, summary


def markdown(results: list[TraceResult], by_family: dict[tuple, dict[str, Score]], modes: list[str]) -> str:
    """The figures as markdown tables (what bench/ACCURACY.md records)."""
    lines = [
        (
            "| family | torch | mode | truth time (ms) | coverage | accuracy | conf >= 0.9: ms answered, right, "
            "wrong origins | 0.5-0.9 | < 0.5 | stack = CallFrom's line | no-stack rank 1 / top 3 / rank 1 or a copy |"
        ),
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, scores in by_family.items():
        for mode in modes:
            score = scores.get(mode)
            if score is None:
                continue
            cells = [ms(score.truth_ns), pct(score.coverage), pct(score.accuracy)]
            cells += [bucket_cell(score.buckets[name]) for name in BUCKETS]
            cells.append(
                pct(score.same_as_callfrom) if mode == "stack" and score.callfrom_answered_ns else ""
            )
            cells.append(
                f"{pct(score.rank1)} / {pct(score.top3)} / {pct(score.rank1_copy)}"
                if mode in RANKED_MODES
                else ""
            )
            lines.append(f"| {key[0]} | {key[1]} | {mode} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Per shape / model (coverage / accuracy; `callfrom` on torch 2.14 traces; no-stack top 3):",
        "",
    ]
    by_group = aggregate(results, lambda r: (r.trace.family, r.trace.group))
    tags = sorted({torch_tag(r) for r in results})
    with_call_from = {torch_tag(r) for r in results if "callfrom" in r.scores}
    columns = [(tag, "stack") for tag in tags] + [(tag, "callfrom") for tag in tags if tag in with_call_from]
    per_tag = aggregate(results, lambda r: (r.trace.family, r.trace.group, torch_tag(r)))
    head = [f"{tag} {mode}" for tag, mode in columns] + ["no-stack top 3"]
    lines += [
        "| family | shape / model | " + " | ".join(head) + " |",
        "| --- | --- |" + " ---: |" * len(head),
    ]
    for family, group in by_group:
        cells = []
        for tag, mode in columns:
            score = per_tag.get((family, group, tag), {}).get(mode)
            cells.append(f"{pct(score.coverage)} / {pct(score.accuracy)}" if score else "")
        nostack = by_group[(family, group)].get("nostack")
        cells.append(pct(nostack.top3) if nostack else "")
        lines.append(f"| {family} | {group} | " + " | ".join(cells) + " |")
    merged: dict[tuple, list] = {}
    for r in results:
        for w in r.scores.get("stack", Score()).wrong:
            if w.confidence >= 0.9:
                key = (r.trace.family, w.group, w.said, w.truth)
                entry = merged.setdefault(key, [w, set(), 0])
                entry[1].add(torch_tag(r))
                entry[2] += w.rows
    lines += [
        "",
        f"Wrong answers at confidence >= 0.9, stack mode ({len(merged)} distinct, both torch versions merged):",
        "",
        "| family | shape / model | said | truth | confidence | torch | rows | evidence |",
        "| --- | --- | --- | --- | ---: | --- | ---: | --- |",
    ]
    for (family, group, said, truth), (w, seen, rows) in sorted(merged.items()):
        evidence = "; ".join(w.evidence).replace("|", "/")
        lines.append(
            f"| {family} | {group} | {said} | {truth} | {w.confidence:.2f} | {', '.join(sorted(seen))} | {rows} "
            f"| {evidence} |"
        )
    return "\n".join(lines)


def _commit() -> str | None:
    """The repository's commit, short (None outside a git checkout)."""
    import subprocess

    try:
        found = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return found.stdout.strip() or None


def _score(args: tuple) -> TraceResult:
    trace, modes, rows = args
    return score_trace(trace, modes, rows=rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--families", help="comma-separated: zoo,transformers,sglang,gpu (default: all)")
    parser.add_argument("--groups", help="comma-separated shape/model names or globs")
    parser.add_argument("--torch", help="only traces of this torch tag, e.g. torch2.13")
    parser.add_argument(
        "--modes",
        default=",".join(DEFAULT_MODES),
        help=f"comma-separated of {', '.join(MODES)} (named: no stacks, the model's class given as --config would)",
    )
    parser.add_argument(
        "--rows", choices=("all", "casts"), default="all", help="casts: only rows with a cast/copy op"
    )
    parser.add_argument("--by-group", action="store_true", help="a table per zoo shape / model too")
    parser.add_argument("--wrong", type=int, default=60, help="list at most this many wrong >= 0.9 answers")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--markdown", help="write the family figures and wrong >= 0.9 answers as markdown here"
    )
    parser.add_argument("--json", help="write every figure as JSON to this file ('-' = stdout)")
    parser.add_argument(
        "--compare",
        type=Path,
        help="a --json file (or bench/baselines/*.json) to compare each trace's figures with",
    )
    args = parser.parse_args(argv)
    families = args.families.split(",") if args.families else None
    modes = [m for m in args.modes.split(",") if m]
    base = None
    if args.compare is not None:
        try:
            base = json.loads(args.compare.read_text())
        except (OSError, ValueError) as error:
            print(f"{args.compare}: not a JSON document of bench/accuracy.py: {error}", file=sys.stderr)
            return 2
        if not isinstance(base, dict) or not isinstance(base.get("traces"), dict):
            print(
                f"{args.compare}: no 'traces' object (bench/accuracy.py --json writes one)", file=sys.stderr
            )
            return 2
    traces = find_corpus(args.corpus, families)
    if args.groups:
        patterns = args.groups.split(",")
        traces = [t for t in traces if any(fnmatch.fnmatch(t.group, p) for p in patterns)]
    if args.torch:
        traces = [t for t in traces if f"/{args.torch}/" in f"/{t.name}/"]
    if not traces:
        print(f"{args.corpus}: no corpus traces match", file=sys.stderr)
        return 2
    started = time.perf_counter()
    jobs = [(t, modes, args.rows) for t in traces]
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            results = list(pool.map(_score, jobs))
    else:
        results = [_score(job) for job in jobs]
    elapsed = time.perf_counter() - started
    console = Console(width=200, stderr=args.json == "-")
    console.print(corpus_table(results))
    by_family = aggregate(results, lambda r: (r.trace.family, torch_tag(r)))
    titles = {
        "stack": "Join with stacks, CallFrom ignored (the torch < 2.14 form)",
        "callfrom": "Join using CallFrom (torch >= 2.14 traces)",
        "nostack": "No Python frames (python_function removed): ranked candidates",
        "named": "No Python frames, the model's class named (--config's architectures): ranked candidates",
    }
    for mode in modes:
        console.print(accuracy_table(titles[mode], by_family, mode, ("family", "torch")))
    by_split = aggregate(
        [r for r in results if split_of(r.trace.group)],
        lambda r: (f"{r.trace.family} hold-out {split_of(r.trace.group)}", torch_tag(r)),
    )
    if by_split:  # models never tuned on: each half apart (bench/corpus/holdout.py)
        for mode in modes:
            console.print(
                accuracy_table(f"{titles[mode]}, hold-out halves", by_split, mode, ("set", "torch"))
            )
    if args.by_group:
        by_group = aggregate(results, lambda r: (r.trace.family, r.trace.group, torch_tag(r)))
        for mode in modes:
            console.print(
                accuracy_table(
                    f"{titles[mode]}, per shape / model", by_group, mode, ("family", "group", "torch")
                )
            )
    for mode in ("stack", "callfrom"):
        if mode in modes and (table := wrong_table(results, mode, args.wrong)) is not None:
            console.print(table)
    if base is not None:
        for mode in modes:
            if (compared := compare_table(results, base, mode)) is not None:
                if compared[0].row_count:  # some trace moved
                    console.print(compared[0])
                console.print(compared[1], soft_wrap=True)
            else:
                console.print(f"[yellow]{args.compare}: no trace of this run scored in {mode} mode[/yellow]")
    stale = sorted({f"{r.trace.name}: {', '.join(r.stale)}" for r in results if r.stale})
    for line in stale:
        console.print(f"[yellow]stale: {line} changed since the trace was recorded[/yellow]")
    console.print(f"{len(results)} traces scored in {elapsed:.1f} s")
    if args.markdown:
        Path(args.markdown).write_text(markdown(results, by_family, modes) + "\n")
    if args.json:
        document = {
            "commit": _commit(),
            "families": {
                f"{k[0]}/{k[1]}": {m: s.to_dict() for m, s in v.items()} for k, v in by_family.items()
            },
            "holdout": {
                f"{k[0]}/{k[1]}": {m: s.to_dict() for m, s in v.items()} for k, v in by_split.items()
            },
            "traces": {
                r.trace.name: {
                    "group": r.trace.group,
                    "stale": r.stale,
                    "truth_share_recorded": r.truth_share_recorded,
                    "callfrom_agreement": r.callfrom_agreement,
                    **{m: s.to_dict() for m, s in r.scores.items()},
                }
                for r in results
            },
        }
        text = json.dumps(document, indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
