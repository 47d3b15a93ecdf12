"""Where a line sits in a module that the `write_package` fixture writes."""

from __future__ import annotations


def line_of(text: str, needle: str) -> int:
    """The line number of the first line of `text` (a module's source as given to `write_package`,
    which starts with a newline) that contains `needle`."""
    return next(i for i, line in enumerate(text.strip("\n").splitlines(), 2) if needle in line)
