"""`kerneltrace scan`: map every copy/cast/layout site in a code base, ranked by risk."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from tracer.cli.common import EXIT_FINDINGS, EXIT_OK, print_json, reports_input_errors, wide_option
from tracer.cli.rules import rules_dirs_option
from tracer.render.console import stderr_console, table_console
from tracer.static.platform import ANY, OTHER_PLATFORM_WEIGHT, PLATFORMS, apply_platform, detect_platform


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
@click.option(
    "--platform",
    type=click.Choice(["auto", *PLATFORMS]),
    default="auto",
    show_default=True,
    help="Rank code written for other accelerators lower (xpu_backend.py, forward_npu, ...: "
    f"{OTHER_PLATFORM_WEIGHT:+g}). auto: this machine's (NVIDIA's driver: cuda; ROCm: rocm; none: any).",
)
@wide_option
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
    platform: str,
    wide: bool,
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

    from tracer.cli.common import progress_line

    with progress_line():  # on a terminal only, by bytes of source scanned
        result = scan(
            targets, rules_dirs=rules_dirs, include=include, jobs=jobs, cache_dir=False if no_cache else None
        )

    if platform == "auto":
        platform = detect_platform()
    if platform != ANY:
        result = dataclasses.replace(result, sites=tuple(apply_platform(result.sites, platform)))
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
        from tracer.render.scan_table import print_scan_table, print_skipped

        print_scan_table(table_console(), result, sites, 20 if top is None else top, wide=wide)
        if result.skipped:
            print_skipped(stderr_console(), result.skipped)
    if fail_on is not None and any(s.risk >= fail_on for s in result.sites):
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_OK)


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
