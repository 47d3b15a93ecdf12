"""What every command shares: one-line input errors (exit 2), consoles, JSON output."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import click
import orjson

from tracer.errors import InputError
from tracer.render.console import table_console

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT = 0, 1, 2

F = TypeVar("F", bound=Callable[..., Any])

# Input errors that did not stop the command (a bad rank among good ones): printed, one line each,
# after the command's output, and the exit code is then 2.
_deferred: list[InputError] = []


def defer_input_errors(errors: Iterable[InputError]) -> None:
    _deferred.extend(errors)


def reports_input_errors(func: F) -> F:
    """Turn an `InputError` into its one line on stderr and exit code 2 (never a traceback).

    An `OSError` that escaped the commands' own checks (a path too long for the OS, a permission
    denied, a full disk) is the user's environment, not a bug: it gets the same one line. Errors
    deferred by the command (`defer_input_errors`) are printed after its output, and exit 2 too.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _deferred.clear()  # a command run before in this process (a test's) left its own
        try:
            result = func(*args, **kwargs)
        except BrokenPipeError:  # the reader stopped early (`| head`): click exits 1, quietly
            raise
        except InputError as err:
            _print_errors([*_deferred, *getattr(err, "failures", ()), err])
        except OSError as err:
            where = err.filename if err.filename is not None else "kerneltrace"
            _print_errors([*_deferred, InputError(where, err.strerror or str(err))])
        except MemoryError:  # the machine's state, not a bug: loads are budgeted, but others use memory too
            _print_errors(
                [*_deferred, InputError("kerneltrace", "ran out of memory (see --steps, --window)")]
            )
        if _deferred:
            _print_errors(_deferred)
        return result

    return wrapper  # type: ignore[return-value]


def _print_errors(errors: list[InputError]) -> None:
    from tracer.render.escape import strip_control

    # File names (a rank directory's, a trace's own) can hold terminal escapes: never pass them on.
    for err in errors:
        click.echo(f"kerneltrace: error: {strip_control(err)}", err=True)
    sys.exit(EXIT_INPUT)


def print_json(data: Any) -> None:
    """Machine output on stdout: orjson, indented, with dataclasses and non-str keys handled (and
    names holding bytes that are not UTF-8, which orjson refuses, made `visible`)."""
    options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    try:
        payload = orjson.dumps(data, option=options)
    except orjson.JSONEncodeError:
        from tracer.output_files import json_ready

        payload = orjson.dumps(json_ready(data), option=options)
    sys.stdout.buffer.write(payload)
    sys.stdout.buffer.write(b"\n")
    sys.stdout.flush()


def table_width(wide: bool) -> int | None:
    """The width a command's tables fit (None: --wide, every column whole)."""
    return None if wide else table_console().width


wide_option = click.option(
    "--wide",
    is_flag=True,
    help="Every column whole, however wide the table gets (default: fit the terminal).",
)


@contextlib.contextmanager
def progress_line(then: str = "") -> Iterator[None]:
    """Show how far long work has got on stderr (a terminal only, after 2 s): `tracer.progress`'s
    reports drawn by `tracer.render.progress.ProgressLine`, wiped when the block ends."""
    from tracer.progress import listening
    from tracer.render.progress import ProgressLine

    line = ProgressLine(sys.stderr, then=then)
    try:
        with listening(line):
            yield
    finally:
        line.close()
