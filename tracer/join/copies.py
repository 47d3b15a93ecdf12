"""Copies of one function in many files: found by their text, line for line.

Big packages keep a copy of a function per file that needs it (transformers writes each model's
``RMSNorm``, rotary embedding and MLP into the model's own file; SGLang keeps ``srt`` and
``multimodal_gen`` copies): such copies run the same ops in the same order, so the ops around a hot op
cannot say which file ran it. `FunctionCopies` finds, for a line of one function, the same line in each
copy, so that other evidence (which files the rest of the trace fits) can choose among them.

Two functions are copies when their lines are the same once comments, blank lines and docstrings are
dropped and the leading word of CamelCase names is (``LlamaRMSNorm`` and ``MistralRMSNorm`` are both
``RMSNorm``), and, for methods, their classes build as many layers with ``bias=True``: Qwen2's
attention and CWM's share ``forward``'s text, but Qwen2's projections carry a bias, which the ops'
shapes show (an alignment of one is no alignment of the other). ``bias=False`` and a config's flag
(``bias=config.mlp_bias``, off by default) are not told apart: they build alike in the configs that
run, and telling them apart split the MLPs' copies for nothing. A copy that says so (transformers'
and diffusers' ``# Copied from m.GPT2Attention with GPT2->DecisionTransformerGPT2`` above a class or
def) has its renames undone first. Found from the text alone (no parse), each file once.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

# a class or def header: its indent, ``class``/``def``/``async def``, its name
HEADER = re.compile(r"^([ \t]*)(class|(?:async[ \t]+)?def)[ \t]+([A-Za-z_]\w*)", re.MULTILINE)
_MODEL_PREFIX = re.compile(r"\b[A-Z][a-z0-9]+(?=[A-Z])")  # ``Llama`` in ``LlamaRMSNorm``
_COPIED_FROM = re.compile(r"#\s*Copied from \S+ with (.+)$")  # ... with A->B, a->b
_CLOSERS = (")", "]", "}")
_BIASED = re.compile(r"\bbias[ \t]*=[ \t]*True\b")  # a layer built with a bias for sure
_QUOTES = ('"""', "'''")


@dataclass(frozen=True)
class FunctionText:
    """One function of a file: its def line, its name, a digest of its normalised lines, and the line
    numbers of those lines (the same index in a copy is the same statement)."""

    line: int
    name: str
    qualname: str  # ``LlamaRMSNorm.forward``
    digest: bytes
    lines: tuple[int, ...]


def function_texts(text: str) -> list[FunctionText]:
    """Every function (methods and nested ones too) of a file's text."""
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    found = []
    renamed: dict[int, tuple[tuple[str, str], ...]] = {}  # a header's start -> the renames to undo
    biased: dict[int, int] = {}  # a class header's start -> how many layers it builds with a bias
    for match, around in scoped_headers(text):
        qualname = ".".join([*(scope.group(3) for scope in around), match.group(3)])
        at = bisect.bisect_right(starts, match.start()) - 1  # the header's 0-based line
        renames = renamed[match.start()] = (renamed[around[-1].start()] if around else ()) + _renames(
            lines, at
        )
        indent = len(match.group(1).expandtabs())
        if match.group(2) == "class":
            biased[match.start()] = _biased_layers(lines, at, indent)
            continue
        kept: list[int] = []
        normal: list[str] = []
        quote = None
        j = at + 1
        while j < len(lines):
            raw = lines[j]
            stripped = raw.strip()
            if stripped and quote is None and _indent(raw) <= indent and not stripped.startswith(_CLOSERS):
                break  # the first statement at or left of the def's indent: the function ended
            j += 1
            if quote is not None:  # inside a docstring
                if quote in stripped:
                    quote = None
                continue
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith(_QUOTES):
                if stripped.count(stripped[:3]) == 1:
                    quote = stripped[:3]
                continue
            kept.append(j)  # 1-based: lines[j - 1]
            code = stripped.split("  #", 1)[0]
            for copy_name, original in renames:
                code = code.replace(copy_name, original)
            normal.append(_MODEL_PREFIX.sub("", code))
        owner = next((scope for scope in reversed(around) if scope.group(2) == "class"), None)
        if owner is not None and biased.get(owner.start()):
            normal.append(f"# layers with a bias: {biased[owner.start()]}")
        digest = hashlib.blake2b("\n".join(normal).encode(), digest_size=8).digest()
        found.append(FunctionText(at + 1, match.group(3), qualname, digest, tuple(kept)))
    return found


