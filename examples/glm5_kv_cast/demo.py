"""The README's main job: diagnose the GLM-5 whole-KV-pool cast on CPU, verify the fix, draw the graph.

    python -m examples.glm5_kv_cast.demo [--preset cpu-small] [--steps 3] [--out out/demo]

1. scan this example's source for copy/cast sites (the static map);
2. run `cast_whole` decode steps with kerneltrace's site ranges (no `with_stack`) under torch.profiler;
3. explain the trace: top op, share, calls/step against the layer count, bytes, the exact line, the rule;
4. run the `gather_then_cast` fix the same way and diff the two;
5. write the HTML report and the SVG call graph.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from tracer.explain.diff import AnalysisDiff
    from tracer.model import Analysis
    from tracer.static import ScanResult

EXAMPLE_DIR = Path(__file__).resolve().parent


def profile_variant(variant: str, preset_name: str, steps: int, sites, out: Path):  # -> Analysis
    """Run `steps` instrumented decode steps of one variant; returns the explained trace."""
    import torch

    from examples.glm5_kv_cast.model import PRESETS, DecodeModel
    from tracer.instrument import profile

    preset = PRESETS[preset_name]
    model = DecodeModel(preset, variant, device=torch.device("cpu"), seed=0)
    token_hidden = model.example_input()
    model.decode_step(token_hidden, 0)  # warm-up outside the profiler
    with profile(
        sites=sites, steps=steps, warmup=1, out=out, explain=False, layers=preset.num_hidden_layers
    ) as run:
        for step in range(1, 2 + steps):
            model.decode_step(token_hidden, step)
            run.step()
    return run.explain_now(print_table=False)


@dataclass(frozen=True)
class DemoResult:
    """What the demo found: the static map, both analyses, their diff, and the files it wrote."""

    scan: ScanResult
    before: Analysis
    after: Analysis
    diff: AnalysisDiff
    graph_svg: Path
    report_html: Path


def run_demo(preset: str, steps: int, out: Path, console: Console) -> DemoResult:
    from rich.rule import Rule

    from tracer.explain.diff import diff_analyses
    from tracer.graph import build_graph
    from tracer.render.diff_table import print_diff
    from tracer.render.dot import render_graph
    from tracer.render.html import render_report, write_report
    from tracer.render.table import print_table
    from tracer.static import scan

    out.mkdir(parents=True, exist_ok=True)
    console.print(Rule("1. static map: copy/cast sites in examples/glm5_kv_cast"))
    found = scan([EXAMPLE_DIR], cache_dir=False)
    for site in found.sites[:3]:
        console.print(f"  risk {site.risk:3.0f}  {site.rule}  {site.location}  {site.text}")
        console.print(f"           {'; '.join(site.reasons)}", style="dim")
    console.print(f"  {len(found.sites)} sites in {found.files_scanned} files")

    console.print(
        Rule(f"2. profile {steps} decode steps of the bug (cast_whole), site ranges, no with_stack")
    )
    before = profile_variant("cast_whole", preset, steps, found.sites, out / "cast_whole.json.gz")
    print_table(before, console, top=5)

    console.print(Rule("3. the fix (gather_then_cast), profiled the same way, and the diff"))
    after = profile_variant("gather_then_cast", preset, steps, found.sites, out / "gather_then_cast.json.gz")
    diff = diff_analyses(before, after)
    print_diff(diff, top=6, console=console)

    console.print(Rule("4. report and call graph"))
    graph = build_graph(before, top=10)
    svg = render_graph(graph, out / "cast_whole.svg")
    report = write_report(
        render_report(before, graph, source_roots=[EXAMPLE_DIR.parent.parent], top=10), out / "report.html"
    )
    console.print(f"  call graph: {svg}")
    console.print(f"  report:     {report}")
    console.print(f"  traces:     {out / 'cast_whole.json.gz'}, {out / 'gather_then_cast.json.gz'}")
    return DemoResult(found, before, after, diff, svg, report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu-small")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("out/demo"))
    args = parser.parse_args(argv)

    from rich.console import Console

    # Wide enough for the tables when the output is piped (rich falls back to 80 columns).
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    started = time.perf_counter()
    run_demo(args.preset, args.steps, args.out, console)
    console.print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
