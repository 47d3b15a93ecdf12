"""`kerneltrace explain TRACE`: the hot kernels of a profiler trace, each with the line that launched it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import click

from tracer.cli.common import print_json, reports_input_errors, wide_option
from tracer.cli.options import TraceOptions, analyse, top_option, trace_options
from tracer.cli.rank_dirs import RankOptions, analyse_ranks, rank_options
from tracer.render.columns import json_fields
from tracer.render.console import table_console

JSON_SHAPE = """\b
--json prints one object (all findings, ranked; numbers in ns, bytes, GB/s):
  trace, time_basis ("gpu" | "cpu"), device, peak_gbps, total_ns, window_ns,
  gpu_busy_fraction, steps, step_ns, step_method (how the steps were found),
  step_evidence [str], step_starts_ns [int], step_ends_ns [int],
  step_kinds [str], steps_exact (false: calls/step are approximate), layers,
  attributed_fraction, replay_fraction, replay_attributed_fraction, rank,
  notes [str],
  findings [{kernel, kernel_short, category, calls, total_ns, per_call_ns,
    share, steps, calls_per_step, invariant, bytes_per_call, bytes_basis,
    gbps, peak_fraction, shapes [str], waste,
    origin {location, key, answer, file, line, source, site_id, rule, confidence,
            evidence [str], ranges [str], frames [{file, function,
            def_line, call_line}], ops [str], replay, before_trace,
            candidates [str], fused [{file, line, ops [str], source,
            function}] (the user lines a compiled kernel fused), compiled
            {graph, function, file, def_line, call_file, call_line, ...}
            (its torch.compile'd region) or null}}]
With a directory TRACE: {directory, ranks [{rank, path, base_time_ns,
  own_work_per_step_ns, collective_ns, collective_calls, collective_source,
  step_starts_ns [int], step_method, analysis {the object above}}], combined
  [{kernel, kernel_short, category, origin_key, location, source, total_ns,
  share, ranks [{rank, calls, total_ns, per_step_ns, per_call_ns,
  calls_per_step, share}]}],
  consistency [str], notes [str]}
{columns}"""


JSON_SHAPE = JSON_SHAPE.replace(
    "{columns}",
    textwrap.fill(
        f"The table's columns show these finding fields: {json_fields()}.",
        76,
        subsequent_indent="  ",
        break_on_hyphens=False,
    ),
)


@click.command(epilog=JSON_SHAPE, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("trace", type=click.Path(path_type=Path))
@trace_options
@top_option(None, "Rows to show (default 15; --json: all).")
@rank_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (shape below).")
@click.option("--markdown", is_flag=True, help="Markdown for pasting into an issue.")
@wide_option
@reports_input_errors
def command(
    trace: Path,
    options: TraceOptions,
    top: int | None,
    ranks: RankOptions,
    as_json: bool,
    markdown: bool,
    wide: bool,
) -> None:
    """Rank the GPU kernels of TRACE (a torch.profiler .json/.json.gz) by time, and say for each which
    Python line launched it, how often per step (and whether that is once per layer), how many bytes it
    moves per call and how close that runs to the device's peak bandwidth. Also says how much of the
    time the GPU sat idle (launch-bound). Traces without GPU activity are explained by CPU op time.
    CUDA-graph replays are attributed to their capture-time lines when the capture was profiled (in
    TRACE or --capture). TRACE may be a directory of per-rank traces (SGLang's *-TP-<rank>*.trace.json.gz):
    each rank is explained in parallel, then combined, with a cross-rank consistency check.
    A trace too big for this machine's memory is refused up front: --steps or --window explain part of it.
    """
    if trace.is_dir():
        _explain_ranks(trace, options, ranks, top, as_json, markdown, wide)
        return
    analysis = analyse(trace, options)
    if as_json:
        data = analysis.to_dict()
        if top is not None:
            data["findings"] = data["findings"][:top]
        print_json(data)
    elif markdown:
        from tracer.render.markdown import render_markdown

        click.echo(render_markdown(analysis, top=top or 15), nl=False)
    else:
        from tracer.render.table import print_table

        print_table(analysis, table_console(), top=top or 15, wide=wide)


def _explain_ranks(
    directory: Path,
    options: TraceOptions,
    ranks: RankOptions,
    top: int | None,
    as_json: bool,
    markdown: bool,
    wide: bool = False,
) -> None:
    """TRACE is a directory of per-rank traces: `tracer.ranks` explains and compares them."""
    from tracer.render.ranks import print_rank_report, rank_report_markdown

    report = analyse_ranks(directory, options, ranks)
    if as_json:
        print_json(report.to_dict())
    elif markdown:
        click.echo(rank_report_markdown(report, top=top or 15), nl=False)
    else:
        print_rank_report(report, table_console(), top=top or 15, wide=wide)
