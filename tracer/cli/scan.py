"""`kerneltrace scan`: map every copy/cast/layout site in a code base, ranked by risk."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracer.cli.common import (
    EXIT_FINDINGS,
    EXIT_OK,
    print_json,
    reports_input_errors,
    stderr_console,
    stdout_console,
)
from tracer.cli.rules import rules_dirs_option


@click.command(name="scan")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--package", "packages", multiple=True, metavar="NAME", help="Scan an installed package's source."
)
@click.option("--preset", "presets", multiple=True, metavar="NAME", help="Scan a preset, e.g. sglang-hot.")
@click.option("--include", multiple=True, metavar="GLOB", help="Only files whose path matches (repeatable).")
@rules_dirs_option
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Rows in the table (default 20); with --json, sites in the output (default all).",
)
@click.option(
    "--min-risk",
    type=click.FloatRange(0, 100),
    default=0.0,
    metavar="SCORE",
    help="Leave out sites below this risk (table, JSON, SARIF).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine output on stdout.")
@click.option("--sarif", metavar="FILE|-", help="Write SARIF 2.1.0 (GitHub code scanning) to FILE or stdout.")
@click.option(
    "--fail-on",
    type=click.FloatRange(0, 100),
    default=None,
    metavar="SCORE",
    help="Exit 1 when a site's risk is at or above SCORE.",
)
@click.option(
    "--jobs", type=click.IntRange(min=1), default=None, metavar="N", help="Worker processes (default: CPUs)."
)
@click.option("--no-cache", is_flag=True, help="Neither read nor write the on-disk cache.")
@reports_input_errors
def command(
    paths: tuple[Path, ...],
    packages: tuple[str, ...],
    presets: tuple[str, ...],
    include: tuple[str, ...],
    rules_dirs: tuple[Path, ...],
    top: int | None,
    min_risk: float,
    as_json: bool,
    sarif: str | None,
    fail_on: float | None,
    jobs: int | None,
    no_cache: bool,
) -> None:
    """Find every site that can launch a copy, cast or layout kernel, ranked by risk.

    \b
    Examples:
      kerneltrace scan --package sglang
      kerneltrace scan --preset sglang-hot --top 15
      kerneltrace scan src/ --sarif kerneltrace.sarif --fail-on 80

    Exit codes: 0 ok, 1 a site at or above --fail-on, 2 usage or input error.
    """
    from tracer.static import load_rule_set, preset_paths, resolve_package, scan

    if sarif == "-" and as_json:
        raise click.UsageError("--sarif - and --json both write to stdout; pick one")
    targets: list[Path] = list(paths)
    targets += [resolve_package(name) for name in packages]
    for preset in presets:
        targets += preset_paths(preset)
    if not targets:
        raise click.UsageError("give a PATH, --package NAME or --preset NAME")

    # A progress bar only on a terminal: piped, it would leave a blank line before any error.
    quiet = as_json or sarif == "-" or not stderr_console().is_terminal
    if quiet:
        result = scan(
            targets, rules_dirs=rules_dirs, include=include, jobs=jobs, cache_dir=False if no_cache else None
        )
    else:
        result = _scan_with_progress(scan, targets, rules_dirs, include, jobs, no_cache)

    sites = [s for s in result.sites if s.risk >= min_risk]
    if sarif is not None:
        _write_sarif(sarif, sites, load_rule_set(rules_dirs).rules, result.skipped)
    if as_json:
        shown = sites if top is None else sites[:top]
        data = result.to_dict()
        data["sites_total"] = len(sites)
        data["sites"] = [s.to_dict() for s in shown]
        print_json(data)
    elif sarif != "-":
        _print_table(result, sites, 20 if top is None else top)
    if fail_on is not None and any(s.risk >= fail_on for s in result.sites):
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_OK)


def _scan_with_progress(scan, targets, rules_dirs, include, jobs, no_cache):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("scanning"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("files"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=stderr_console(), transient=True) as bar:
        task = bar.add_task("scan", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return scan(
            targets,
            rules_dirs=rules_dirs,
            include=include,
            jobs=jobs,
            cache_dir=False if no_cache else None,
            progress=progress,
        )


def _write_sarif(destination: str, sites, rules, skipped) -> None:
    import orjson

    from tracer.output_files import json_ready
    from tracer.render.sarif import sarif_log

    log = sarif_log(sites, rules, skipped=skipped)
    try:
        payload = orjson.dumps(log, option=orjson.OPT_INDENT_2) + b"\n"
    except orjson.JSONEncodeError:  # a file name with bytes that are not UTF-8
        payload = orjson.dumps(json_ready(log), option=orjson.OPT_INDENT_2) + b"\n"
    if destination == "-":
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
    else:
        from tracer.output_files import write_output

        write_output(destination, payload)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _print_table(result, sites, top: int) -> None:
    from rich.table import Table
    from rich.text import Text

    from tracer.render.escape import strip_control, terminal

    def safe(text: str) -> Text:  # file names and code are untrusted: no escapes reach the terminal
        return Text(strip_control(text))

    console = stdout_console()
    table = Table(title=f"Top {min(top, len(sites))} of {len(sites)} sites by risk", title_justify="left")
    for name, options in (
        ("#", {"justify": "right"}),
        ("risk", {"justify": "right"}),
        ("rule", {}),
        ("file:line", {"overflow": "fold"}),
        ("function", {"overflow": "fold"}),
        ("call", {"overflow": "fold"}),
        ("why", {}),
    ):
        table.add_column(name, **options)
    for rank, site in enumerate(sites[:top], 1):
        why = "; ".join(site.reasons[1:]) or "base score only"
        table.add_row(
            str(rank),
            f"{site.risk:g}",
            safe(site.rule),
            safe(site.location),
            safe(site.function),
            safe(_one_line(site.text, 70)),
            safe(why),
        )
    if top:
        console.print(table)
    skipped = f", {len(result.skipped)} skipped" if result.skipped else ""
    console.print(
        f"{len(result.sites)} sites in {result.files_scanned} files{skipped} "
        f"({result.cache_hits} from cache) in {result.seconds:.1f} s"
    )
    if result.skipped:
        errors = stderr_console()
        for item in result.skipped[:10]:
            errors.print(f"skipped {terminal(item.path)}: {terminal(item.reason)}")
        if len(result.skipped) > 10:
            errors.print(f"... and {len(result.skipped) - 10} more (see --json)")
