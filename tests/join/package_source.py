"""Where a line sits in a module that the `write_package` fixture writes, and what the no-stack
join answered for an op of it."""

from __future__ import annotations

import ast
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType


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


# the modules of transformers a model file imports and runs beside its own (`installed_copy`'s files)
TRANSFORMERS_HELPERS = ("activations.py", "masking_utils.py", "cache_utils.py")


def line_in_class(path: Path, owner: str, text: str) -> int:
    """The one line of class `owner` (at the top of module `path`) that holds `text`."""
    found = next(
        node
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.ClassDef) and node.name == owner
    )
    lines = path.read_text().splitlines()
    (line,) = [n for n in range(found.lineno, (found.end_lineno or found.lineno) + 1) if text in lines[n - 1]]
    return line


def installed_copy(folder: Path, package: ModuleType, files: Sequence[str]) -> Path:
    """``folder/src/<package's name>``: a copy of `files` (relative to the folder of the installed
    `package`, a module), each folder of them a package of an empty ``__init__.py``; the installed code
    as a ``--source``, without the rest of it."""
    installed = Path(package.__file__ or "").parent
    root = folder / "src" / installed.name
    for relative in files:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(installed / relative, root / relative)
        for package in (root / relative).relative_to(root).parents:
            init = root / package / "__init__.py"
            if not init.exists():
                init.write_text("")
    return root


def explained_with_and_without_stacks(folder: Path, run: Callable[[], object], source: Path) -> tuple:
    """`run` profiled on CPU under ``no_grad`` (3 calls, after one not profiled) with Python stacks
    and without, each trace written under `folder` and explained with `source`: (the analysis with
    stacks: the truth, the one without)."""
    import torch

    from tracer.api import explain_trace

    with torch.no_grad():
        run()
    analyses = []
    for with_stack in (True, False):
        with (
            torch.no_grad(),
            torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU], with_stack=with_stack
            ) as profile,
        ):
            for _ in range(3):
                run()
        trace = folder / ("stack.json" if with_stack else "nostack.json")
        profile.export_chrome_trace(str(trace))
        analyses.append(explain_trace(trace, source=[source]))
    return tuple(analyses)


def explained_model(
    folder: Path, files: Sequence[str], make_model: Callable, ids: tuple = (1, 8), **inputs
) -> tuple:
    """A tiny transformers model (`make_model()`, in eval mode, built after ``torch.manual_seed(0)``) run on
    random token ids of shape `ids` (and `inputs`), explained with and without stacks
    (`explained_with_and_without_stacks`) over a copy of the installed transformers' `files`
    (`installed_copy`): (the source folder, the analysis with stacks, the one without)."""
    import torch
    import transformers

    source = installed_copy(folder, transformers, files)
    torch.manual_seed(0)
    model = make_model().eval()
    tokens = torch.randint(0, 128, ids)
    return (source, *explained_with_and_without_stacks(folder, lambda: model(tokens, **inputs), source))
