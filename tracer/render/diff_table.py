"""The diff of two analyses as a table for people: step time, then one row per origin."""

from __future__ import annotations

from functools import partial
from typing import Any

from tracer.formatting import format_change, format_count, format_duration, shorten_path
from tracer.render.fit import Cell, Fitted, TableColumn, print_fitted, render_fitted

CHANGE_STYLES = {"faster": "green", "vanished": "green", "slower": "red", "new": "dark_orange", "same": "dim"}


def _time(ns: float) -> str:
    return format_duration(ns) if ns else "-"


def _where_fit(where: str, located: bool, width: int) -> str:
    return shorten_path(where, width) if located else where


def _where(row: Any) -> str:
    """The origin as the explain table names it (``file:line``), moved lines noted."""
    where = row.where
    if row.before_key:
        where += f" (was line {row.before_key.rsplit(':', 1)[-1]})"
    return where


def diff_columns(diff: Any, top: int) -> list[TableColumn]:  # diff: AnalysisDiff
    unit = "/step" if diff.per == "step" else ""
    rows = diff.origins[:top]
    origins, changes, times, deltas, calls = [], [], [], [], []
    for row in rows:
        style = CHANGE_STYLES.get(row.change, "")
        where = _where(row)
        shown = ", ".join(row.kernels[:2]) + (
            f" +{len(row.kernels) - 2} more" if len(row.kernels) > 2 else ""
        )
        located = row.location != "?"
        origins.append(Cell([Fitted(where, partial(_where_fit, where, located)), shown]))
        change = (
            row.change if row.change in ("new", "vanished") else f"{row.change} {format_change(row.ratio)}"
        )
        changes.append(Cell([change], style))
        times.append(Cell([f"{_time(row.before_ns)} → {_time(row.after_ns)}"]))
        sign = "-" if row.delta_ns < 0 else "+"
        deltas.append(Cell([f"{sign}{format_duration(abs(row.delta_ns))}"], style))
        calls.append(Cell([f"{format_count(row.before_calls)} → {format_count(row.after_calls)}"]))
    return [
        TableColumn("origin (kernels)", origins, flex="end", comfortable=28),
        TableColumn("change", changes),
        TableColumn(f"time{unit}", times, justify="right"),
        TableColumn("Δ", deltas, justify="right", drop=1),
        TableColumn(f"calls{unit}", calls, justify="right", drop=2),
    ]


def print_diff(diff, top: int, console=None, *, wide: bool = False) -> None:  # diff: AnalysisDiff
    """The diff for people: step and total time, then one row per origin, biggest change first."""
    from rich.text import Text

    from tracer.render.escape import strip_control

    if console is None:
        from tracer.render.console import table_console

        console = table_console()
    unit = "/step" if diff.per == "step" else ""
    basis = "GPU time" if diff.time_basis == "gpu" else "CPU op time"
    if diff.before_step_ns is not None and diff.after_step_ns is not None:
        console.print(
            f"a step takes {format_duration(diff.before_step_ns)} → {format_duration(diff.after_step_ns)} "
            + (
                f"(wall, mean; {format_change(diff.step_ratio)})"
                if diff.step_ratio is not None
                else "(wall, mean)"
            )
        )
    less = "less" if diff.gpu_delta_ns < 0 else "more"
    console.print(
        f"{basis}{unit} {format_duration(diff.before_gpu_ns)} → {format_duration(diff.after_gpu_ns)} "
        f"({format_duration(abs(diff.gpu_delta_ns))} {less})"
    )
    columns = diff_columns(diff, top)
    title = f"{basis} per origin, biggest change first"
    table = render_fitted(columns, None if wide else console.width, title=title)
    print_fitted(console, table, columns, wide)
    if len(diff.origins) > top:
        console.print(f"({len(diff.origins) - top} more origins: --top N or --json)")
    for note in diff.notes:
        console.print(Text(f"note: {strip_control(note)}"))
