"""Terminal tables that fit the width they are given: low-value columns dropped first, long text cut
the way it reads best (a kernel name in the middle, a path from the left, prose wrapped), and a
``file:line`` never broken across lines. ``width=None`` (``--wide``) shows everything whole.

Every cell is untrusted text: it is shown as `rich.text.Text` (never parsed as markup) after control
characters are stripped.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rich import box
from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from tracer.formatting import cut_end, cut_middle, shorten_path
from tracer.render.escape import strip_control

BORDER_PER_COLUMN = 3  # "│ " before and " " after each cell
BORDER_EDGE = 1  # the closing "│"


@dataclass(frozen=True)
class Fitted:
    """A line that knows how to fit a width: ``fit(width)`` may return more than `width` characters
    when it cannot be shorter (a ``file:line`` is never cut); ``least`` is its shortest form."""

    full: str
    fit: Callable[[int], str]

    @property
    def least(self) -> int:
        return len(self.fit(1))


Line = str | Fitted


@dataclass
class Cell:
    lines: list[Line]
    style: str = ""


def _text(line: Line) -> str:
    return line.full if isinstance(line, Fitted) else line


CUTS: dict[str, Callable[[str, int], str]] = {
    "middle": cut_middle,
    "end": cut_end,
    "path": shorten_path,
}


@dataclass
class TableColumn:
    """A column to fit. ``flex``: how its text yields to a narrow table ("middle", "end", "path",
    "wrap"), None for a column shown whole or not at all. ``drop``: dropped in this order (1 first)
    when even the least widths do not fit; None: never dropped. ``grow``: flex columns get spare
    width in this order, first up to their ``want`` (the first line of each cell), then whole."""

    header: str
    cells: list[Cell] = field(default_factory=list)
    justify: JustifyMethod = "left"
    drop: int | None = None
    narrow_header: str | None = None
    flex: str | None = None
    min_width: int = 8
    grow: int = 0
    comfortable: int | None = None  # a flex column's width worth dropping other columns for (None: `want`)

    def _widths(self, first_only: bool = False) -> int:
        lines = [cell.lines[:1] if first_only else cell.lines for cell in self.cells]
        return max((len(strip_control(_text(line))) for cell in lines for line in cell), default=0)

    @property
    def natural(self) -> int:
        return max(len(self.header), self._widths())

    @property
    def want(self) -> int:
        return max(len(self.narrow_header or self.header), self._widths(first_only=True))

    @property
    def room(self) -> int:
        """The width other columns are dropped for: a flex column's comfortable width, else its least."""
        if self.flex is None:
            return self.least
        return max(self.least, min(self.want, self.comfortable or self.want))

    @property
    def least(self) -> int:
        header = len(self.narrow_header or self.header)
        if self.flex is None:
            return max(header, self._widths())
        fitted = max(
            (line.least for cell in self.cells for line in cell.lines if isinstance(line, Fitted)), default=0
        )
        return max(header, fitted, min(self.min_width, self.natural))


def table_width(widths: Sequence[int]) -> int:
    return sum(widths) + BORDER_PER_COLUMN * len(widths) + BORDER_EDGE


def fit_columns(columns: Sequence[TableColumn], width: int | None) -> list[tuple[TableColumn, int]]:
    """The columns shown and the width of each, for a table at most `width` wide (None: whole)."""
    if width is None:
        return [(column, column.natural) for column in columns]
    shown = list(columns)
    while table_width([c.room for c in shown]) > width:
        droppable = [c for c in shown if c.drop is not None]
        if not droppable:
            break
        shown.remove(min(droppable, key=lambda c: c.drop or 0))  # each has a drop (filtered above)
    widths = {id(c): c.least for c in shown}
    spare = width - table_width(list(widths.values()))
    # Nothing left to drop and still too wide (a very narrow terminal): flex columns give way below
    # their least, the last to grow first; only here may a long `file:line` be cut.
    for column in sorted((c for c in shown if c.flex is not None), key=lambda c: -c.grow):
        if spare >= 0:
            break
        give = min(-spare, widths[id(column)] - 4)
        if give > 0:
            widths[id(column)] -= give
            spare += give
    flexible = sorted((c for c in shown if c.flex is not None), key=lambda c: c.grow)
    for target in ("room", "want", "header", "natural"):
        for column in flexible if target != "header" else shown:
            if spare <= 0:
                break
            goal = len(column.header) if target == "header" else getattr(column, target)
            if target == "header" and goal - widths[id(column)] > spare:
                continue  # a header is shown whole or in its narrow form, never half-widened
            add = min(spare, max(0, goal - widths[id(column)]))
            widths[id(column)] += add
            spare -= add
    return [(column, widths[id(column)]) for column in shown]


def _fit_line(line: Line, width: int, flex: str | None) -> list[str]:
    if isinstance(line, Fitted):
        return [strip_control(line.fit(width))]
    text = strip_control(line)
    if flex is None or len(text) <= width:
        return [text]
    if flex == "wrap":
        return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]
    return [CUTS[flex](text, width)]


def render_fitted(
    columns: Sequence[TableColumn], width: int | None, *, title: str | None = None, **table_options
) -> Table:
    """A rich `Table` of `columns` fitted to `width` (None: every column whole)."""
    fitted = fit_columns(columns, width)
    table = Table(
        title=title,
        title_justify="left",
        box=box.HEAVY_HEAD,
        expand=False,
        **table_options,
    )
    for column, column_width in fitted:
        header = column.header
        if width is not None and len(header) > column_width and column.narrow_header:
            header = column.narrow_header
        table.add_column(
            header, justify=column.justify, width=column_width, no_wrap=True, overflow="ellipsis"
        )
    rows = max((len(c.cells) for c, _ in fitted), default=0)
    for index in range(rows):
        row = []
        for column, column_width in fitted:
            cell = column.cells[index] if index < len(column.cells) else Cell([""])
            lines = [
                part
                for line in cell.lines
                for part in _fit_line(line, column_width if width is not None else 10**6, column.flex)
            ]
            row.append(Text("\n".join(lines), style=cell.style))
        table.add_row(*row)
    return table


def fitted_width(columns: Sequence[TableColumn], width: int | None) -> int:
    """How wide the fitted table is (for printing a --wide table past the terminal's width)."""
    return table_width([w for _, w in fit_columns(columns, width)])


def print_fitted(console, renderable, columns: Sequence[TableColumn] | None, wide: bool) -> None:
    """Print `renderable` on `console`; with `wide`, on a console widened to the whole table (rich
    never prints wider than its console), every line whole however wide."""
    if not wide or columns is None:
        console.print(renderable)
        return
    width = console.width
    console.width = max(width, fitted_width(columns, None))
    try:
        console.print(renderable)
    finally:
        console.width = width
