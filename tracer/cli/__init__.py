"""The `kerneltrace` command line: one module per command, registered here."""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import traceback
from pathlib import Path

import click

from tracer.version import __version__

# command name -> module under tracer.cli defining a click command called `command`.
# Modules import their heavy dependencies (torch, libcst, graphviz) inside the command body,
# so `kerneltrace --help` stays fast.
COMMANDS = {
    "scan": "scan",
    "rules": "rules",
    "explain": "explain",
    "graph": "graph",
    "report": "report",
    "annotate": "annotate",
    "diff": "diff",
    "profile": "profile",
}


INTERNAL_ERROR = 3  # exit code of a bug in kerneltrace (0 ok, 1 findings, 2 usage or input error)
DEBUG_ENV = "KERNELTRACE_DEBUG"


def internal_error_line(err: BaseException) -> str:
    """One line for an exception no input explains: what, where in kerneltrace, how to see more."""
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if f"{os.sep}tracer{os.sep}" in f.filename] or frames
    where = f" at {Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else ""
    message = " ".join(str(err).split())[:300]
    return (
        f"kerneltrace: internal error: {type(err).__name__}: {message}{where} "
        f"(a bug in kerneltrace, not in your input: {DEBUG_ENV}=1 shows the traceback)"
    )


class LazyGroup(click.Group):
    """Imports a command's module only when that command runs (or help lists it).

    Usage errors (a missing file, a bad option value) print as one line, like input errors.
    """

    def main(self, *args, **kwargs):  # click's own signature
        kwargs.pop("standalone_mode", None)
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as err:
            hint = f" (try '{err.ctx.command_path} --help')" if err.ctx is not None else ""
            click.echo(f"kerneltrace: error: {' '.join(err.format_message().split())}{hint}", err=True)
            sys.exit(2)
        except click.ClickException as err:
            click.echo(f"kerneltrace: error: {' '.join(err.format_message().split())}", err=True)
            sys.exit(err.exit_code)
        except click.Abort:
            click.echo("kerneltrace: aborted", err=True)
            sys.exit(1)
        except Exception as err:  # a bug of ours: one line; the traceback on request
            if os.environ.get(DEBUG_ENV):
                raise
            click.echo(internal_error_line(err), err=True)
            sys.exit(INTERNAL_ERROR)

    def resolve_command(self, ctx: click.Context, args: list[str]):  # click's own signature
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as err:
            name = args[0] if args else ""
            close = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.6)
            if close and name not in COMMANDS:
                raise click.UsageError(f"No such command {name!r}. Did you mean {close[0]!r}?", ctx) from err
            raise

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module_name = COMMANDS.get(name)
        if module_name is None:
            return None
        try:
            module = importlib.import_module(f"tracer.cli.{module_name}")
        except ModuleNotFoundError as err:  # a command not built yet in this checkout
            if err.name == f"tracer.cli.{module_name}":
                return None
            raise
        return module.command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kerneltrace")
def main() -> None:
    """Find which line of Python launched each hot GPU kernel, and why it is there.

    Exit codes: 0 ok, 1 findings at or above --fail-on, 2 usage or input error, 3 a bug in
    kerneltrace (one line; KERNELTRACE_DEBUG=1 shows the traceback).
    """
