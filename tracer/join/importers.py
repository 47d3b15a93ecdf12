"""How many files of a code base import each module: the prior that orders copies the trace cannot
tell apart.

Copies of one function in several files run the same ops; when the rest of the trace fits their files
about alike too, which of them ran is not in the trace. The copy that the rest of the code imports
(SGLang's ``srt/layers/activation.py`` rather than ``multimodal_gen``'s copy; transformers' Llama file,
which the other models' modular files import) is the one most code paths run: it is put first among
them, and the ranking says it is a tie.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(.+)|import[ \t]+([\w., \t]+))", re.MULTILINE
)


def module_name(file: str) -> str:
    """``transformers/models/llama/modeling_llama.py`` -> ``transformers.models.llama.modeling_llama``
    (a package's ``__init__.py`` names the package)."""
    parts = file.removesuffix(".py").split("/")
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def importer_counts(files: Iterable[tuple[str, str]]) -> Counter:
    """Per file (named as origins name files, relative to the root's parent), how many other files
    import it (``from m import x``, ``import m``, ``from pkg import m``; relative imports resolved)."""
    named = list(files)
    modules = {module_name(name): name for name, _ in named}
    counts: Counter = Counter()
    for importer, text in named:
        package = importer.split("/")[:-1]
        found: set[str] = set()
        for dots, source, imported, plain in _IMPORT.findall(text):
            if plain:
                found.update(part.strip().split(" ")[0] for part in plain.split(","))
                continue
            if dots:
                up = len(dots) - 1
                if up > len(package):
                    continue
                base = package[: len(package) - up] + ([source] if source else [])
                source = ".".join(p for p in base if p)
            found.add(source)
            names = imported.strip("() \t\\").split(",")
            found.update(f"{source}.{n.strip().split(' ')[0]}" for n in names if n.strip())
        for module in found:
            file = modules.get(module)
            if file is not None and file != importer:
                counts[file] += 1
    return counts


__all__ = ["importer_counts", "module_name"]
