"""What source text spells, for picking the files whose functions a window of ops is aligned with.

A file *spells* the names it calls (``to``, ``cat``, ``Linear``), the operator characters it uses
(``*``, ``@``) and `STORE` when it stores into a subscript; an op is held by text that spells one of
its `spellings` (``aten::mul``: ``*`` or ``mul``; ``aten::copy_``: ``copy`` or ``copy_``).

`FunctionSpellings` scores functions rather than files (BM25 over the names each function and the
helpers of its file it calls spell, rare names counting most): a window's ops are run by one function
and the helpers it calls, and a big module (SGLang's ``memory_pool.py``, 3,000 lines) spells every
common name somewhere, so that at file level it looks like every other big file and loses to small
ones on the length norm. A file scores as its best function. A function reaches what the helpers of
its file it calls by name spell, and what the modules it calls through an attribute run: with
``self.q_norm = Qwen3RMSNorm(...)`` in its class, ``self.q_norm(x)`` spells that class's forward, and
with ``self.q_proj = nn.Linear(...)``, ``self.q_proj(x)`` spells ``Linear``.

Names say nothing of order: every decoder file spells ``linear``, ``pow``, ``mean``, ``rsqrt``. So each
function is also read in the order it runs its calls and operators (`run_order`), with what the
modules and helpers it calls run spliced in, and indexed by the pairs of names one or two calls apart
(`best_in_order`): Qwen3's attention runs ``Linear`` right before ``to``, ``pow``, ``mean`` (its
``q_norm``); a decoder layer that normalises before the attention runs them the other way round.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tracer.join.bindings import TORCH_MODULE_OPS
from tracer.join.copies import scoped_headers
from tracer.join.run_order import STORE, run_order
from tracer.join.tokens import GETITEM_OPS, QUIET_OPS, SETITEM_OPS

# Methods whose op is not named after them.
CAST_METHODS = frozenset(
    {"to", "float", "half", "bfloat16", "double", "int", "long", "short", "bool", "type"}
)
_STORES = re.compile(r"\]\s*=[^=]")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\(")
# ``self.norm = RMSNorm(``, ``self.q_proj = nn.Linear(``
_BUILDS = re.compile(r"\bself\.([A-Za-z_]\w*)\s*=\s*(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)\(")
MODULE_CALLS = ("forward", "__call__")  # what calling a module (``self.norm(x)``) runs
_OPERATORS = "*+-/@["
_OPERATOR_SPELLINGS = {
    "aten::mul": ("*",),
    "aten::add": ("+",),
    "aten::sub": ("-",),
    "aten::rsub": ("-",),
    "aten::div": ("/",),
    "aten::reciprocal": ("reciprocal", "/"),  # ``2.0 / x`` runs ``x.reciprocal() * 2.0``
    "aten::matmul": ("@", "matmul"),
    "aten::index": ("[",),
    "aten::index_put_": (STORE, "index_put_"),  # ``cache[loc] = k``
}
_MODULES_RUNNING: dict[str, tuple[str, ...]] = {}  # op -> the torch.nn modules that run it (``Linear``)
for _module, _op in TORCH_MODULE_OPS.items():
    _MODULES_RUNNING[_op] = (*_MODULES_RUNNING.get(_op, ()), _module)
_QUIET_WORDS = frozenset(op.removeprefix("aten::").strip("_") for op in QUIET_OPS)
BM25_K1, BM25_B = 1.2, 0.75  # how much a function's size discounts the names it spells
# Names too common to say which function a call runs (``self.forward(...)``, ``x.apply(...)``).
GENERIC_NAMES = frozenset(
    {"forward", "__init__", "__call__", "apply", "update", "get", "run", "main", "step"}
)


def spelled(text: str) -> frozenset[str]:
    """The names `text` calls, the operator characters it uses, and `STORE` if it stores into a
    subscript."""
    found = frozenset(_CALLED.findall(text)).union(c for c in _OPERATORS if c in text)
    return found | {STORE} if _STORES.search(text) else found


def spellings(op: str) -> tuple[str, ...]:
    """What text must spell to hold a call that runs `op` (for picking files); empty for views."""
    if op in QUIET_OPS or not op.startswith("aten::"):
        return ()
    if op in _OPERATOR_SPELLINGS:
        return _OPERATOR_SPELLINGS[op]
    if op in ("aten::to", "aten::_to_copy"):
        return tuple(CAST_METHODS)
    raw = op.removeprefix("aten::")
    name = raw.strip("_")
    in_place = (f"{name}_",) if op.endswith("_") else ()  # ``x.copy_(y)`` spells ``copy_``
    private = (raw,) if raw.startswith("_") else ()  # ``torch._grouped_mm(...)``
    # a subscript runs these too: ``out[a:b] = y`` is ``aten::copy_``, ``x[mask]`` ``masked_select``
    subscript = (STORE,) if op in SETITEM_OPS else ("[",) if op in GETITEM_OPS else ()
    return (name, *in_place, *private, *_MODULES_RUNNING.get(name, ()), *subscript)


class FunctionSpellings:
    """Every function of a set of files with what it spells (its own text's, that of the functions
    of its file it calls by name and of the modules it calls through attributes of its class) and the
    pairs of names it runs in order (`_pairs`), and scores of files by their best function: BM25 over
    names (`best_functions`), rare pairs (`best_in_order`)."""

    def __init__(self, texts: Iterable[str]) -> None:
        import numpy as np

        file_of: list[int] = []
        lines: list[int] = []  # per function, its def line (0: a module's own code)
        reaches: list[int] = []  # per function, a hash of what it reaches (its helpers' words too)
        sizes: list[int] = []
        index: dict[str, list[int]] = {}
        pairs: dict[tuple[str, str], list[int]] = {}  # (a, b): the functions that run b right after a
        self.file_spellings: list[frozenset[str]] = []  # per file, all it spells (= `spelled` of it)
        for file, text in enumerate(texts):
            own = _functions_of(text)
            self.file_spellings.append(frozenset().union(*(f.words for f in own)))
            by_name = {f.name: f.words for f in own if f.name}
            forwards = {f.owner: f.words for f in own if f.owner and f.name in MODULE_CALLS}
            orders = {f.name: f.order for f in own if f.name and not f.owner}
            forwards_order = {f.owner: f.order for f in own if f.owner and f.name in MODULE_CALLS}
            modules: dict[str, dict[str, str]] = {}  # class -> its attributes built from a class here
            for f in own:
                if f.owner:
                    modules.setdefault(f.owner, {}).update(f.modules)
            for f in own:
                called = (f.words & by_name.keys()) - {f.name} - GENERIC_NAMES
                # ``self.q_norm(x)`` with ``self.q_norm = Qwen3RMSNorm(...)``: that class's forward
                built = modules.get(f.owner, {})
                runs = {built[w] for w in f.words if w in built} - {f.owner}
                reach = f.words.union(
                    *(by_name[c] for c in called),
                    *(forwards[c] for c in runs if c in forwards),
                    runs & TORCH_MODULE_OPS.keys(),  # ``self.q_proj(x)``: spells the Linear it runs
                )
                for word in reach:
                    index.setdefault(word, []).append(len(file_of))
                in_order = _pairs(_spliced(f, orders, built, forwards_order))
                for pair in in_order:
                    pairs.setdefault(pair, []).append(len(file_of))
                file_of.append(file)
                lines.append(f.line)
                reaches.append(hash(reach))
                sizes.append(len(reach))
        size = np.asarray(sizes, dtype=np.float64)
        average = float(size.mean()) if len(size) else 1.0
        self._norm = (BM25_K1 + 1) / (1 + BM25_K1 * (1 - BM25_B + BM25_B * size / average))
        self._file_of = np.asarray(file_of, dtype=np.int64)
        self._line_of = np.asarray(lines, dtype=np.int64)
        self._reach_of = reaches
        self._files = (int(self._file_of[-1]) + 1) if file_of else 0
        self._index = index
        self._pairs = pairs
        self._pair_holders: dict[tuple[frozenset[str], frozenset[str]], np.ndarray] = {}
        self._holders: dict[frozenset[str], np.ndarray] = {}

    def holders(self, group: frozenset[str]):
        """The functions (chunk numbers, sorted) that spell any name of `group`."""
        import numpy as np

        found = self._holders.get(group)
        if found is None:
            lists = [self._index[name] for name in group if name in self._index]
            found = np.unique(np.concatenate(lists)) if lists else np.zeros(0, dtype=np.int64)
            self._holders[group] = found
        return found

    def best_functions(
        self, groups: Sequence[frozenset[str]], hot: frozenset[str]
    ) -> dict[int, tuple[float, int, int]]:
        """Per file (its number in the texts given), the BM25 score of its best function for the op
        `groups` (each an op's spellings; `hot`, the hot op's, weighs three times and more), the def
        line of that function (0: the module's own code; the first of ties) and a hash of what it
        reaches (copies of a function that call different helpers or modules reach different words)."""
        import numpy as np

        chunks = len(self._file_of)
        scores = np.zeros(chunks, dtype=np.float64)
        for group in groups:
            holders = self.holders(group)
            weight = math.log((1 + chunks) / (1 + len(holders)))
            if group == hot:
                weight = 3 * weight + 1.0
            scores[holders] += weight * self._norm[holders]  # holders are distinct
        return self._best_per_file(scores)

    def _best_per_file(self, scores) -> dict[int, tuple[float, int, int]]:
        """Per file with a function scoring above 0, (the best one's score, its def line, its reach)."""
        import numpy as np

        touched = np.flatnonzero(scores > 0)
        # per file, its best function: touched in file order, best first (stable: the first of ties)
        order = touched[np.lexsort((-scores[touched], self._file_of[touched]))]
        files, first = np.unique(self._file_of[order], return_index=True)
        best = order[first]
        return {
            int(file): (float(scores[chunk]), int(self._line_of[chunk]), self._reach_of[chunk])
            for file, chunk in zip(files.tolist(), best.tolist())
        }

    def pair_holders(self, first: frozenset[str], then: frozenset[str]):
        """The functions (chunk numbers, sorted) that run a name of `then` right after (or one call
        after) a name of `first`."""
        import numpy as np

        key = (first, then)
        found = self._pair_holders.get(key)
        if found is None:
            lists = [self._pairs[(a, b)] for a in first for b in then if (a, b) in self._pairs]
            found = np.unique(np.concatenate(lists)) if lists else np.zeros(0, dtype=np.int64)
            self._pair_holders[key] = found
        return found

    def best_in_order(self, groups: Sequence[frozenset[str]]) -> dict[int, tuple[float, int, int]]:
        """Per file, the score of its best function for running the op `groups` (each an op's
        spellings, in the order the ops ran) in that order: each pair of ops one or two apart that
        the function runs in that order counts, rare pairs most (as `best_functions`)."""
        import numpy as np

        chunks = len(self._file_of)
        scores = np.zeros(chunks, dtype=np.float64)
        seen = set()
        for i, first in enumerate(groups):
            for then in groups[i + 1 : i + 1 + PAIR_REACH]:
                if (first, then) in seen:
                    continue
                seen.add((first, then))
                holders = self.pair_holders(first, then)
                if len(holders):
                    weight = math.log((1 + chunks) / (1 + len(holders)))
                    scores[holders] += weight
        return self._best_per_file(scores)


PAIR_REACH = 2  # the ops after one that pair with it (a call the text has and the ops do not between)


def _spliced(
    function: _Spelled,
    helpers: dict[str, tuple[str, ...]],
    built: dict[str, str],
    forwards: dict[str, tuple[str, ...]],
) -> list[str]:
    """What `function` runs in order, with what the helpers of its file it calls by name and the
    modules it calls through attributes of its class run spliced in where it calls them (one level)."""
    out: list[str] = []
    for word in function.order:
        module = built.get(word)
        if module is not None and module != function.owner and module in forwards:
            out.extend(forwards[module])
        elif module is not None and module in TORCH_MODULE_OPS:
            out.append(module)  # ``self.q_proj(x)``: runs the Linear it was built as
        elif word in helpers and word != function.name and word not in GENERIC_NAMES:
            out.extend(helpers[word])
        else:
            out.append(word)
    return out


def _pairs(order: Sequence[str]) -> set[tuple[str, str]]:
    """Each name and those run one or two calls after it, leaving out the calls of quiet ops
    (``view``, ``transpose``), which a window's ops leave out too (they have no `spellings`)."""
    named = [word for word in order if word not in _QUIET_WORDS]
    return {(a, b) for i, a in enumerate(named) for b in named[i + 1 : i + 1 + PAIR_REACH]}


@dataclass(frozen=True)
class _Spelled:
    """One function of a file's text: what it spells, and the attributes it builds from a class
    (``self.q_norm = Qwen3RMSNorm(...)``: q_norm -> Qwen3RMSNorm)."""

    name: str  # "" for the module's own code
    line: int  # its def line; 0 for the module's own code
    owner: str  # the class it is a method of, "" if none
    words: frozenset[str]
    modules: dict[str, str]
    order: tuple[str, ...]  # the names it calls and the operators it uses, in the order they run


def _functions_of(text: str) -> list[_Spelled]:
    """Each function of `text` (a nested one apart from the function around it), and the module's
    own code before the first function (named "")."""
    defs: list[tuple[re.Match[str], str]] = []  # each def, and the class it is a method of ("" if none)
    for header, around in scoped_headers(text):
        if header.group(2) != "class":
            in_class = bool(around) and around[-1].group(2) == "class"
            defs.append((header, around[-1].group(3) if in_class else ""))
    starts = [header.start() for header, _ in defs]
    head = text[: starts[0]] if starts else text
    out = [_Spelled("", 0, "", spelled(head), {}, tuple(run_order(head)))]
    line, counted = 1, 0  # the def line of each header, counted on from the one before
    for i, (header, owner) in enumerate(defs):
        line += text.count("\n", counted, header.start())
        counted = header.start()
        body = text[starts[i] : starts[i + 1] if i + 1 < len(starts) else len(text)]
        built = dict(_BUILDS.findall(body)) if owner else {}
        order = tuple(run_order(body[header.end() - header.start() :]))  # not the def's own name
        out.append(_Spelled(header.group(3), line, owner, spelled(body), built, order))
    return out


__all__ = ["CAST_METHODS", "GENERIC_NAMES", "STORE", "FunctionSpellings", "spelled", "spellings"]
