"""A progress line for long work, on a terminal only: one line on stderr, rewritten in place.

It listens to `tracer.progress` (bytes read of a trace, bytes of source scanned): the bar moves at
the pace of the work, not of a count of files. Nothing is drawn before the work has taken `after`
seconds, nothing at all when stderr is not a terminal (a pipe, a file, CI), and the line is wiped
when the work ends. No thread draws it: the loader and the scanner fork workers, which a running
thread would make unsafe.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from typing import TextIO

from tracer.formatting import format_bytes, format_share

SHOW_AFTER_S = 2.0
REDRAW_S = 0.1
BAR = 24


def bar(fraction: float, width: int = BAR) -> str:
    filled = min(width, max(0, round(fraction * width)))
    return "━" * filled + "─" * (width - filled)


class ProgressLine:
    """A `tracer.progress` listener drawing ``reading t.json.gz ━━━━───── 45% 120 MB of 258 MB 3.1 s``.

    When a stage ends (done == total) and the work has already taken half of `after`, the line
    says what comes next (``then`` text), since that part reports nothing of its own.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        after: float = SHOW_AFTER_S,
        then: str = "",
        clock: Callable[[], float] = time.monotonic,
        terminal: bool | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if terminal is None:
            try:
                terminal = self.stream.isatty()
            except (AttributeError, ValueError):
                terminal = False
        self.terminal = terminal
        self.after = after
        self.then = then
        self.clock = clock
        self.started = clock()
        self.drawn_at: float | None = None
        self.shown = False

    def __call__(self, what: str, done: int, total: int) -> None:
        if not self.terminal:
            return
        now = self.clock()
        elapsed = now - self.started
        finished = total > 0 and done >= total
        if finished:
            if self.then and elapsed >= self.after / 2:
                self._draw(f"{what}: {format_bytes(total)} in {elapsed:.1f} s; {self.then}")
            elif self.shown:
                self._draw(f"{what}: {format_bytes(total)} in {elapsed:.1f} s")
            return
        if elapsed < self.after or (self.drawn_at is not None and now - self.drawn_at < REDRAW_S):
            return
        fraction = done / total if total > 0 else 0.0
        self._draw(
            f"{what} {bar(fraction)} {format_share(fraction):>6} "
            f"{format_bytes(done)} of {format_bytes(total)}  {elapsed:.1f} s"
        )

    def _draw(self, text: str) -> None:
        width = shutil.get_terminal_size((80, 24)).columns
        try:
            self.stream.write("\r" + text[: max(1, width - 1)] + "\x1b[K")
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: the work goes on
            self.terminal = False
            return
        self.shown = True
        self.drawn_at = self.clock()

    def close(self) -> None:
        """Wipe the line (the output that follows starts on a clean line)."""
        if self.shown and self.terminal:
            try:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            except (OSError, ValueError):
                pass
        self.shown = False
