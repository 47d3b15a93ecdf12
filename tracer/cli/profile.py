"""`kerneltrace profile -- python script.py ARGS`: a script under torch.profiler, with exact-origin ranges."""

from __future__ import annotations

import contextlib
import sys
import traceback
from pathlib import Path

import click

from tracer.cli.common import print_json, reports_input_errors, wide_option
from tracer.errors import InputError
from tracer.render.console import table_console

DEFAULT_STEPS = 3


@click.command(
    context_settings={
        "help_option_names": ["-h", "--help"],
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
    }
)
@click.option(
    "--scan",
    "scan_paths",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="PATH",
    help="Scan PATH (file or directory, repeatable) for sites to bracket with ranges. "
    "Default: the script (or the -m module's package directory).",
)
@click.option(
    "--sites", type=click.Path(path_type=Path, dir_okay=False), help="Sites from `kerneltrace scan --json`."
)
@click.option(
    "--min-risk",
    type=click.FloatRange(0, 100),
    default=0.0,
    metavar="SCORE",
    help="Only sites at or above SCORE.",
)
@click.option(
    "--rule", "rules", multiple=True, metavar="CODE", help="Only sites of rule CODE (repeatable), e.g. KT101."
)
@click.option(
    "--step-function",
    metavar="QUALNAME",
    help="Dotted path of the function one call of which is one step, e.g. "
    "examples.glm5_kv_cast.model.DecodeModel.decode_step.",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=None,
    help=f"Steps to record (needs --step-function; default {DEFAULT_STEPS}). Without a step function "
    "the whole run is recorded.",
)
@click.option(
    "--warmup", type=click.IntRange(min=0), default=1, show_default=True, help="Steps run before recording."
)
@click.option(
    "--wait", type=click.IntRange(min=0), default=0, show_default=True, help="Steps skipped before warmup."
)
@click.option(
    "--function",
    "functions",
    multiple=True,
    metavar="QUALNAME",
    help="Also wrap this function in a kt:fn: range (repeatable), e.g. a layer's forward.",
)
@click.option(
    "--with-stack", is_flag=True, help="Also record Python stacks (slower; not needed for exact lines)."
)
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("out/kerneltrace-profile.json.gz"),
    show_default=True,
    help="Trace file to write (.json or .json.gz).",
)
@click.option(
    "--layers", type=click.IntRange(min=1), default=None, help="The model's layer count (for invariants)."
)
@click.option("--top", type=click.IntRange(min=1), default=15, show_default=True, help="Rows in the table.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the analysis as JSON (the script's stdout goes to stderr)."
)
@wide_option
@click.argument(
    "command_line", nargs=-1, type=click.UNPROCESSED, required=True, metavar="-- python SCRIPT [ARGS]..."
)
@reports_input_errors
def command(
    scan_paths: tuple[Path, ...],
    sites: Path | None,
    min_risk: float,
    rules: tuple[str, ...],
    step_function: str | None,
    steps: int | None,
    warmup: int,
    wait: int,
    functions: tuple[str, ...],
    with_stack: bool,
    out: Path,
    layers: int | None,
    top: int,
    as_json: bool,
    wide: bool,
    command_line: tuple[str, ...],
) -> None:
    """Run a Python script (or -m module) in this process under torch.profiler, with a
    record_function range around every statement that launches a scanned site, so each kernel gets
    its exact line without --with-stack; then write the trace and print the explain table.

    \b
    Examples:
      kerneltrace profile --step-function examples.glm5_kv_cast.model.DecodeModel.decode_step \\
          --steps 3 -- python -m examples.glm5_kv_cast.run --preset cpu-small --steps 5
      kerneltrace profile --scan mymodel/ -o out/trace.json.gz -- python train.py --epochs 1
    """
    from tracer.instrument.plan import SiteSelection
    from tracer.instrument.runner import parse_command_line, run
    from tracer.instrument.session import ProfileSession

    if steps is not None and step_function is None:
        raise InputError("--steps", "needs --step-function (the function one call of which is one step)")
    if step_function is not None and steps is None:
        steps = DEFAULT_STEPS
    target = parse_command_line(command_line)
    if str(Path.cwd()) not in sys.path:  # as `python -m` would: the script's imports resolve from here
        sys.path.insert(0, str(Path.cwd()))
    site_list = _sites(scan_paths, sites, target)
    selection = SiteSelection(min_risk=min_risk, rules=tuple(rules))
    session = ProfileSession(
        sites=site_list,
        steps=steps,
        out=out,
        with_stack=with_stack,
        warmup=warmup,
        wait=wait,
        functions=functions,
        step_function=step_function,
        selection=selection,
        explain=False,
        layers=layers,
    )
    failure: str | None = None
    redirect = contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()
    with redirect, session:
        try:
            run(target, session.instrumentation.plan, session.report)
        except SystemExit as err:
            if err.code not in (None, 0):
                failure = f"the script exited with status {err.code}"
        except Exception as err:  # noqa: BLE001 (the user's script failed: show its traceback, keep what was recorded)
            traceback.print_exc()
            failure = f"the script raised {type(err).__name__}: {err}"
    click.echo(f"kerneltrace: {session.report.summary()}; trace: {out}", err=True)
    if failure is not None and not out.exists():
        raise InputError(target.label, failure)
    analysis = session.explain_now(print_table=False)
    if analysis is not None:
        if as_json:
            data = analysis.to_dict()
            data["instrumentation"] = _report_dict(session.report)
            print_json(data)
        else:
            from tracer.render.table import print_table

            print_table(analysis, table_console(), top=top, wide=wide)
    if failure is not None:
        raise InputError(target.label, failure)


def _sites(scan_paths: tuple[Path, ...], sites_file: Path | None, target) -> list:
    """Sites from --sites and the scanned paths (default: the script, or the module's package)."""
    from tracer.api import read_sites
    from tracer.static import scan

    found = list(read_sites(sites_file)) if sites_file is not None else []
    paths = list(scan_paths)
    if not paths and sites_file is None:
        source = target.source_path()
        if source is not None:
            paths = [source if target.script is not None else source.parent]
    if paths:
        found.extend(scan(paths).sites)
    return found


def _report_dict(report) -> dict:
    return {
        "summary": report.summary(),
        "modules_at_import": report.imported,
        "modules_already_loaded": report.patched,
        "placed": [f"{s.location} {s.id}" for s in report.placed],
        "skipped": [{"site": f"{s.site.location} {s.site.id}", "reason": s.reason} for s in report.skipped],
        "failed": report.failed,
    }
