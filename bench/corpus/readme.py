"""Write tests/fixtures/corpus/README.md from the truth files (run after every capture).

python3 -m bench.corpus.readme
"""

from __future__ import annotations

import json
from collections import defaultdict

from bench.corpus.scoring import CORPUS

INTRO = """\
# The truth corpus (issue 13)

Traces the join sees, each beside the true line of every top-level op, found by a mechanism that
does not use the join. Scored by `bench/accuracy.py` (figures: `bench/ACCURACY.md`); checked by
`tests/corpus/`. This file is written by `python3 -m bench.corpus.readme`.

## How the truth is made (`bench/corpus/recorder.py`, `bench/corpus/pairing.py`)

Each workload runs twice in one process, each time from fresh state (same seed, same unprofiled
warm-up step):
- **A**: under `torch.profiler.profile(activities=[CPU] (+CUDA), record_shapes=True, with_stack=True)`,
  exported with `export_chrome_trace` and gzipped: `<name>.json.gz`, the trace the join sees.
- **B**: `with_stack=False`, inside a `TorchFunctionMode` whose handler walks `sys._getframe()` out to
  the first user frame (not torch, not the stdlib, not `bench/corpus/*.py`; the same rule as
  `tracer.join.frames.is_library_file`, on the file name the profiler would print) and wraps the call
  in `_RecordFunctionFast("kt:truth:<file>:<f_lineno>")`. The mode is off inside its handler, so
  only the outermost torch call of each user line is wrapped.
- The top-level cpu_ops (in no other cpu_op; `kt:` ops and record_function ranges do not count) of A
  and B, per thread in time order, are paired (identical name sequences; else difflib's equal blocks,
  the rest dropped and counted). A's op takes the innermost `kt:truth:` range around its twin.
  `<name>.truth.json` holds `{"<External id of A's top-level op>": "file:line"}` plus the report.
- On torch >= 2.14, A's Python frames carry `CallFrom` (the caller's line): for every op under a child
  frame (builtin or Python) of its innermost user frame, the child's CallFrom must equal the truth.
  The agreement is in each report (`callfrom_checked`, `callfrom_agree`): it validates the recorder.
- The truth follows `f_lineno`: a method call split over lines is on the attribute's line; Python 3.12
  inlines comprehensions (no `<listcomp>` frame), 3.11 does not.

`source_roots` in a truth file say where the source is: `repo:` = this repository,
`module:transformers` = the folder holding the installed package. `sources` keeps a digest of each
source file: the traces name functions by def line, so an edit makes them stale (the tests say so).

## Recapture

```sh
PYTHONPATH=$PWD python3 -m bench.corpus.capture_zoo --out tests/fixtures/corpus/zoo             # torch 2.13
PYTHONPATH=$PWD /tmp/t214/bin/python -m bench.corpus.capture_zoo --out tests/fixtures/corpus/zoo  # torch 2.14.1
PYTHONPATH=$PWD python3 -m bench.corpus.capture_transformers --out tests/fixtures/corpus/transformers
PYTHONPATH=$PWD /tmp/t214/bin/python -m bench.corpus.capture_transformers --out tests/fixtures/corpus/transformers
PYTHONPATH=$PWD python3 -m bench.corpus.capture_sglang --out tests/fixtures/corpus/sglang
python3 bench/corpus/capture_gpu.py --out /tmp/gpu --tar $OUT/gpu_corpus.tar   # on the GPU machine (repo = cwd)
mkdir -p tests/fixtures/corpus/gpu && tar xf gpu_corpus.tar -C tests/fixtures/corpus/gpu   # here, then:
PYTHONPATH=$PWD python3 -m bench.corpus.readme
```
"""


def main() -> int:
    rows: dict[str, list[str]] = defaultdict(list)
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for truth_path in sorted(CORPUS.rglob("*.truth.json")):
        trace_path = truth_path.with_name(truth_path.name.removesuffix(".truth.json") + ".json.gz")
        if not trace_path.is_file():
            continue
        document = json.loads(truth_path.read_text())
        report = document["report"]
        relative = truth_path.relative_to(CORPUS)
        family = relative.parts[0]
        checked = report["callfrom_checked"]
        callfrom = f"{report['callfrom_agree']}/{checked}" if report["has_call_from"] else "-"
        group = document.get("shape") or document.get("model") or document.get("group") or document["name"]
        what = document.get("about", "")
        rows[family].append(
            f"| `{relative.parent}/{trace_path.name}` | {group} | {document['torch']} | {document['python']} | "
            f"{document['device']} | {document['steps']} | {report['top_ops']} | {report['dropped']} | "
            f"{report['truth_time_share']:.1%} | "
            f"{callfrom} | {trace_path.stat().st_size / 1024:.0f} KB | {what} |"
        )
        total = totals[family]
        total[0] += 1
        total[1] += report["top_ops"]
        total[2] += trace_path.stat().st_size
        total[3] += report["callfrom_agree"]
        total[4] += checked
    lines = [INTRO]
    lines.append("## Families\n")
    lines.append("| family | traces | top-level ops | size | CallFrom agreement |")
    lines.append("| --- | ---: | ---: | ---: | ---: |")
    for family, (count, ops, size, agree, checked) in sorted(totals.items()):
        agreement = f"{agree}/{checked}" if checked else "-"
        lines.append(f"| {family} | {count} | {ops} | {size / 1e6:.1f} MB | {agreement} |")
    header = (
        "| trace | shape / model | torch | python | device | profiled steps | top-level ops | dropped (A/B differ) "
        "| op time with truth | CallFrom agrees | size | what it holds |"
    )
    for family, family_rows in sorted(rows.items()):
        lines.append(f"\n## {family}\n")
        lines.append(FAMILY_NOTES.get(family, ""))
        lines.append(header)
        lines.append("| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        lines.extend(family_rows)
    (CORPUS / "README.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {CORPUS / 'README.md'}")
    return 0


FAMILY_NOTES = {
    "zoo": (
        "Script: `bench/corpus/capture_zoo.py` over `bench/corpus/zoo/` (`SHAPES`: one trace per shape, "
        "CPU, `torch.set_num_threads(1)`). Warm-up 1 step, then the profiled steps, each with "
        "`prof.step()`.\n"
    ),
    "transformers": (
        "Script: `bench/corpus/capture_transformers.py`: transformers 5.19.0 models built from tiny configs "
        "with random weights (no download), `eval()`, `torch.no_grad()`; `forward` traces profile 2 "
        "calls, `generate` traces 1 call of `generate(max_new_tokens=3, do_sample=False)`; both after "
        "one unprofiled call.\n"
    ),
    "sglang": (
        "Script: `bench/corpus/capture_sglang.py`: SGLang 0.5.23's own modules on CPU (installed "
        "with --no-deps).\n"
    ),
    "gpu": (
        "Script: `bench/corpus/capture_gpu.py --out DIR --tar FILE` on the GPU machine: the zoo and 3 "
        "transformers models (llama, mixtral, qwen3; forward and generate) on `cuda`, both runs in one "
        "process; `summary.json` beside the traces holds the environment and each case's report. Rows are "
        "kernels/memcpy/memset weighted by GPU time; each finds its op through its runtime launch "
        "(correlation id). The machine's transformers version is in each truth file "
        "(`package:transformers==X`): the bench reads that version's source, installed or under "
        "`build/src/transformers-X` (`make setup` unpacks 5.17.0 there).\n"
    ),
}


if __name__ == "__main__":
    raise SystemExit(main())
