"""Run a user's ``python script.py ARGS`` / ``python -m module ARGS`` in this process, as python would.

The script itself is compiled with its site ranges (runpy would compile it without them); a module
run with ``-m`` goes through the import hook like any other module.
"""

from __future__ import annotations

import builtins
import importlib.util
import os
import runpy
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tracer.errors import InputError
from tracer.instrument.patch import InstrumentationReport
from tracer.instrument.plan import SitePlan
from tracer.instrument.rewrite import rewrite_module
from tracer.instrument.runtime import HELPER_NAME, install_helper, site_range


@dataclass(frozen=True)
class CommandLine:
    """What to run: a script file or a module (``-m``), and its arguments."""

    script: Path | None
    module: str | None
    args: tuple[str, ...]

    @property
    def label(self) -> str:
        return str(self.script) if self.script is not None else f"-m {self.module}"

    def source_path(self) -> Path | None:
        """The file that runs: the script, or the module's source (its package's __main__.py)."""
        if self.script is not None:
            return self.script
        try:
            spec = importlib.util.find_spec(self.module or "")
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return None
        if spec.submodule_search_locations:  # a package: python -m runs its __main__
            main = Path(spec.origin).with_name("__main__.py")
            return main if main.exists() else None
        return Path(spec.origin)


def parse_command_line(argv: Sequence[str]) -> CommandLine:
    """``[python] script.py ARGS`` or ``[python] -m module ARGS``; InputError for anything else."""
    words = list(argv)
    if words and _is_python(words[0]):
        words = words[1:]
    if not words:
        raise InputError(
            "command", "nothing to run: give `-- python script.py ARGS` or `-- python -m module ARGS`"
        )
    if words[0] == "-m":
        if len(words) < 2:
            raise InputError("-m", "needs a module name")
        return CommandLine(None, words[1], tuple(words[2:]))
    if words[0].startswith("-"):
        raise InputError(words[0], "python options other than -m are not supported here")
    script = Path(words[0])
    if not script.is_file():
        raise InputError(script, "no such script")
    return CommandLine(script, None, tuple(words[1:]))


def _is_python(word: str) -> bool:
    name = os.path.basename(word)
    return (
        word == sys.executable
        or name == "python"
        or (name.startswith("python") and name[6:].replace(".", "").isdigit())
    )


def run(
    command: CommandLine, plan: SitePlan | None = None, report: InstrumentationReport | None = None
) -> None:
    """Run `command` with `sys.argv` set; SystemExit from the script propagates as it would."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if command.module is not None:
            sys.path.insert(0, os.getcwd())
            sys.argv = [command.module, *command.args]
            runpy.run_module(
                command.module, run_name="__main__", alter_sys=True, init_globals={HELPER_NAME: site_range}
            )
        else:
            assert command.script is not None
            script = command.script.resolve()
            sys.path.insert(0, str(script.parent))
            sys.argv = [str(command.script), *command.args]
            _run_script(script, plan, report)
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path


def _run_script(script: Path, plan: SitePlan | None, report: InstrumentationReport | None) -> None:
    source = script.read_bytes()
    filename = str(script)
    sites = plan.sites_for_file(filename) if plan is not None else []
    if sites:
        result = rewrite_module(source, sites, filename)
        code = result.compile(filename)
        if report is not None:
            report.add(result)
            report.imported.append("__main__")
    else:
        code = compile(source, filename, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=filename, __builtins__=builtins, __cached__=None, __loader__=None, __spec__=None
    )
    install_helper(main.__dict__)
    saved_main = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
