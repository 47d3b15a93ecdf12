"""Where a line sits in a module that the `write_package` fixture writes, and what the no-stack
join answered for an op of it."""

from __future__ import annotations


def line_of(text: str, needle: str) -> int:
    """The line number of the first line of `text` (a module's source as given to `write_package`,
    which starts with a newline) that contains `needle`."""
    return next(i for i, line in enumerate(text.strip("\n").splitlines(), 2) if needle in line)


def line_in(package, name: str, needle: str) -> int:
    """The line number of the first line of module file `name` under `package` (a folder) that
    contains `needle`."""
    lines = (package / name).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if needle in text)


def origins_of(analysis, op: str) -> list:
    """The origins of the analysis's findings whose op chain starts with `op`."""
    return [f.origin for f in analysis.findings if f.origin.ops and f.origin.ops[0] == op]


def assert_ranked_first(origins: list, file: str, line: int) -> None:
    """There are origins, each ranks `file`:`line` first, and each says it is a ranking."""
    assert origins
    for origin in origins:
        assert (origin.file, origin.line) == (file, line), origin.candidates
        assert origin.answer == "ranked" and origin.confidence < 0.5  # still a ranking
