"""The consoles output is drawn on: stdout for tables and notes, stderr for side notes."""

from __future__ import annotations

import os

WIDTH_WHEN_PIPED = 200  # a table piped or captured without COLUMNS: wide enough for every column


def stdout_console():  # -> rich.console.Console
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def table_console():  # -> rich.console.Console
    """The console tables are fitted to: the terminal's width, else COLUMNS, else `WIDTH_WHEN_PIPED`."""
    console = stdout_console()
    if not console.is_terminal and not os.environ.get("COLUMNS", "").strip().isdigit():
        console.width = WIDTH_WHEN_PIPED
    return console


def stderr_console():  # -> rich.console.Console (notes)
    from rich.console import Console

    return Console(stderr=True, highlight=False)
