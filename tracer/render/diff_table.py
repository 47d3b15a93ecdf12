"""The diff of two analyses as a rich table for people: step time, then one row per origin."""

from __future__ import annotations

CHANGE_STYLES = {"faster": "green", "vanished": "green", "slower": "red", "new": "dark_orange", "same": "dim"}


def _percent(ratio: float | None) -> str:
    from tracer.graph.labels import format_change

    return "" if ratio is None else format_change(ratio)


def _time(ns: float) -> str:
    from tracer.graph.labels import format_ns

    return format_ns(ns) if ns else "-"


def print_diff(diff, top: int, console=None) -> None:  # diff: AnalysisDiff, console: rich Console
    """The diff for people: step and total time, then one row per origin, biggest change first."""
    import posixpath

    from rich.table import Table

    from tracer.graph.labels import format_count, format_ns
    from tracer.render.escape import terminal

    if console is None:
        from tracer.cli.common import stdout_console

        console = stdout_console()
    unit = "/step" if diff.per == "step" else ""
    basis = "GPU time" if diff.time_basis == "gpu" else "CPU op time"
    if diff.before_step_ns is not None and diff.after_step_ns is not None:
        console.print(
            f"step time {format_ns(diff.before_step_ns)} → {format_ns(diff.after_step_ns)} "
            f"({_percent(diff.step_ratio)})"
        )
    less = "less" if diff.gpu_delta_ns < 0 else "more"
    console.print(
        f"{basis}{unit} {format_ns(diff.before_gpu_ns)} → {format_ns(diff.after_gpu_ns)} "
        f"({format_ns(abs(diff.gpu_delta_ns))} {less})"
    )
    table = Table(title=f"{basis} per origin, biggest change first", title_justify="left")
    table.add_column("origin (kernels)", overflow="fold", ratio=1, min_width=16)
    table.add_column("change", no_wrap=True)
    table.add_column(f"time{unit}", justify="right", no_wrap=True)
    table.add_column("Δ", justify="right", no_wrap=True)
    table.add_column(f"calls{unit}", justify="right", no_wrap=True)
    for row in diff.origins[:top]:
        style = CHANGE_STYLES.get(row.change, "")
        where = posixpath.basename(row.where) if row.location != "?" else row.where
        if row.before_key:
            where += f" (was line {row.before_key.rsplit(':', 1)[-1]})"
        sign = "-" if row.delta_ns < 0 else "+"
        change = row.change if row.change in ("new", "vanished") else f"{row.change} {_percent(row.ratio)}"
        shown = ", ".join(row.kernels[:2]) + (
            f" +{len(row.kernels) - 2} more" if len(row.kernels) > 2 else ""
        )
        kernels = terminal(shown)
        table.add_row(
            f"{terminal(where)}\n[dim]{kernels}[/]",
            f"[{style}]{change}[/]",
            f"{_time(row.before_ns)} → {_time(row.after_ns)}",
            f"[{style}]{sign}{format_ns(abs(row.delta_ns))}[/]",
            f"{format_count(row.before_calls)} → {format_count(row.after_calls)}",
        )
    console.print(table)
    if len(diff.origins) > top:
        console.print(f"({len(diff.origins) - top} more origins: --top N or --json)")
    for note in diff.notes:
        console.print(f"note: {terminal(note)}")
