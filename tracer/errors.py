"""The one error type users see: a bad input, named by file, reported in one line (exit code 2)."""

from __future__ import annotations


class InputError(Exception):
    """A problem with a user's input file or arguments, not a bug in kerneltrace.

    `str(err)` is the one line the CLI prints: ``path: problem``. It crosses process boundaries
    intact (a rank explained in a worker process raises it in the parent unchanged).
    """

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = " ".join(problem.split())  # always one line
        super().__init__(f"{self.path}: {self.problem}")

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str]]:
        # Exception's own pickling passes `args` (the joined line) to __init__, which takes two.
        return (type(self), (self.path, self.problem))
