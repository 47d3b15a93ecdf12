"""`kerneltrace annotate`: the input trace, each attributed GPU event's args naming its origin line."""

from __future__ import annotations

from pathlib import Path

import click

from tracer.cli.common import print_json, reports_input_errors
from tracer.cli.options import (
    capture_option,
    config_option,
    derived_output,
    output_option,
    sites_option,
    source_option,
)
from tracer.render.console import stdout_console


@click.command(name="annotate")
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@source_option
@sites_option
@config_option
@capture_option
@output_option("Annotated trace to write; gzip when it ends in .gz [default: TRACE-NAME.annotated.json.gz].")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@reports_input_errors
def command(
    trace: str,
    source: tuple[str, ...],
    sites: str | None,
    config: str | None,
    capture: tuple[str, ...],
    output: str | None,
    as_json: bool,
) -> None:
    """Write TRACE again with `origin` (file:line), `site`, `source`, `rule` and `confidence` in the
    args of every GPU event whose origin is known (where only the file is, `origin` says so).
    Open it in Perfetto or chrome://tracing and click a kernel to see the line that launched it.
    Nothing else in the trace changes.
    """
    from tracer.api import attribute_trace
    from tracer.cli.common import progress_line
    from tracer.output_files import protect_inputs
    from tracer.render.annotate import write_annotated_trace
    from tracer.render.escape import terminal

    protect_inputs([trace, sites, config, *capture])
    with progress_line(then="joining..."):
        attributions = attribute_trace(trace, source=source, sites=sites, capture=capture, config=config)
    summary = write_annotated_trace(
        attributions, Path(output) if output else derived_output(trace, ".annotated.json.gz")
    )
    if as_json:
        print_json(summary)
        return
    stdout_console().print(
        f"wrote {terminal(summary.path)}: {summary.annotated} of {summary.gpu_events} GPU events name their "
        f"origin, {summary.with_line} of them the exact line ({summary.origins} origins)"
    )
