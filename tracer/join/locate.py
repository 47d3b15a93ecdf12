"""The source line of a call in a run of a user frame: parse the function once, align the run with it.

`CallLocator.locate` takes the frame (``file(def_line): function``), the run's calls as tokens and
the index of the call to place, finds the function's `Program` in the source (parsed once per file
under the source roots) and asks `tracer.join.align` which point that call was. Alignments are
cached per (function, call sequence): every layer and every step that ran the same calls shares one.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

from tracer.join.align import Alignment, PointChoice
from tracer.join.program import CallPoint, ModulePrograms, Program
from tracer.join.source_lines import SourceLines, read_source_text
from tracer.join.tokens import DTYPE_MISMATCH, FRAMED, Token
from tracer.model.origin import Frame


class CallLocator:
    """Programs of the functions a trace's frames name, and alignments of their runs."""

    def __init__(self, source: SourceLines) -> None:
        self.source = source
        self._modules: dict[str, ModulePrograms | None] = {}
        self._programs: dict[tuple[str, int | None, str], tuple[Program, bool] | None] = {}
        self._alignments: dict[tuple[int, tuple[Token, ...]], Alignment] = {}

    def program(self, frame: Frame) -> tuple[Program, bool] | None:
        """(the program of the frame's function, whether a run may start anywhere in it) or None.

        A frame already running when profiling began is named by its executing line, not its
        ``def`` line: then the innermost function around that line, entered anywhere.
        """
        key = (frame.file, frame.def_line, frame.function)
        if key in self._programs:
            return self._programs[key]
        found = None
        module = self._module(frame.file)
        if module is not None and frame.def_line is not None:
            program = module.program(frame.def_line, frame.function)
            if program is not None:
                found = (program, False)
            else:
                around = module.enclosing(frame.def_line)
                if around is not None and around[1] == frame.function:
                    program = module.program(*around)
                    found = (program, True) if program is not None else None
                elif frame.function == "<module>":
                    program = module.program(1, "<module>")
                    found = (program, True) if program is not None else None
        self._programs[key] = found
        return found

    def locate(
        self,
        frame: Frame,
        tokens: Sequence[Token],
        index: int,
        target_dtype: str | None = None,
        source_dtype: str | None = None,
    ) -> PointChoice | None:
        """Which point of the frame's function made call `index` of the run; None without source."""
        found = self.program(frame)
        if found is None:
            return None
        program, free_start = found
        key = (id(program), tuple(tokens))
        alignment = self._alignments.get(key)
        if alignment is None:
            alignment = self._alignments[key] = Alignment(program, key[1], FRAMED, free_start=free_start)
        return alignment.choose(index, _dtype_penalty(target_dtype, source_dtype))

    def _module(self, file: str) -> ModulePrograms | None:
        if file not in self._modules:
            self._modules[file] = self._parse(file)
        return self._modules[file]

    def _parse(self, file: str) -> ModulePrograms | None:
        path = self.source.find(file)
        if path is None:
            return None
        text = read_source_text(path)
        if text is None:
            return None
        try:
            return ModulePrograms(ast.parse(text), FRAMED.skip)
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # not Python, or nested too deeply
            return None


def _dtype_penalty(target: str | None, source: str | None) -> Callable[[CallPoint], float] | None:
    """Extra cost for a cast point that cannot have made this op: another literal dtype, or a pure
    move (``.to(device)``) where the op changed the dtype."""
    if target is None:
        return None
    changed = source is not None and source != target

    def penalty(point: CallPoint) -> float:
        if point.dtype is not None and point.dtype != target:
            return DTYPE_MISMATCH
        if changed and point.device_only:
            return DTYPE_MISMATCH
        return 0.0

    return penalty