def without_model_prefix(qualname: str) -> str:
    """A function's qualified name without the model's name its classes start with
    (``Gemma2RotaryEmbedding.forward`` -> ``RotaryEmbedding.forward``): variants of one model's code
    in the files of others."""
    return _MODEL_PREFIX.sub("", qualname)


def _biased_layers(lines: list[str], at: int, indent: int) -> int:
    """How many ``bias=True`` the class whose header is at line `at` (0-based, indented by `indent`)
    spells: the layers it builds with a bias."""
    count = 0
    for raw in lines[at + 1 :]:
        stripped = raw.strip()
        if stripped and _indent(raw) <= indent and not stripped.startswith((*_CLOSERS, "#")):
            break  # the class ended
        count += len(_BIASED.findall(stripped.split("  #", 1)[0]))
    return count


def _indent(line: str) -> int:
    """The columns of a line's leading whitespace (tabs expanded)."""
    expanded = line.expandtabs()
    return len(expanded) - len(expanded.lstrip())


def scoped_headers(text: str) -> Iterator[tuple[re.Match[str], tuple[re.Match[str], ...]]]:
    """Each class/def header of `text`, with the headers of the classes and defs around it,
    outermost first."""
    scopes: list[tuple[int, re.Match[str]]] = []
    for match in HEADER.finditer(text):
        indent = len(match.group(1).expandtabs())
        while scopes and scopes[-1][0] >= indent:
            scopes.pop()
        yield match, tuple(scope for _, scope in scopes)
        scopes.append((indent, match))


def _renames(lines: list[str], at: int) -> tuple[tuple[str, str], ...]:
    """The renames a ``# Copied from ... with A->B, a->b`` comment above the header at `at` (past its
    decorators) made: ((B, A), (b, a)), longest first."""
    j = at - 1
    while j >= 0 and lines[j].lstrip().startswith("@"):
        j -= 1
    found = _COPIED_FROM.search(lines[j]) if j >= 0 else None
    if found is None:
        return ()
    pairs = []
    for part in found.group(1).split(","):
        original, _, copy_name = part.partition("->")
        original, copy_name = original.strip(), (copy_name.split() or [""])[0]
        if original and copy_name and original != copy_name:
            pairs.append((copy_name, original))
    return tuple(sorted(pairs, key=lambda pair: -len(pair[0])))


class FunctionCopies:
    """The copies of a function across a set of files, and where a line of it is in each copy."""

    def __init__(self, files: Iterable[tuple[str, Callable[[], str]]]) -> None:
        """`files`: (name, a callable that returns its text), read when first needed."""
        self._readers = dict(files)
        self._functions: dict[str, list[FunctionText]] = {}
        self._by_digest: dict[bytes, list[tuple[str, FunctionText]]] | None = None

    def functions(self, file: str) -> list[FunctionText]:
        found = self._functions.get(file)
        if found is None:
            reader = self._readers.get(file)
            found = self._functions[file] = function_texts(reader()) if reader is not None else []
        return found

    def same_line(self, file: str, line: int) -> list[tuple[str, int, str]]:
        """(file, line, the copy's qualified name) of `line` in every copy of the innermost function
        holding it (itself included; empty when no function holds it)."""
        holder = None
        for function in self.functions(file):
            if (
                function.line <= line
                and line in function.lines
                and (holder is None or function.line > holder.line)
            ):
                holder = function
        if holder is None:
            return []
        index = holder.lines.index(line)
        return [
            (other_file, copy.lines[index], copy.qualname)
            for other_file, copy in self._index().get(holder.digest, ())
            if copy.name == holder.name and len(copy.lines) == len(holder.lines)
        ]

    def _index(self) -> dict[bytes, list[tuple[str, FunctionText]]]:
        if self._by_digest is None:
            self._by_digest = {}
            for file in self._readers:
                for function in self.functions(file):
                    if function.lines:
                        self._by_digest.setdefault(function.digest, []).append((file, function))
        return self._by_digest


__all__ = [
    "HEADER",
    "FunctionCopies",
    "FunctionText",
    "function_texts",
    "scoped_headers",
    "without_model_prefix",
]
