"""The static map and the rules for people: `kerneltrace scan`'s and `kerneltrace rules`' tables,
fitted to the terminal's width (`tracer.render.fit`). File names, code and rule text are shown as
text, never as markup (``buf[idx] = value`` stays whole)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from rich.console import Console
from rich.text import Text

from tracer.formatting import shorten_path
from tracer.render.escape import strip_control
from tracer.render.fit import Cell, Fitted, TableColumn, print_fitted, render_fitted

CALL_TEXT = 70  # a site's call text, flattened to one line, is cut here even in a wide table


def one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _print(console: Console, columns: list[TableColumn], wide: bool, title: str) -> None:
    table = render_fitted(columns, None if wide else console.width, title=title)
    print_fitted(console, table, columns, wide)


def scan_columns(sites: Sequence[Any]) -> list[TableColumn]:  # sites: tracer.model.Site
    """#, risk, rule, file:line (shortened from the left, never broken), function, call, why."""
    whys = ["; ".join(site.reasons[1:]) or "base score only" for site in sites]
    return [
        TableColumn("#", [Cell([str(i)]) for i in range(1, len(sites) + 1)], justify="right"),
        TableColumn("risk", [Cell([f"{site.risk:g}"]) for site in sites], justify="right"),
        TableColumn("rule", [Cell([site.rule]) for site in sites], drop=3),
        TableColumn(
            "file:line",
            [Cell([Fitted(site.location, partial(shorten_path, site.location))]) for site in sites],
            flex="path",
            comfortable=30,
            grow=1,
        ),
        TableColumn(
            "function",
            [Cell([site.function]) for site in sites],
            flex="middle",
            drop=2,
            grow=0,
            comfortable=20,
        ),
        TableColumn(
            "call",
            [Cell([one_line(site.text, CALL_TEXT)]) for site in sites],
            flex="end",
            grow=2,
            comfortable=30,
        ),
        TableColumn(
            "why", [Cell([why]) for why in whys], flex="wrap", drop=1, grow=3, comfortable=30, min_width=24
        ),
    ]


def print_scan_table(
    console: Console, result: Any, sites: Sequence[Any], top: int, *, wide: bool = False
) -> None:
    """The top `top` sites by risk, then one line of totals (result: `tracer.static.ScanResult`)."""
    if top:
        shown = list(sites[:top])
        _print(console, scan_columns(shown), wide, f"Top {len(shown)} of {len(sites)} sites by risk")
    skipped = f", {len(result.skipped)} skipped" if result.skipped else ""
    console.print(
        Text(
            f"{len(result.sites)} sites in {result.files_scanned} files{skipped} "
            f"({result.cache_hits} from cache) in {result.seconds:.1f} s"
        )
    )


def print_skipped(console: Console, skipped: Sequence[Any], limit: int = 10) -> None:
    for item in skipped[:limit]:
        console.print(Text(f"skipped {strip_control(item.path)}: {strip_control(item.reason)}"))
    if len(skipped) > limit:
        console.print(Text(f"... and {len(skipped) - limit} more (see --json)"))


def rules_columns(rules: Sequence[Any]) -> list[TableColumn]:  # rules: tracer.static.Rule
    return [
        TableColumn("code", [Cell([rule.code]) for rule in rules]),
        TableColumn("name", [Cell([rule.name]) for rule in rules]),
        TableColumn("family", [Cell([rule.family]) for rule in rules], drop=2),
        TableColumn("base", [Cell([f"{rule.base:g}"]) for rule in rules], justify="right", drop=1),
        TableColumn(
            "lowers to",
            [Cell([" -> ".join(rule.aten_ops) or "-"]) for rule in rules],
            flex="wrap",
            drop=3,
            grow=2,
            comfortable=18,
            min_width=14,
        ),
        TableColumn(
            "summary",
            [Cell([rule.summary]) for rule in rules],
            flex="wrap",
            grow=0,
            comfortable=30,
            min_width=20,
        ),
    ]


def print_rules_table(console: Console, rules: Sequence[Any], *, wide: bool = False) -> None:
    _print(console, rules_columns(rules), wide, f"{len(rules)} rules")
