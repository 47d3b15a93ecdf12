"""The Python frame rows of a trace and their names, read once per table (source files, steps and
layers all ask)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracer.model.events import Cat, EventTable

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class FrameNames:
    """``rows``: python_function rows in table order; ``names[i]``: the name of ``rows[i]``;
    ``distinct``: each name once, in order of first appearance (a dict used as an ordered set)."""

    rows: np.ndarray
    names: list[str]
    distinct: dict[str, None]


_last: tuple[weakref.ref, int, FrameNames] | None = None  # the table last asked about, and its answer


def frame_names(events: EventTable) -> FrameNames:
    """The frame names of `events`; the last table's answer is kept (held weakly) for the next caller."""
    global _last
    if _last is not None and _last[0]() is events and _last[1] == len(events):
        return _last[2]
    from tracer.join.columns import column, rows_where, values_at

    rows = rows_where(column(events.cat), (Cat.PYTHON_FUNCTION,))
    names = values_at(events.name, rows)
    found = FrameNames(rows, names, dict.fromkeys(names))
    _last = (weakref.ref(events), len(events), found)
    return found
