"""Regular expressions from users' rule files, matched with a time bound.

A pattern such as ``^(a|aa)+$`` backtracks exponentially on a line of scanned code (also untrusted).
Python's `re` cannot be interrupted, so user patterns are compiled with the `regex` package and
every search carries a timeout; a pattern that runs out of time is reported as the rule file's error.
The built-in rules' patterns are ours and stay on `re`.
"""

from __future__ import annotations

from pathlib import Path

import regex

from tracer.errors import InputError

SEARCH_TIMEOUT_S = 0.25  # one search of one site's text (a line of code): microseconds when sane


class BoundedPattern:
    """`re.Pattern`-like (``.pattern``, ``.search``) over `regex`, with a time bound per search."""

    def __init__(self, pattern: str, source: Path) -> None:
        try:
            self._compiled = regex.compile(pattern)
        except (regex.error, ValueError, OverflowError) as err:
            raise InputError(source, f"bad regular expression {pattern!r}: {err}") from None
        self.pattern = pattern
        self.source = str(source)

    def search(self, text: str):  # -> regex.Match | None
        try:
            return self._compiled.search(text, timeout=SEARCH_TIMEOUT_S)
        except TimeoutError:
            shown = text if len(text) <= 40 else text[:40] + "…"
            raise InputError(
                self.source,
                f"regular expression {self.pattern!r} ran over {SEARCH_TIMEOUT_S} s on {shown!r} "
                "(catastrophic backtracking): rewrite it without nested or overlapping repetition",
            ) from None

    def __reduce__(self):
        return (type(self), (self.pattern, Path(self.source)))
