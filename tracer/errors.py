"""The one error type users see: a bad input, named by file, reported in one line (exit code 2)."""

from __future__ import annotations


class InputError(Exception):
    """A problem with a user's input file or arguments, not a bug in kerneltrace.

    `str(err)` is the one line the CLI prints: ``path: problem``.
    """

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = " ".join(problem.split())  # always one line
        super().__init__(f"{self.path}: {self.problem}")
