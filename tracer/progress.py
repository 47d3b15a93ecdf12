"""How far long work has got (reading a trace, scanning source), for whoever listens.

The work reports ``(what, done, total)`` in bytes, its honest measure: reading a trace goes at the
pace of its bytes, a scan at the pace of the source it parses. Nothing listens unless a command
installs a listener (`listening`), so the Python API stays silent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

Listener = Callable[[str, int, int], None]  # (what, done, total)

_listeners: list[Listener] = []


def report(what: str, done: int, total: int) -> None:
    """`done` of `total` bytes of `what` ("reading trace.json.gz", "scanning source")."""
    for listener in _listeners:
        listener(what, done, total)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Call `listener` with every report made inside the block."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
