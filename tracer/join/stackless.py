"""Without Python frames: rank the source lines that could have run an op by aligning the ops around
it in the trace with what each candidate function's source says it runs, in order.

A trace recorded without ``with_stack`` still holds, per thread, the sequence of top-level CPU ops
(``aten::to``, ``aten::pow``, ``aten::mean``, ...). Each function's `Program` predicts such a
sequence: ``x.float()`` runs ``aten::to``, ``a * b`` ``aten::mul``, ``torch.cat`` ``aten::cat``, a
module or helper call a block of ops of its own. The ops around the hot one (`OpWindows`: a fixed
window on its thread) are aligned *locally* with each candidate function (`Alignment(local=True)`:
the window may start and end anywhere in the function), the hot op forced onto each candidate
point; the best-fitting points win. The functions aligned are those of the files picked by the names
their functions spell and by the order in which they run the ops around the hot one
(`FunctionSpellings`; `_files_for`). Further evidence moves a candidate up or down: the ranges
around the op naming its function (``kt:fn:``, ``attention``), a cast's literal dtype against the
op's, a layer's bias against the op's recorded shapes (``nn.Linear(..., bias=True)`` runs an
``aten::linear`` with a third input; the window's names carry it, `tokens.with_bias`), a one-time
setup line (``__init__``, module level) for an op that repeats, and the static risk as the last
tie-break. Copies of one function in many files fit a window alike: the whole
trace then decides among them (`StacklessRanker.agree`: the files that the most windows fit), and
copies it cannot tell apart are said to tie (first, the copy the most files import). A model's own variants of code that dozens of files hold (its
attention) tie with them in the per-window picks: the files that fit much of the trace are aligned
with each window they do not fit yet (`_challengers`), and a caller is a copy of another only if the
helpers it reaches are too (`_deep_digest`: a decoder layer copied from Llama's reaches its own
file's attention); different code
that fits about alike goes by how much of each file the trace used (`_used_first`), and activations
that fit alike by the default of the config beside the model file the answers name most
(`_default_first`, `config_defaults`: GPT-2's ``gelu_new`` among three tanh GELUs). What a call
runs is spliced into its caller: helpers by name, by import or by what ``__init__`` bound, the frames
of comprehensions and generator expressions, lambdas from a table or given as an argument, the
function itself again (recursion), to `INLINE_DEPTH` calls down; past that, a helper's call is a
block whose ops are worth what the helper names (`CallPoint.runs`), so that a caller is not judged
on less of the window than its callee. The answer is always a ranking, said so, with a confidence
below 0.5.
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from tracer.join.align import Alignment
from tracer.join.bindings import (
    ACTIVATION,
    ALIAS,
    BUILT,
    CALLED,
    ELEMENTS,
    LAMBDA,
    PARTIAL,
    REGISTRY,
    TORCH_MODULE_OPS,
    TORCH_OP,
    Binding,
    ModuleBindings,
    activations_named,
    bindings_of,
    defines_activations,
    module_bindings,
    table_values,
)
from tracer.join.config_defaults import bias_flags_on, default_activation_keys, is_config_file
from tracer.join.copies import HEADER, FunctionCopies, without_model_prefix
from tracer.join.importers import importer_counts
from tracer.join.nesting import runs_python
from tracer.join.program import (
    BY_ATTRIBUTE,
    BY_LOCAL,
    BY_NAME,
    BY_SELF_ATTRIBUTE,
    BY_SELF_METHOD,
    BY_SUBSCRIPT,
    BY_TYPE,
    CALL,
    FRAME,
    GETITEM,
    ITER,
    NO_OP_BUILTINS,
    OPERATOR,
    PROPERTY,
    SETITEM,
    VIEWS,
    CallPoint,
    ModulePrograms,
    Program,
    last_name,
    receiver_path,
)
from tracer.join.ranking import MAX_CANDIDATES
from tracer.join.sites import SiteIndex
from tracer.join.source_lines import SourceLines, read_source_text
from tracer.join.spelling import CAST_METHODS, GENERIC_NAMES, MODULE_CALLS, FunctionSpellings, spellings
from tracer.join.tokens import (
    BIASED_OPS,
    GETITEM_OPS,
    OP,
    OPERATOR_ALIASES,
    QUIET_OPS,
    SETITEM_OPS,
    Token,
    token_of,
    views_of,
    with_bias,
)
from tracer.join.torch_api import TORCH_API
from tracer.model.events import NONE, Cat

if TYPE_CHECKING:
    import numpy as np

    from tracer.join.state import JoinState

WINDOW = 12  # top-level ops on each side of the hot one that it is judged by
MAX_FILES = 12  # files whose functions are aligned, picked by the window's op names they spell
MAX_FUNCTIONS = 10  # functions aligned per hot op, picked by the ops they predict
MAX_TIED_FUNCTIONS = 40  # ... and those that name as many of the window's ops as the last of them
NEAR_OPS = 2  # ops on each side of the hot one that pick files of their own ...
NEAR_FILES = 4  # ... this many, past `MAX_FILES`
ORDER_OPS = 8  # named ops on each side of the hot one whose order picks files of their own ...
ORDER_FILES = 20  # ... those that do it better than all but this many files, past those
CALLER_FILES = 4  # files that call a class or helper running the hot op, aligned beside those picked
RANKING_CONFIDENCE = 0.45  # the most a ranking claims: never read as a match
MIN_FIT = 2.5  # a candidate's function must explain more of the window than the op itself
# ... else, where no function does, those that explain at least the op (a one-line helper between
# unrelated code: ``F.linear(x, w, b)``) make a weak ranking, said to be one, of this confidence
# (on the corpus 7-8% of such rankings' first lines were right on transformers and the GPU, 37% on SGLang)
WEAK_FIT = 1.0
WEAK_CONFIDENCE = 0.05

# What calling an activation picked by a config value (`bindings.ACTIVATION`) may run: one of these.
ACTIVATION_OPS = tuple(
    f"aten::{name}"
    for name in (
        "silu", "gelu", "relu", "tanh", "sigmoid", "mish", "softplus", "elu", "selu", "celu",
        "leaky_relu", "hardswish", "hardsigmoid", "hardtanh", "relu6", "prelu", "glu",
    )
)  # fmt: skip
# Calls that make a tensor from Python data run no op of their name but several top-level ones, in
# this order (torch 2.13 and 2.14): ``torch.tensor(data)`` and ``x.new_tensor(data)`` record
# ``empty``, ``to``, ``lift_fresh``, ``detach_``; ``torch.as_tensor`` of a list the first three (of
# a tensor only ``to``, where the dtype or device changes). One such call explains each of them, the
# first as a call's op (`predicted_ops`), the rest as its repeats (`StacklessCosts.repeat`).
FROM_DATA_OPS = ("aten::empty", "aten::to", "aten::lift_fresh", "aten::detach_")
FROM_DATA_CALLS = {"tensor": FROM_DATA_OPS, "new_tensor": FROM_DATA_OPS, "as_tensor": FROM_DATA_OPS[:3]}
# torch's tensor subclasses a call builds, by name or attribute (``Parameter(w.t(), requires_grad=False)``,
# ``nn.Buffer(x)``): ``Tensor._make_subclass`` records a ``detach``, no block of code (torch 2.13's CPU
# profiler). Seen on SGLang's FP8 weight loading, where a ``Parameter`` taken for a block absorbed the
# next helper's ops
TENSOR_CLASSES = frozenset({"Parameter", "Buffer"})
CALL_OPS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(CAST_METHODS, ("aten::to",)),
    **dict.fromkeys(TENSOR_CLASSES, ("aten::detach",)),
    **FROM_DATA_CALLS,
    "cuda": ("aten::to",),
    "cpu": ("aten::to",),
    "concat": ("aten::cat",),
    "concatenate": ("aten::cat",),
    "matmul": ("aten::matmul", "aten::mm", "aten::bmm"),
    "softmax": ("aten::softmax", "aten::_softmax"),
    "log_softmax": ("aten::log_softmax", "aten::_log_softmax"),
    "greater": ("aten::gt", "aten::greater"),
    ACTIVATION: ACTIVATION_OPS,
    "less": ("aten::lt", "aten::less"),
    # torch functions that record an op of another name (checked on torch 2.13's CPU profiler): a
    # norm is a linalg op, ``torch.fft.rfft`` ``aten::fft_rfft``, ``F.normalize`` (Python) first the
    # norm, ``torch.unique`` ``aten::_unique2``, ``F.interpolate`` the upsampling of its mode
    "norm": ("aten::norm", "aten::linalg_vector_norm", "aten::linalg_norm"),
    "vector_norm": ("aten::linalg_vector_norm",),
    "matrix_norm": ("aten::linalg_matrix_norm",),
    "normalize": ("aten::linalg_vector_norm",),
    **{
        name: (f"aten::fft_{name}",)
        for name in ("fft", "ifft", "rfft", "irfft", "fft2", "rfft2", "irfft2", "fftn", "rfftn", "irfftn")
    },
    "unique": ("aten::unique", "aten::_unique", "aten::_unique2", "aten::unique_dim"),
    "interpolate": tuple(
        f"aten::{op}"
        for op in (
            "upsample_nearest1d",
            "upsample_nearest2d",
            "upsample_nearest3d",
            "_upsample_nearest_exact1d",
            "_upsample_nearest_exact2d",
            "_upsample_nearest_exact3d",
            "upsample_linear1d",
            "upsample_bilinear2d",
            "upsample_bicubic2d",
            "upsample_trilinear3d",
            "_upsample_bilinear2d_aa",
            "_upsample_bicubic2d_aa",
            "adaptive_avg_pool1d",
            "adaptive_avg_pool2d",
            "adaptive_avg_pool3d",
        )
    ),
    "cross_entropy": ("aten::cross_entropy_loss",),
}
OPERATOR_OPS: dict[str, tuple[str, ...]] = {
    "aten::matmul": ("aten::matmul", "aten::mm", "aten::bmm"),
    "aten::sub": ("aten::sub", "aten::rsub"),
    "aten::div": ("aten::div", "aten::true_divide"),
}

# Costs: negative rewards a fit; the window outside the function's part is free.
REWARD = -1.0  # an op the point predicts by name
QUIET_REWARD = -0.3  # a view or scalar op the point predicts (they fit many places)
VIEW_REWARD = QUIET_REWARD / 3  # a view an index spells (a `VIEWS` point's: one per index element)
# an op a helper's call past `INLINE_DEPTH` may run (`CallPoint.runs`) when the helper names at most
# `HELPER_OPS` ops, less when it names more (a whole model's forward names most); a quiet op no more
# than a spelled view (`VIEW_REWARD`)
HELPER_REWARD = -0.4
HELPER_OPS = 30
BLOCK = 0.1  # an op absorbed by a call that runs a block of its own (a module, a helper)
INSIDE = 0.5  # an op inside the function's part that no point explains
SKIPPED_OP = 0.6  # a torch call or tensor operator on the path that ran no op
DTYPE_AGAINST = 3.0
BIAS_FOR = -1.5  # a layer's op whose bias the shapes show, where the source built the layer with one
BIAS_AGAINST = 0.5  # a bias where the source built none, or none where it built one: another layer
DTYPE_FOR = -0.5
RANGE_FOR = -2.0
SUPPORT_MARGIN = 0.5  # candidates within this of their window's best say their files may have run
SUPPORT_AGAINST = 1.0  # times (1 - the share of the trace's windows its file fits, of the best file's)
TIE_MARGIN = 0.05  # copies this close in score (5% of the windows' share) are said to tie
# the named model's own variant of the function that fits first (the same name but the model's) goes
# first within this of it, as close as says a file may have run: the named file did run. Gemma 3's
# rotary reads its tables by `getattr` in a loop over layer types where Gemma 2's reads one attribute,
# and its model's second mask is a block (past `MAX_INLINED_POINTS`): its fit is 0.4 from Gemma's
NAMED_MARGIN = SUPPORT_MARGIN
USED_MIN = 0.5  # tied copies: where the trace used at least this share of one file's functions ...
USED_RATIO = 0.8  # ... a copy in a file it used less than this of that one's goes after
# different code whose fits differ by less than a quiet op's reward fits about alike: which file ran
# goes by how much of each the trace used (`_used_first`)
ALIKE_MARGIN = -QUIET_REWARD
TIE_FILES_NAMED = 10  # the files of a tie that its evidence names (then how many more)
# files that fit as many windows, alike: a file whose fits of the windows both fit, summed, are this
# much further from each window's best than another's (`_FitGaps`) goes after it (Gemma's decoder layer
# fits its windows closer than Gemma-2's, which skips two norms Gemma does not run; the rest is copies)
FIT_TIE = 0.5
SUPPORTED_FILES = 6  # the files most windows fit: aligned with every window again
# A file whose share of the windows is at least this of the best's is aligned with each window it does
# not fit yet (`StacklessRanker._challengers`), the `CHALLENGERS` of most share: a model's own file
# fits less than the files of the code it copies until its own variants (its attention) are aligned,
# which the per-window picks, tied among dozens of variants of Llama's, leave out (EXAONE-4's file,
# 0.83 of the best's share; SmolLM3's, 0.85). Such a file counts for a window only where it fits about as
# well as the best (`NEAR_TIE`, not `SUPPORT_MARGIN`)
CHALLENGE_SHARE = 0.5
CHALLENGERS = 60
SUPPORTED_FUNCTIONS = 3  # ... their functions aligned with each window, past `MAX_FUNCTIONS`
SUPPORTED_CALLERS = 2  # ... and this many more of the files the round before fit best
AGREE_ROUNDS = 2  # rankings again with the files the ranking before fit
# ... after the files that together fit the windows (`_covering`): rounds of picks (a generate()
# trace's loop and mask code takes some before a model's own file, which few windows fit alone)
COVER_ROUNDS = 12
COVER_TIED = 4  # ... files picked in one round, of those that fit as many windows (copies)
COVER_MIN_WINDOWS = 2  # ... each fitting at least these windows the ones before it do not


# Tensor methods whose Python binding returns the tensor itself, dispatching nothing, when there is
# nothing to do: ``x.contiguous()`` of a contiguous tensor records no ``aten::contiguous``
# (``THPVariable_contiguous``). Skipping one costs what a call of no op costs.
NOTHING_TO_DO_METHODS = frozenset({"contiguous"})


_TEST_FOLDERS = frozenset({"test", "tests", "testing"})


def is_test_code(relative: str) -> bool:
    """Whether a source file (named relative to its import root) is a package's tests: in a ``test``,
    ``tests`` or ``testing`` folder (``sglang/test/kits/...``), or ``test_*.py``, ``*_test.py``,
    ``conftest.py``."""
    *folders, name = relative.split("/")
    return (
        not _TEST_FOLDERS.isdisjoint(folders)
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


# A message logged or warned runs no tensor op (``logger.warning_once(...)``, ``warnings.warn(...)``;
# a tensor formatted into it runs its ops in the argument, as any argument does): the logging
# methods, called on a receiver named as code bases name their loggers.
LOGGING_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}
    | {"info_once", "warning_once", "warning_advice", "debug_once"}
)
_LOGGER = re.compile(r"(?:.*\.)?(?:_*(?:[a-z]+_)?(?:logger|log|LOGGER|LOG)|logging|warnings)")


def runs_no_op(point: CallPoint) -> bool:
    """A call that runs no op: a type (``int(...)``, ``super()``), a builtin of `NO_OP_BUILTINS`
    (one the code base defines anew is called through its module, an attribute, or a local), a
    message logged (`LOGGING_METHODS` of a logger, ``logging``, ``warnings``)."""
    return point.kind == CALL and (
        point.callee == BY_TYPE
        or (point.callee == BY_NAME and point.name in NO_OP_BUILTINS)
        or (
            point.callee == BY_ATTRIBUTE
            and point.name in LOGGING_METHODS
            and _LOGGER.fullmatch(point.receiver) is not None
        )
    )


# Python's builtins that iterate what they are given, called by their bare name (``torch.all(x)`` and
# ``x.all()`` are ops): over tensors they run the elements' protocol only, as torch's profiler records
# it (``bool(t)``: ``is_nonzero``; ``sum``: ``0 + t``; ``min``/``sorted``: ``t < u``), over Python values
# nothing. A generator expression they are given runs its ops in its own frame.
ITERATING_BUILTINS: dict[str, tuple[str, ...]] = {
    "all": ("aten::is_nonzero",),
    "any": ("aten::is_nonzero",),
    "sum": ("aten::add",),
    "min": ("aten::lt", "aten::is_nonzero"),
    "max": ("aten::gt", "aten::is_nonzero"),
    "sorted": ("aten::lt", "aten::is_nonzero"),
}


def iterates_values(point: CallPoint) -> bool:
    """A call of a builtin of `ITERATING_BUILTINS` (``all(callable(f) for f in fns)``)."""
    return point.kind == CALL and point.callee == BY_NAME and point.name in ITERATING_BUILTINS


def runs_a_block(point: CallPoint) -> bool:
    """A call that may run any ops of its own (a module, a helper): not one that runs none
    (`runs_no_op`), not a builtin that iterates (`ITERATING_BUILTINS`), not torch's API called on a
    tensor or module (``x.to(...)``, ``torch.cat(...)``, ``F.silu(...)`` run their op)."""
    if point.kind != CALL or runs_no_op(point) or iterates_values(point) or point.name in TENSOR_CLASSES:
        return False
    return not (point.callee == BY_ATTRIBUTE and point.name in TORCH_API)


def _helper_reward(point: CallPoint, token: Token) -> float | None:
    """What an op of a helper's call not spliced in (`CallPoint.runs`) is worth, if the helper names
    it: `HELPER_REWARD`, less the more ops the helper names past `HELPER_OPS`; a quiet op (`QUIET_OPS`:
    views, ``empty``, scalar reads) no more than a view the source spells (`VIEW_REWARD`), or a
    caller whose deep helper takes views outbids the function that spells them."""
    if token.kind != OP or point.runs is None or token.name not in point.runs:
        return None
    reward = HELPER_REWARD * min(1.0, HELPER_OPS / len(point.runs))
    return max(reward, VIEW_REWARD) if token.name in QUIET_OPS else reward


@cache
def call_ops(name: str, variants: bool = True) -> tuple[str, ...]:
    """The top-level ops a call of `name` runs, as a trace's tokens name them (`token_of` reads
    ``aten::bmm`` and ``aten::mm`` as ``aten::matmul``: ``torch.bmm(...)`` predicts that), or its
    namesake op; `variants`: its in-place and private namesakes too (``F.grouped_mm(...)`` is Python
    that runs ``aten::_grouped_mm``)."""
    found = CALL_OPS.get(name)
    if found is None:
        found = (f"aten::{name}", f"aten::{name}_", f"aten::_{name}") if variants else (f"aten::{name}",)
    return _as_tokens(found)


@cache
def operator_ops(op: str) -> tuple[str, ...]:
    """The ops an operator's op may record, as a trace's tokens name them (`call_ops`)."""
    return _as_tokens(OPERATOR_OPS.get(op, (op,)))


def _as_tokens(ops: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(OPERATOR_ALIASES.get(op, op) for op in ops))


def autograd_function(name: str, receiver: str) -> str | None:
    """The class of an autograd Function's ``apply`` call (``GeLUFunction.apply(x)``; by PEP 8, a
    class's name is capitalized): the op it records is named after the class, and its ``forward``
    runs inside that op (`tracer.join.nesting.runs_python`). None for any other call."""
    if name != "apply":
        return None
    last = receiver.rpartition(".")[2]
    return last if runs_python(last) else None


@lru_cache(maxsize=1 << 16)
def predicted_ops(point: CallPoint) -> tuple[str, ...]:
    """The top-level ops `point` runs by name (empty for calls that run a block of their own)."""
    kind = point.kind
    if kind == CALL:
        if runs_no_op(point):
            return ()
        if (function := autograd_function(point.name, point.receiver)) is not None:
            return (function,)
        if iterates_values(point):
            return ITERATING_BUILTINS[point.name]
        return call_ops(point.name)
    if kind == OPERATOR:
        return operator_ops(point.name)
    if kind == GETITEM:
        return tuple(GETITEM_OPS)
    if kind == SETITEM:
        return tuple(SETITEM_OPS)
    if kind == ITER:
        return ("aten::unbind",)
    return ()


class StacklessCosts:
    """The costs of a local alignment of a window of top-level ops with a function."""

    @staticmethod
    def match(point: CallPoint, token: Token) -> float | None:
        if token.kind != OP:
            return None
        if point.kind == VIEWS:
            return VIEW_REWARD if token.name in views_of(point) else None
        if (helper := _helper_reward(point, token)) is not None:
            return helper
        if token.name in predicted_ops(point):
            if token.bias is not None and point.bias is not None:  # the shapes and the source say
                if token.bias != point.bias:
                    return BIAS_AGAINST
                if token.bias:  # a bias is the rarer choice: no bias where none was built says less
                    return BIAS_FOR
            if token.bias and point.bias_default:  # the config's default builds it with one (no bias
                return BIAS_FOR  # says nothing against: a checkpoint's config may turn it off)
            return QUIET_REWARD if token.name in QUIET_OPS else REWARD
        return BLOCK if runs_a_block(point) else None

    @staticmethod
    def repeat(point: CallPoint, token: Token) -> float | None:
        if point.kind == VIEWS:
            return VIEW_REWARD if token.name in views_of(point) else None
        if (helper := _helper_reward(point, token)) is not None:
            return helper
        if (
            point.kind == CALL
            and token.name in QUIET_OPS
            and token.name in FROM_DATA_CALLS.get(point.name, ())
        ):
            return QUIET_REWARD  # another op of ``torch.tensor(data)``'s (one ``to`` at most)
        if iterates_values(point) and token.name in ITERATING_BUILTINS[point.name]:
            return VIEW_REWARD  # the next element's
        return BLOCK if token.kind == OP and runs_a_block(point) else None

    @staticmethod
    def insert(token: Token) -> float:
        return 0.05 if token.noise else INSIDE

    @staticmethod
    def skip(point: CallPoint) -> float:
        """Without frames every op shows: a torch call or a tensor operator that ran nothing is
        evidence against the path that skips it (numbers and types run none)."""
        if point.kind == CALL:
            if (
                runs_no_op(point)
                or iterates_values(point)  # (most often over Python values: no op)
                or (point.callee == BY_ATTRIBUTE and point.name in NOTHING_TO_DO_METHODS)
            ):
                return 0.05
            return 0.3 if runs_a_block(point) else SKIPPED_OP
        if point.kind == OPERATOR:
            return 0.05 if point.scalar_like else SKIPPED_OP
        if point.kind in (GETITEM, SETITEM):
            return 0.1
        return 0.0


STACKLESS = StacklessCosts()


# -- the windows ----------------------------------------------------------------------------------------


class OpWindows:
    """Each thread's top-level CPU ops in time order, and the window of names around any of them.

    Inside an autograd Function's op, the ops its ``forward`` runs are top-level ops too
    (`JoinState.top_ops`): they follow the Function's op, as its caller's ops follow each other.
    ``ids(rows)`` numbers the distinct windows, so that ops with equal windows (equal answers)
    share one context in the join.
    """

    def __init__(self, state: JoinState) -> None:
        import numpy as np

        from tracer.join.columns import ValueCodes, column, group_by_thread, values_at
        from tracer.join.nesting import by_start

        table = state.table
        tops = np.fromiter(state.top_ops, dtype=np.int64, count=len(state.top_ops))
        tops.sort()
        self._names = table.name
        self._marked: dict[int, str] = {}  # rows whose window name says more than the op's (its bias)
        self._threads: list[np.ndarray] = []
        self._position = np.full(len(table), -1, dtype=np.int64)
        self._thread_of = np.full(len(table), -1, dtype=np.int64)
        codes = ValueCodes()
        self._codes: list[np.ndarray] = []
        cat = column(table.cat)
        tops = tops[cat[tops] == Cat.CPU_OP] if len(tops) else tops
        for rows in group_by_thread(table, tops).values():
            ordered = by_start(table, rows)
            self._position[ordered] = np.arange(len(ordered))
            self._thread_of[ordered] = len(self._threads)
            self._threads.append(ordered)
            names = values_at(table.name, ordered)
            for i, name in enumerate(names):
                if name in BIASED_OPS and (marked := with_bias(name, table.args[ordered[i]])) != name:
                    names[i] = self._marked[int(ordered[i])] = marked
            self._codes.append(codes.of(names))

    def ids(self, rows: np.ndarray) -> np.ndarray:
        """A 63-bit hash per row of its thread and window's content (-1 for a row that is no
        top-level op): equal windows, equal ids, whichever rows are asked about together."""
        import numpy as np

        out = np.full(len(rows), -1, dtype=np.int64)
        known = rows != NONE
        known[known] = self._position[rows[known]] >= 0
        if not known.any():
            return out
        picked = rows[known]
        thread = self._thread_of[picked]
        position = self._position[picked]
        digest = np.zeros(len(picked), dtype=np.uint64)
        with np.errstate(over="ignore"):
            for t in np.unique(thread).tolist():
                mine = np.flatnonzero(thread == t)
                codes = self._codes[t].astype(np.uint64) + np.uint64(2)  # 1: before/after the thread's ops
                h = np.full(len(mine), np.uint64(t + 1), dtype=np.uint64)
                for offset in range(-WINDOW, WINDOW + 1):
                    at = position[mine] + offset
                    inside = (at >= 0) & (at < len(codes))
                    value = np.ones(len(mine), dtype=np.uint64)
                    value[inside] = codes[at[inside]]
                    h = h * np.uint64(0x100000001B3) + value
                    h ^= h >> np.uint64(29)
                digest[mine] = h
        out[known] = (digest >> np.uint64(1)).astype(np.int64)
        return out

    def id_of(self, row: int) -> int:
        """`ids` of one row."""
        import numpy as np

        return int(self.ids(np.asarray([row], dtype=np.int64))[0])

    def around(self, row: int) -> tuple[tuple[str, ...], int] | None:
        """(names of the window's ops, the index of `row` among them), or None."""
        position = int(self._position[row]) if row != NONE else -1
        if position < 0:
            return None
        rows = self._threads[int(self._thread_of[row])]
        start = max(0, position - WINDOW)
        picked = rows[start : position + WINDOW + 1].tolist()
        return tuple(self._marked.get(r) or self._names[r] for r in picked), position - start


# -- the ranking ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One line that may have run the op, and why (for) or why not (against)."""

    file: str
    line: int
    score: float  # lower is better
    function: str
    site_id: str | None = None
    rule: str | None = None
    reasons_for: tuple[str, ...] = ()
    reasons_against: tuple[str, ...] = ()
    # the file of the function whose call reached this line of another file's helper (``repeat_kv`` of
    # ``integrations/sdpa_attention.py`` from Gemma2's attention, through the attention table): the
    # call says which copy ran, and the caller's file what the rest of the trace fits
    via: str | None = None

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"

    def describe(self) -> str:
        parts = [f"{self.location} (`{self.function}`{', ' + self.rule if self.rule else ''})"]
        if self.reasons_for:
            parts.append("for: " + "; ".join(self.reasons_for))
        if self.reasons_against:
            parts.append("against: " + "; ".join(self.reasons_against))
        return " ".join(parts)


@dataclass(frozen=True)
class Ranking:
    """Candidates best first, how sure, and how they were found (each candidate's own reasons are in
    `Candidate.describe`)."""

    candidates: tuple[Candidate, ...]
    confidence: float
    evidence: tuple[str, ...]
    # (file, line) of every candidate within `SUPPORT_MARGIN` of the best, past `MAX_CANDIDATES`: which
    # files may have run, when more copies tie than a ranking lists
    near: tuple[tuple[str, int], ...] = ()
    weak: bool = False  # no function fits more of the window than about the op itself (`WEAK_FIT`)


@dataclass
class _SourceFile:
    path: Path
    name: str  # as origins name it: relative to the root's parent (``sglang/srt/...``)
    text: str
    spelled: frozenset[str]  # the names it calls (``to``, ``cat``) and the operators it uses (``*``)
    programs: ModulePrograms | None = None
    functions: list[_Function] = field(default_factory=list)
    bindings: ModuleBindings | None = None
    lambdas: dict[int, _Function | None] = field(default_factory=dict)
    frames: dict[tuple[int, str], _Function | None] = field(default_factory=dict)  # comprehensions'
    callbacks: dict[tuple[str, ...], list[_Function]] = field(default_factory=dict)  # `_callbacks`


@dataclass(eq=False)
class _Function:
    """A function of a parsed file, sketched without building its program: the ops its calls and
    operators name (`bag`) and the helpers it calls by name, for picking what to align."""

    file: _SourceFile
    line: int  # as the profiler keys it (the def line)
    name: str
    owner: str | None  # its class
    bag: frozenset[str]
    # (name, receiver: SELF, SUPER, NAME, ATTRIBUTE, PROPERTY_READ, ELEMENT, how an ATTRIBUTE
    # call's receiver is written: `CallPoint.receiver`)
    calls: tuple[tuple[str, str, str], ...]
    bindings: dict[str, tuple[Binding, ...]] = field(default_factory=dict)  # its names' (and closure's)
    abstract: bool = False  # its body only says it is to be overridden (``...``, NotImplementedError)
    # its positional parameters (a method's without ``self``) and how many take no default
    parameters: tuple[str, ...] = ()
    required: int = 0
    # the def lines of the functions nested in it that it returns by name: calling what it returns
    # runs one of them (a factory of closures: transformers' ``and_masks`` returns ``and_mask``)
    returns: tuple[int, ...] = ()

    def program(self) -> Program | None:
        return self.file.programs.program(self.line, self.name) if self.file.programs is not None else None


@dataclass(frozen=True)
class _Expanded:
    """A function's program with the helpers it calls spliced in where it calls them (as an
    alternative to the call's own block), so that the ops before and after a helper's run are
    judged by its caller: each point keeps the file and function it is written in."""

    program: Program
    files: tuple[str, ...]
    functions: tuple[str, ...]
    ops: frozenset[str]  # every op the points predict
    inlined: frozenset[int] = frozenset()  # calls whose helper is spliced in: the helper's lines answer


@dataclass(frozen=True)
class _Splice:
    """A helper `StacklessRanker._expand` may splice in at a call: the states the call's point joins,
    the point, the helper and its own expanded program."""

    u: int
    v: int
    point: int
    helper: _Function
    expanded: _Expanded
    forced: bool  # the call is opened: spliced in past the size cap
    passed: bool  # a lambda the call is given: it may run any number of times
    depth: int  # the depth left for the helper's own helpers


INLINE_DEPTH = 2  # helpers of helpers
MAX_CALLEES = 3  # alternatives spliced in for one call (``self.act = A() if ... else B()``)
MAX_REGISTRY_CALLEES = 8  # ... for a call of what a table of functions holds (every attention backend)
MAX_CALLBACKS = 12  # functions a callable given as a value may be, by its parameters (more: none)
MAX_CALLBACK_POINTS = 16  # ... each of at most this many points of its own (spliced into every such call)
MAX_DEFINING_FILES = 3  # a class or function defined in more files than this is not looked up by name
# How a call names what it runs, for `StacklessRanker._callees`.
SELF, SUPER, NAME, ATTRIBUTE, PROPERTY_READ, ELEMENT = (
    "self",
    "super",
    "name",
    "attribute",
    "property",
    "element",
)
# ``store.put(...)`` named like a tensor method (``Tensor.put``): only what the receiver's type says
TYPED = "typed"
MAX_INLINED_POINTS = 600
OPENED_BLOCKS = 4  # calls whose block holds the hot op that are opened per window (`StacklessRanker._rank`)
NEAR_TIE = 0.1  # scores this close are a tie the ranking says (`_said_alike`): two calls of no op
# the ops of the torch.nn layers a call of an attribute built as one runs (``self.ln = nn.LayerNorm(...)``)
_LAYER_OPS = frozenset(TORCH_MODULE_OPS.values())
# what a custom op's ``forward`` runs (`_dispatched`): the torch reference first, then the platforms'
DISPATCHED_FORWARDS = ("forward_native", "forward_cuda", "forward_cpu")
MAX_ACTIVATION_HOMES = 8  # files defining activation tables or getters looked into (more: none)
# the activation a table names by the op's own name (``"gelu": GELUActivation``) first: a tie-break
NAMED_ACTIVATION = 0.001
# ``self.<name>`` outside a class: bound as the source's classes bind it when this share of at least
# this many single-line assignments agree
ATTRIBUTE_QUORUM = 0.9
ATTRIBUTE_MIN_ASSIGNMENTS = 5
# a ``@dataclass`` (``@dataclass(...)``, ``@dataclasses.dataclass``) class at any depth, other decorators around
_DATACLASS = re.compile(
    r"^[ \t]*@(?:dataclasses\.)?dataclass\b[^\n]*\n(?:[ \t]*@[^\n]*\n)*[ \t]*class[ \t]+(\w+)", re.MULTILINE
)
# a model's entry class as transformers and SGLang name them, which a config's ``architectures`` names:
# ``LlamaForCausalLM``, ``GPTBigCodeForTokenClassification``, ``Gemma3ForConditionalGeneration``
_ENTRY_CLASS = re.compile(r"[A-Z]\w*For(?:CausalLM|ConditionalGeneration|[A-Z][a-z]\w*)")
_SELF_ASSIGNED = re.compile(r"^[ \t]+self\.([A-Za-z_]\w*)[ \t]*=[ \t]*([^=\n][^\n]*)$", re.MULTILINE)


class StacklessRanker:
    """Ranks source lines for ops without Python frames, over the files under the source roots."""

    def __init__(self, sites: SiteIndex, source: SourceLines, architectures: Sequence[str] = ()) -> None:
        self.sites = sites
        self.source = source
        # the model classes the user says ran (a config's ``architectures``): `_named_files`
        self.architectures = tuple(architectures)
        self._named: list[_SourceFile] | None = None
        self._named_bases: frozenset[str] | None = None  # `_named_classes`
        self._files: list[_SourceFile] | None = None
        self._rankings: dict[tuple, Ranking] = {}
        self._expanded: dict[int, _Expanded | None] = {}
        self._opened_blocks: dict[tuple, _Expanded | None] = {}
        self._bags: dict[tuple[int, int], frozenset[str]] = {}  # (function, depth) -> `_bag`
        self._by_name: dict[str, list[_Function]] = {}  # the functions parsed so far, by name (helpers)
        self._index: dict[str, list[int]] | None = None  # spelled name -> files spelling it
        self._holders: dict[frozenset[str], frozenset[int]] = {}
        self._importers: Counter | None = None  # file -> how many files import it (ties)
        self._functions: FunctionSpellings | None = None  # what each function spells (file picking)
        self._definitions: dict[tuple[str, str], list[int]] | None = None  # ("class"/"def", name) -> files
        self._copies: FunctionCopies | None = None
        self._by_file_name: dict[str, _SourceFile] | None = None
        self._deep_digests: dict[tuple[int, int], tuple | None] = {}  # `_deep_digest`, by id and depth
        self._digests: dict[str, dict[int, tuple[bytes, str]]] = {}  # file -> def line -> `_copy_key`
        self._support: dict[str, float] = {}  # file -> share of the windows it fits (`agree`)
        self._implemented: dict[tuple[str, str, str], list[_Function]] = {}  # (file, class, method)
        self._fits: dict[tuple, dict[int, float]] = {}  # (program, window, hot) -> point -> cost
        self._compatible: dict[int, dict] = {}  # program -> token -> its edges (`Alignment`)
        self._supported: list[_SourceFile] = []  # the files by that share, most first
        self._challenging: dict[tuple, list[_SourceFile]] = {}  # per window key: `_challengers`
        self._assigned: dict[str, list[str]] | None = None  # attribute -> ``self.<it> = ...`` values
        self._anywhere: dict[str, tuple[Binding, ...]] = {}  # attribute -> what they agree it runs
        self._records: frozenset[str] | None = None  # class names that are dataclasses (`_is_record`)
        self._activation_homes: list[_SourceFile] | None = None  # files defining ACT2FN, get_act_fn
        self._activations: dict[str, list[tuple[str, int, str, str]]] = {}  # op -> its activations' lines
        self._default_activation_keys: dict[str, frozenset[str]] = {}  # file -> `_default_keys`
        self._config_texts: dict[Path, list[str]] | None = None  # folder -> its config modules' texts
        self._bias_flags: dict[str, frozenset[str]] = {}  # file -> `_bias_flags_on`
        self._registries: dict[tuple[str, str], list[_Function]] = {}  # (file, table) -> its functions

    def rank(
        self,
        window: Sequence[str],
        hot: int,
        ranges: Sequence[str],
        target_dtype: str | None,
    ) -> Ranking:
        key = (tuple(window), hot, tuple(ranges), target_dtype)
        found = self._rankings.get(key)
        if found is None:
            found = self._rankings[key] = self._rank(tuple(window), hot, tuple(ranges), target_dtype)
        return found

    def _rank(self, window, hot, ranges, target_dtype) -> Ranking:
        hot_op = token_of(window[hot], Cat.CPU_OP).name
        challengers = self._challenging.get((window, hot, ranges, target_dtype), [])
        files = self._files_for(window, hot, challengers)
        if not files:
            return Ranking((), 0.0, ("no source file under the source roots spells the ops around it",))
        tokens = tuple(token_of(name, Cat.CPU_OP) for name in window)
        wanted = {t.name for t in tokens if not t.noise}
        by_calls, by_own = [], []  # the ops it and its callees name; the ops its own lines name
        for source_file in files:
            for function in source_file.functions:
                bag = self._bag(function)
                if hot_op in bag or function.calls:
                    key = (source_file.name, function.line)  # ties: the more specific bag first
                    by_calls.append((-(len(wanted & bag) + 2 * (hot_op in bag)), len(bag), *key, function))
                    if hot_op in function.bag:
                        by_own.append((-(len(wanted & function.bag) + 2), len(function.bag), *key, function))
        by_calls.sort(key=lambda item: item[:4])
        by_own.sort(key=lambda item: item[:4])
        # a caller's bag holds its callees' ops and outgrows theirs: the functions that spell the op
        # themselves get places of their own
        # copies of one function (same text, same ops with their helpers) align alike: one of them
        # is aligned (`agree` later answers in each copy), so that the places go to different code
        picked = self._distinct(by_calls) + self._distinct(by_own)
        # the files the whole trace fits (`agree`) are aligned past the caps: their best few functions
        supported = {id(f) for f in (*self._supported, *challengers)}
        # (the files the last round fit best, `SUPPORTED_CALLERS` more: the widest reach a helper's
        # helper past the inlining depth, StableLM's rotary from its layer, and need its attention)
        leading = {id(f) for f in self._supported}
        per_file: Counter = Counter()
        for item in by_calls:
            source_file = item[-1].file
            cap = SUPPORTED_FUNCTIONS + (SUPPORTED_CALLERS if id(source_file) in leading else 0)
            if id(source_file) in supported and per_file[source_file.name] < cap:
                per_file[source_file.name] += 1
                picked.append(item)
        functions = list({id(item[-1]): item for item in picked}.values())
        words = _range_words(ranges)
        scored: dict[tuple[str, int], Candidate] = {}
        weak: dict[tuple[str, int], Candidate] = {}  # fits past `WEAK_FIT` only
        # the hot op placed in the block of a helper's call not spliced in (past the depth or the size
        # cap: ``_sample`` runs dozens): (cost, function, the call); the best of them are opened below
        blocks: list[tuple[float, str, int, _Function, tuple]] = []

        def take(
            function: _Function,
            expanded: _Expanded,
            best: dict[int, float],
            scored: dict[tuple[str, int], Candidate],
            weak: dict[tuple[str, int], Candidate],
        ) -> None:
            block: tuple | None = None  # the function's best block that holds the hot op
            for p, cost in best.items():
                if cost > -WEAK_FIT:
                    continue  # too little of the window fits
                point = expanded.program.points[p]
                if point.runs is not None:
                    if hot_op in point.runs and cost <= -MIN_FIT and (block is None or cost < block[0]):
                        call = (expanded.files[p], point.line, point.col, point.name)
                        block = (cost, function.file.name, function.line, function, call)
                    continue  # the helper's own line answers (or, opened, its caller's fit)
                if p in expanded.inlined:  # a helper's line answers ...
                    if point.name != ACTIVATION or hot_op not in ACTIVATION_OPS:
                        continue
                    found = self._activation_candidates(expanded, p, cost, hot_op)  # ... the activation's
                else:
                    found = [self._judge(expanded, p, cost, words, target_dtype)]
                for candidate in found:
                    if candidate.score > -WEAK_FIT:
                        continue  # what speaks against it outweighs the fit
                    pool = scored if cost <= -MIN_FIT and candidate.score <= -MIN_FIT else weak
                    key = (candidate.file, candidate.line)
                    if key not in pool or candidate.score < pool[key].score:
                        pool[key] = candidate
            if block is not None:
                blocks.append(block)

        for *_, function in functions:
            expanded = self._expand(function)
            if expanded is not None:
                take(function, expanded, self._fit(expanded.program, tokens, hot), scored, weak)
        # the callers whose blocks of a helper's call fit the window best (a block rewards the ops it
        # holds less than lines that name them): the helper spliced in at that call alone, so that its
        # lines are judged by the ops its caller runs around it (the generate loop's step update, whose
        # arange alone fits less than a model's own arange with the norm before it). What they find
        # ranks, but says nothing of which files ran (`near`): the files' evidence stays the aligned
        # functions' own (a hybrid file's opened helpers took a dense model's trace from its file)
        everything = dict(scored)  # and what the opened blocks find (one block per function)
        for _, _, _, function, call in sorted(blocks, key=lambda b: b[:3])[:OPENED_BLOCKS]:
            expanded = self._opened(function, call)
            if expanded is not None:
                take(function, expanded, self._fit(expanded.program, tokens, hot), everything, weak)
        if not everything:
            return self._weak_ranking(weak, hot_op)
        ranked = _best_first(everything.values())
        confidence = self._confidence(ranked)
        evidence = (
            (
                f"{len(everything)} line(s) fit the {len(window)} ops around this {hot_op} ({len(functions)} "
                "function(s) aligned with them); ranked by how well the ops fit each function's source, in order"
            ),
        )
        # a challenger (`_challengers`: aligned with every window it did not fit) counts for its file
        # only where it fits within `NEAR_TIE` of the best, by the fit alone (the score charges a file
        # for the windows it does not fit yet): tried on every window, it fits some nearly by chance
        # (on Llama's trace, SmolLM3's model fits a mask's window that the masking code fits best)
        challenging = {f.name for f in challengers}
        fit = {key: self._fit_alone(c) for key, c in scored.items()} if challenging else {}
        best_fit = min(fit.values(), default=0.0)
        aligned_best = min((c.score for c in scored.values()), default=0.0)
        near = tuple(
            sorted(
                key
                for key, c in scored.items()
                if c.score <= aligned_best + SUPPORT_MARGIN
                and ((c.via or c.file) not in challenging or fit[key] <= best_fit + NEAR_TIE)
            )
        )
        return Ranking(tuple(ranked), confidence, evidence, near)

    def _opened(self, function: _Function, call: tuple) -> _Expanded | None:
        """`_expand` with the helper of `call` (file, line, col, name) spliced in however deep or big;
        kept (alive, as `_fit` keys its programs by id)."""
        key = (id(function), call)
        if key not in self._opened_blocks:
            self._opened_blocks[key] = self._expand(function, opened=frozenset({call}))
        return self._opened_blocks[key]

    @staticmethod
    def _weak_ranking(weak: dict[tuple[str, int], Candidate], hot_op: str) -> Ranking:
        """No function fits more of the window than about its op: the lines that fit at least that, a
        ranking that says it is a weak one. It counts for no file's share of the trace (`near` is
        empty), and `agree` ranks it again by the files the rest of the trace fits."""
        if not weak:
            return Ranking(
                (), 0.0, (f"no function under the source roots fits the ops around this {hot_op}",)
            )
        ranked = _best_first(weak.values())
        said = (
            f"a weak ranking: no function under the source roots fits more of the ops around this {hot_op} "
            f"than about the op itself (a ranking needs a fit of {MIN_FIT}); {len(weak)} line(s) fit at least that"
        )
        return Ranking(tuple(ranked), WEAK_CONFIDENCE, (said,), weak=True)

    def _fit(self, program: Program, tokens: tuple[Token, ...], hot: int) -> dict[int, float]:
        """{point: cost of the best alignment of the window putting its hot op there}; kept, as
        `agree` ranks every window again over mostly the same functions."""
        key = (id(program), tokens, hot)
        found = self._fits.get(key)
        if found is None:
            compatible = self._compatible.setdefault(id(program), {})
            alignment = Alignment(program, tokens, STACKLESS, local=True, focus=hot, compatible=compatible)
            found, _ = alignment.scores(hot)
            self._fits[key] = found
        return found

    def _distinct(self, ranked: list[tuple]) -> list[tuple]:
        """The first `MAX_FUNCTIONS` of `ranked` (items ending in a `_Function`, best first), one per
        copy, and those tied with the last of them by the ops they name (up to `MAX_TIED_FUNCTIONS`:
        a window of a few common ops, ``to`` and ``add``, is named alike by many functions)."""
        out: list[tuple] = []
        seen: dict[tuple, str] = {}  # copy -> the file of the one aligned
        for item in ranked:
            function = item[-1]
            key = self._alike(function)
            if key is not None and seen.get(key, function.file.name) != function.file.name:
                continue  # (the same text in another class of its file answers apart: `answering`)
            if len(out) >= MAX_FUNCTIONS and (item[0] != out[-1][0] or len(out) >= MAX_TIED_FUNCTIONS):
                break  # past the cap, only functions that name as many of the window's ops
            if key is not None:
                seen.setdefault(key, function.file.name)
            out.append(item)
        return out

    def _deep_digest(self, function: _Function, depth: int = INLINE_DEPTH, stack: tuple = ()) -> tuple | None:
        """The digest of the function's text and of the helpers it calls (to `depth`): a decoder layer
        copied from Llama's that builds its own file's attention, a variant of Llama's, is no copy of
        Llama's layer (each is aligned, reaching its own file's attention). None if not found."""
        if not stack and (id(function), depth) in self._deep_digests:
            return self._deep_digests[(id(function), depth)]
        own = self._digest(function)
        found: tuple | None = None
        if own is not None:
            callees: set[Binding | tuple | None] = set()
            if depth > 0:
                for name, receiver, via in function.calls:
                    for callee in self._callees(name, receiver, function, (*stack, id(function)), via):
                        if isinstance(callee, Binding):
                            callees.add(callee)
                        else:
                            callees.add(self._deep_digest(callee, depth - 1, (*stack, id(function))))
            found = (own, frozenset(callees))
        if not stack:
            self._deep_digests[(id(function), depth)] = found
        return found

    def _alike(self, function: _Function) -> tuple | None:
        """What copies that align alike share: their text and their helpers' (`_deep_digest`), the ops
        those name past the depth (`_bag`) and the attributes their class only sets to numbers
        (``x * self.scaling`` then runs no tensor op). None if the function's text is not found."""
        deep = self._deep_digest(function)
        if deep is None:
            return None
        scalars = self._class_scalars(function.owner, function.file) if function.owner else frozenset()
        return (deep, self._bag(function), scalars)

    def _digest(self, function: _Function) -> bytes | None:
        """The digest of the function's normalised text (`FunctionCopies`), None if not found."""
        key = self._copy_key(function.file.name, function.line)
        return key[0] if key is not None else None

    def _copy_key(self, file: str, line: int) -> tuple[bytes, str] | None:
        """What the copies of the function defined at `line` of `file` share (`FunctionCopies`: the
        digest of its normalised text, and its name), None if no function is defined there."""
        keys = self._digests.get(file)
        if keys is None:
            keys = self._digests[file] = {
                text.line: (text.digest, text.name) for text in self._function_copies().functions(file)
            }
        return keys.get(line)

    def _judge(self, expanded: _Expanded, p: int, cost: float, words, target_dtype) -> Candidate:
        point = expanded.program.points[p]
        file, function = expanded.files[p], expanded.functions[p]
        reasons_for, reasons_against = [], []
        via = f" (called from `{expanded.program.name}`)" if function != expanded.program.name else ""
        reasons_for.append(f"the ops around it fit `{function}`{via} (score {-cost:.1f})")
        score = cost
        if point.dtype is not None and target_dtype is not None:
            if point.dtype == target_dtype:
                score += DTYPE_FOR
                reasons_for.append(f"casts to {target_dtype} as the op does")
            else:
                score += DTYPE_AGAINST
                reasons_against.append(f"casts to {point.dtype}, the op to {target_dtype}")
        if words & {function, function.rsplit(".", 1)[-1], *function.split(".")}:
            score += RANGE_FOR
            reasons_for.append("a range around the op names its function")
        top = expanded.files[0] if expanded.files else file
        caller_file = top if top != file else None  # a helper of another file: the call says which copy
        if self._support:
            share, picker = self._backing(caller_file or file, self._support)
            score += self._support_cost(caller_file or file, self._support)
            if share < 0.5:
                reasons_against.append(
                    f"the rest of the trace fits its file little ({share:.0%} of the best file)"
                )
            elif picker is not None:
                reasons_for.append(
                    f"{picker}, which picks its activation by a config value, holds the code the rest of "
                    f"the trace fits ({share:.0%} of the best file's)"
                )
        site = self._site_at(file, point.line, point.col)
        if site is not None:
            score -= site.risk / 1000.0  # the scanner's estimate of hotness: a tie-break
        return Candidate(
            file,
            point.line,
            round(score, 4),
            function,
            site.id if site is not None else None,
            (site.rule or None) if site is not None else None,
            tuple(reasons_for),
            tuple(reasons_against),
            caller_file,
        )

    def _activation_candidates(
        self, expanded: _Expanded, p: int, cost: float, hot_op: str
    ) -> list[Candidate]:
        """The window fits a call of an activation chosen by a config value (``self.act_fn(x)``,
        ``ACT2FN[config.hidden_act]``) at point `p`: the lines of the activations that run `hot_op`,
        each scored by that fit (which activation the config chose, the source cannot say)."""
        caller = expanded.functions[p]
        candidates = []
        for file, line, function, named in self._activation_lines(hot_op):
            site = self._site_at(file, line)
            reasons = [
                (
                    f"the ops around it fit `{caller}` (score {-cost:.1f}), which calls an activation "
                    f"chosen by a config value; `{function}` runs {hot_op}"
                )
            ]
            if named:  # a tie-break: configs most often name an activation by its op
                reasons.append(f"the activation table names it by the op's own name ({named!r})")
            candidates.append(
                Candidate(
                    file,
                    line,
                    round(cost - (NAMED_ACTIVATION if named else 0.0), 4),
                    function,
                    site.id if site is not None else None,
                    (site.rule or None) if site is not None else None,
                    reasons_for=tuple(reasons),
                )
            )
        return candidates

    def _activation_lines(self, hot_op: str) -> list[tuple[str, int, str, str]]:
        """(file, line, module, the table's key naming the module by the op's own name or "") of each
        line of a module's forward that runs `hot_op`, in the files that define an activation table or
        getter (`bindings.defines_activations`)."""
        found = self._activations.get(hot_op)
        if found is None:
            found = []
            key = hot_op.rsplit("::", 1)[-1]
            for home in self._homes():
                self._parse_file(home)
                named = set(activations_named(home.text, key))
                for function in home.functions:
                    # the op on its own lines, or through an attribute bound to it (``self.act``)
                    if (
                        function.owner is None
                        or function.name not in MODULE_CALLS
                        or hot_op not in self._bag(function, 1)
                    ):
                        continue
                    expanded = self._expand(function)
                    if expanded is None:
                        continue
                    found.extend(
                        (
                            home.name,
                            point.line,
                            f"{function.owner}.{function.name}",
                            key if function.owner in named else "",
                        )
                        for q, point in enumerate(expanded.program.points)
                        if q not in expanded.inlined and hot_op in call_ops(point.name, variants=False)
                    )
            found = self._activations[hot_op] = list(dict.fromkeys(found))
        return found

    def _homes(self) -> list[_SourceFile]:
        """The files that define an activation table or getter (none past `MAX_ACTIVATION_HOMES`)."""
        if self._activation_homes is None:
            homes = [f for f in self._all_files() if defines_activations(f.text)]
            self._activation_homes = homes if len(homes) <= MAX_ACTIVATION_HOMES else []
        return self._activation_homes

    def _default_activation(self, firsts: Iterable[Candidate]) -> _DefaultActivation | None:
        """The activations the code the trace ran picks when its config keeps its defaults
        (`config_defaults`): those the file of the model the user names picks, else those of the file
        the rankings' first answers name most of the files that pick an activation by a config value,
        where no file picking others is named at least half as often; None when none is, or no
        activation table names the picked key."""
        homes = self._homes()
        if not homes:
            return None
        chosen = self._named_pick() or self._answered_pick(firsts)
        if chosen is None:
            return None
        file, keys = chosen
        classes = frozenset(
            name for home in homes for key in keys for name in activations_named(home.text, key)
        )
        if not classes:
            return None
        return _DefaultActivation(file, tuple(sorted(keys)), classes, frozenset(h.name for h in homes))

    def _named_pick(self) -> tuple[str, frozenset[str]] | None:
        """The file of the model the user names (`_named_files`) that picks an activation by a config
        value, and the keys it picks by default: it decides, whatever copies of its code answer."""
        return next(
            ((f.name, keys) for f in self._named_files() if (keys := self._default_keys(f.name))), None
        )

    def _answered_pick(self, firsts: Iterable[Candidate]) -> tuple[str, frozenset[str]] | None:
        """Of the files that pick an activation by a config value, the one the rankings' first answers
        (`firsts`) name most, and the keys it picks by default; None where a file picking others is
        named at least half as often."""
        picking = [
            (count, file, keys)
            for file, count in Counter(c.file for c in firsts).items()
            if (keys := self._default_keys(file))
        ]
        if not picking:
            return None
        count, file, keys = max(picking, key=lambda item: (item[0], item[1]))
        if any(other != keys and 2 * n >= count for n, _, other in picking):
            return None  # files picking different activations are answered about as often
        return file, keys

    def _default_keys(self, name: str) -> frozenset[str]:
        """The activation table keys file `name` picks when its config keeps its defaults (its
        config modules: those beside it, `config_defaults.is_config_file`)."""
        return self._read_with_configs(self._default_activation_keys, name, default_activation_keys)

    def _bias_by_default(self, source_file: _SourceFile, attribute: str) -> bool:
        """Whether a layer whose bias the config attribute `attribute` decides (``bias=config.use_bias``)
        is built with one when the config beside `source_file` keeps its default. (Copies stay copies
        of those built without one, `FunctionCopies`: told apart too, the hold-out's Nemotron generate
        fell from 83.4 to 18.6% ranked first, as other variants of its attention were aligned in
        place of its own.)"""
        return bool(attribute) and attribute in self._bias_flags_on(source_file.name)

    def _bias_flags_on(self, name: str) -> frozenset[str]:
        """The config attributes file `name` builds biases by whose default is True
        (`config_defaults.bias_flags_on`)."""
        return self._read_with_configs(self._bias_flags, name, bias_flags_on)

    def _read_with_configs(
        self,
        known: dict[str, frozenset[str]],
        name: str,
        read: Callable[[str, list[str]], frozenset[str]],
    ) -> frozenset[str]:
        """`read` of file `name`'s text and its config modules' texts (`_configs_beside`), kept in
        `known`; empty for a file not found."""
        found = known.get(name)
        if found is None:
            source_file = self._files_by_name().get(name)
            found = frozenset()
            if source_file is not None:
                found = read(source_file.text, self._configs_beside(source_file.path))
            known[name] = found
        return found

    def _configs_beside(self, path: Path) -> list[str]:
        """The texts of the config modules in the folder of `path` (`config_defaults.is_config_file`)."""
        if self._config_texts is None:
            self._config_texts = {}
            for source_file in self._all_files():
                if is_config_file(source_file.path):
                    self._config_texts.setdefault(source_file.path.parent, []).append(source_file.text)
        return self._config_texts.get(path.parent, [])

    # -- copies: which file ran, from the whole trace ---------------------------------------------------
    def agree(self) -> dict[int, tuple[Ranking, Ranking]]:
        """Rank again, knowing which files the whole trace fits; answer copies in the file that ran.

        Each window's candidates within `SUPPORT_MARGIN` of its best, and their copies in other
        files (`_fits`), count for their files, weighted by the window's best fit (`_windows_fitting`). Then every window is
        ranked again with the files that together fit the windows (`_covering`) and those most
        windows fit (`SUPPORTED_FILES`) aligned as well, a candidate in a file that fits less than the
        best file losing up to `SUPPORT_AGAINST`; `AGREE_ROUNDS` times, each round knowing which files
        the one before fit. Each candidate then stands for all its copies, each judged by how much of
        the last ranking fits its file. Files defining the model the user names (`architectures`)
        count as fitting every window, are aligned with each, and answer first where code fits alike
        (`_named_fit`, `_named_first`). Returns the rankings that
        change: (the one replaced, the new one), by the `id` of the one replaced (kept alive with
        it, so that the id names no other object)."""
        first = {key: ranking for key, ranking in self._rankings.items() if ranking.candidates}
        if len(first) < 2:
            return {}
        same = _SameLines(self._function_copies())
        second = first
        for _ in range(AGREE_ROUNDS):  # each round ranks knowing which files the one before fit
            fits = _fits(second.values(), same)
            self._support = self._named_fit(_shares(_windows_fitting(fits)))
            self._supported = self._fitted_files([files for _, files in fits])
            self._challenging = self._challengers(zip(second, (files for _, files in fits)))
            self._rankings.clear()
            again = {key: self.rank(*key) for key in first}
            second = {key: ranking for key, ranking in again.items() if ranking.candidates}
        fits = _fits(second.values(), same)
        shares = self._named_fit(_shares(_windows_fitting(fits)))
        counts = Counter(file for _, files in fits for file in files)
        used = self._used_shares(second.values(), same)
        gaps = _FitGaps(second.values(), same)
        answered = {}
        for key, ranking in second.items():
            answers = self._with_copies(ranking.candidates, same, shares, counts, len(second), gaps)
            answered[key] = self._break_tie(answers, same, used, gaps)  # of all the copies that tie
        chosen = self._default_activation(answers[0] for answers, _ in answered.values())
        changed = {}
        for key, ranking in again.items():
            new = ranking
            if ranking.candidates:
                answers, said = answered[key]
                answers, picked = _default_first(answers, chosen)
                answers, named = self._named_first(answers)
                answers, tested = _tests_last(answers)
                answers, said = answers[:MAX_CANDIDATES], (*said, *picked, *named, *tested)
                new = replace(
                    ranking,
                    candidates=answers,
                    confidence=WEAK_CONFIDENCE if ranking.weak else self._confidence(answers),
                    evidence=(*ranking.evidence, *said),
                )
            if new != first[key]:
                changed[id(first[key])] = (first[key], new)
        self._support = shares
        return changed

    # -- the model the user names ------------------------------------------------------------------------
    def _named_files(self) -> list[_SourceFile]:
        """The files that define a class of `architectures` (a config's ``MistralForCausalLM``); of
        several (transformers' ``modular_mistral.py`` beside the ``modeling_mistral.py`` generated from
        it), those most files import: the one the package runs."""
        if self._named is None:
            self._named = []
            if self.architectures:
                pattern = re.compile(rf"^class\s+(?:{'|'.join(map(re.escape, self.architectures))})\b", re.M)
                defining = [f for f in self._all_files() if pattern.search(f.text)]
                importers = self._importer_counts()
                most = max((importers[f.name] for f in defining), default=0)
                self._named = [f for f in defining if importers[f.name] == most]
        return self._named

    def named_note(self) -> str | None:
        """A note for the user when the model they name (`architectures`) is defined by no file under
        the source roots: the ranking then goes by the trace alone."""
        if not self.architectures or self._named_files():
            return None
        return (
            f"the config names {' or '.join(self.architectures)}, but no file under --source defines it: "
            "copies of shared code are ranked by the trace alone"
        )

    def _named_fit(self, shares: dict[str, float]) -> dict[str, float]:
        """`shares` with the named files (`_named_files`) fitting the whole trace: the user says their
        code ran, though copies of it in other files fit its windows as well (Mistral's MLP and norms
        are Llama's; its attention differs from Llama's in an argument that runs no op)."""
        named = self._named_files()
        return {**shares, **dict.fromkeys((f.name for f in named), 1.0)} if named and shares else shares

    def _named_first(
        self, candidates: tuple[Candidate, ...]
    ) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
        """The candidates in the named files (`_named_files`) that fit within `TIE_MARGIN` of the first
        (`NAMED_MARGIN` for the named model's variant of the first's function), first: of code that
        fits alike, the file of the model the user names. Before that, the lines of entry classes the
        config does not name (`_other_entry`) go last."""
        names = {f.name for f in self._named_files()}
        if not names or not candidates:
            return candidates, ()
        candidates, said = self._entries_last(candidates)
        if candidates[0].file in names:
            return candidates, said
        best, variant = candidates[0].score, without_model_prefix(candidates[0].function)
        first = [
            c
            for c in candidates
            if c.file in names
            and not self._other_entry(c.function)
            and (
                c.score <= best + TIE_MARGIN
                or (c.score <= best + NAMED_MARGIN and without_model_prefix(c.function) == variant)
            )
        ]
        if not first:
            return candidates, said
        tie = (
            f"the config names {' or '.join(self.architectures)}, which {first[0].file} defines: its line "
            f"first, though `{candidates[0].function}` in {candidates[0].file} fits about alike"
        )
        return (*first, *(c for c in candidates if c not in first)), (*said, tie)

    def _entries_last(
        self, candidates: tuple[Candidate, ...]
    ) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
        """`candidates` with the lines of another entry class (`_other_entry`) after the rest: the
        config names the class that ran (``GPTBigCodeForCausalLM``), so its file's
        ``GPTBigCodeForTokenClassification`` head, whose forward runs the same model and a linear,
        did not; nor did another model's. Moved, not dropped (a script may build another class than
        the one its config names): they stay among the first `MAX_CANDIDATES` where the others leave
        room."""
        return _after_the_rest(
            candidates,
            [c for c in candidates if self._other_entry(c.function)],
            lambda first: (
                f"the config names {' or '.join(self.architectures)}, not `{first.function}`'s class "
                "(another entry class: a task head, or another model's): its line after the others"
            ),
        )

    def _other_entry(self, function: str) -> bool:
        """Whether `function` (``Class.method``) is a method of a model's entry class (``XFor<Task>``,
        the classes a config's ``architectures`` name) other than those the config names (none when
        it names none)."""
        owner, _, _ = function.rpartition(".")
        return (
            bool(self.architectures and _ENTRY_CLASS.fullmatch(owner)) and owner not in self._named_classes()
        )

    def _named_classes(self) -> frozenset[str]:
        """The classes of `architectures` and those they derive from, at any depth (SGLang's
        ``MistralLarge3ForCausalLM(DeepseekV3ForCausalLM)`` runs the ``forward`` of the class it
        derives from)."""
        if self._named_bases is None:
            found, todo = set(self.architectures), list(self.architectures)
            files, definitions = self._all_files(), self._definitions_index()
            while todo:
                name = todo.pop()
                for i in definitions.get(("class", name), [])[:MAX_DEFINING_FILES]:
                    header = re.search(
                        rf"^[ \t]*class[ \t]+{re.escape(name)}[ \t]*\(([^)]*)\)", files[i].text, re.M
                    )
                    for base in header.group(1).split(",") if header else ():
                        base = base.strip().rpartition(".")[2]
                        if base.isidentifier() and base not in found:
                            found.add(base)
                            todo.append(base)
            self._named_bases = frozenset(found)
        return self._named_bases

    def _challengers(self, fitting: Iterable[tuple[tuple, set[str]]]) -> dict[tuple, list[_SourceFile]]:
        """Per window (`fitting`: its key and the files it fits), the `CHALLENGERS` files of most share
        (at least `CHALLENGE_SHARE` of the best's, not `_supported`) that it does not fit: each to be
        aligned with it, its own code (a variant of the attention the rest of the code base copies)
        never having been, as dozens of variants tie in the per-window picks."""
        supported = {f.name for f in self._supported}
        by_name = self._files_by_name()
        contenders = [
            name
            for name in sorted(self._support, key=lambda name: (-self._support[name], name))
            if self._support[name] >= CHALLENGE_SHARE and name not in supported and name in by_name
        ]
        out = {}
        for key, files in fitting:
            challengers = [by_name[name] for name in contenders if name not in files][:CHALLENGERS]
            if challengers:
                out[key] = challengers
        return out

    def _fitted_files(self, fitting: Sequence[set[str]]) -> list[_SourceFile]:
        """The files of the model the user names (`_named_files`), the files that together fit the
        windows (`_covering`; `fitting`: each window's files), then the `SUPPORTED_FILES` that fit the
        most windows."""
        by_share = sorted(self._support, key=lambda name: (-self._support[name], name))
        by_name = self._files_by_name()
        named = [f.name for f in self._named_files()]
        names = dict.fromkeys([*named, *_covering(fitting), *by_share[:SUPPORTED_FILES]])
        return [by_name[name] for name in names if name in by_name]

    def _with_copies(
        self,
        candidates: Sequence[Candidate],
        same: _SameLines,
        shares: dict[str, float],
        counts: Counter,
        windows: int,
        gaps: _FitGaps | None = None,
    ) -> tuple[Candidate, ...]:
        """Each candidate and its copies, each scored by its own file's share of the windows; of
        those that score alike, first those whose files fit the windows closest (`gaps`)."""
        out: dict[tuple[str, int], Candidate] = {}
        for candidate in candidates:
            if candidate.via is not None:  # the call that reached it says which copy ran
                fit = self._fit_alone(candidate)
                score = round(fit + self._support_cost(candidate.via, shares), 4)
                key = (candidate.file, candidate.line)
                if key not in out or out[key].score > score:
                    out[key] = replace(candidate, score=score)
                continue
            fit = self._fit_alone(candidate)
            places = same.answering(candidate.file, candidate.line)
            for file, line, function in places:
                score = round(fit + self._support_cost(file, shares), 4)
                if (file, line) in out and out[(file, line)].score <= score:
                    continue
                moved = (file, line) != (candidate.file, candidate.line)
                site = self._site_at(file, line) if moved else None
                reasons = candidate.reasons_for
                if moved and function and function != candidate.function:  # the copy's own name
                    reasons = tuple(r.replace(f"`{candidate.function}`", f"`{function}`") for r in reasons)
                if len(places) > 1:
                    holders = len({place[0] for place in places})
                    said = f"the same function is in {holders} files; the ops of {counts[file]:g} of "
                    reasons = (*reasons, said + f"the trace's {windows} windows fit this file")
                out[(file, line)] = replace(
                    candidate,
                    file=file,
                    line=line,
                    score=score,
                    function=(function or candidate.function) if moved else candidate.function,
                    site_id=(site.id if site is not None else None) if moved else candidate.site_id,
                    rule=((site.rule or None) if site is not None else None) if moved else candidate.rule,
                    reasons_for=reasons,
                )
        # an exact tie of files that fit as many windows: the file that fits them closer, then the file
        # more of the code base imports first
        importers = self._importer_counts()
        less_fit = gaps.less_fit_than(out.values()) if gaps is not None else _never
        return tuple(
            sorted(
                out.values(),
                key=lambda c: (c.score, less_fit(c), -counts[c.file], -importers[c.file], c.file, c.line),
            )
        )

    def _break_tie(
        self,
        candidates: tuple[Candidate, ...],
        same: _SameLines,
        used: dict[str, float],
        gaps: _FitGaps,
    ) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
        # which code ran (different code that fits about alike), then which copy of it
        candidates, said = _used_first(candidates, used, same)
        if not _tied(candidates, same):
            return candidates, said or _said_alike(candidates, same)
        candidates, which_copy = break_tie(candidates, same, self._importer_counts(), used, gaps)
        return candidates, (*said, *which_copy)

    def _used_shares(self, rankings: Iterable[Ranking], same: _SameLines) -> dict[str, float]:
        """Per file, the share of its functions (but ``__init__``) that some window fits (within
        `SUPPORT_MARGIN` of its best, or a copy of such): how much of the file the trace used."""
        used: dict[str, set[str]] = {}
        for ranking in rankings:
            for near in ranking.near:
                for file, _, name in same.of(*near):
                    if name:
                        used.setdefault(file, set()).add(name)
        copies = self._function_copies()
        out = {}
        for file, names in used.items():
            functions = {f.qualname for f in copies.functions(file) if f.name != "__init__"}
            out[file] = len(names & functions) / len(functions) if functions else 0.0
        return out

    def _importer_counts(self) -> Counter:
        """File -> how many files import it."""
        if self._importers is None:
            self._importers = importer_counts((f.name, f.text) for f in self._all_files())
        return self._importers

    def _backing(self, file: str, shares: dict[str, float]) -> tuple[float, str | None]:
        """The share of the trace's windows that back `file` (`shares`): its own, or, for a file that
        defines an activation table (`_homes`), that of the file of most share which picks its
        activation by a config value (`_default_keys`), and that file (None for its own). An
        activation's ``forward`` is a few ops of every layer: few windows fit its file on their own,
        though it ran, and it charged the activation's lines as another model's file that one window
        fits by chance is charged (the hold-out's CodeGen forward: a mul of ``NewGELUActivation``
        answered in ``DabDetrEncoder.forward``). The model file that calls the activation the config
        chose is what the rest of the trace fits."""
        own = shares.get(file, 0.0)
        if not shares or not any(home.name == file for home in self._homes()):
            return own, None
        share, picker = max(
            ((share, name) for name, share in shares.items() if self._default_keys(name)), default=(0.0, None)
        )
        return (share, picker) if share > own else (own, None)

    def _fit_alone(self, candidate: Candidate) -> float:
        """The candidate's score less the charge `_judge` made for the windows its file (the calling
        file's, if a call reached it) does not fit yet."""
        return candidate.score - self._support_cost(candidate.via or candidate.file, self._support)

    def _support_cost(self, file: str, shares: dict[str, float]) -> float:
        return SUPPORT_AGAINST * (1.0 - self._backing(file, shares)[0]) if shares else 0.0

    @staticmethod
    def _confidence(candidates: Sequence[Candidate]) -> float:
        margin = (candidates[1].score - candidates[0].score) if len(candidates) > 1 else 2.0
        return RANKING_CONFIDENCE if margin >= 2.0 else 0.35 if margin >= 1.0 else 0.25

    def _site_at(self, file: str, line: int, col: int | None = None):
        in_file = self.sites.in_file(file)
        return next((s for s in in_file if s.line == line and s.col == col), None) or next(
            (s for s in in_file if s.line == line), None
        )

    def _function_copies(self) -> FunctionCopies:
        if self._copies is None:
            self._copies = FunctionCopies((f.name, _text_of(f)) for f in self._all_files())
        return self._copies

    # -- helpers spliced into their callers -----------------------------------------------------------
    def _bag(self, function: _Function, depth: int = INLINE_DEPTH, stack: tuple = ()) -> frozenset[str]:
        """The ops a function and the helpers it calls (to `depth`) name; kept for the calls from
        outside (no `stack`)."""
        if not stack and (id(function), depth) in self._bags:
            return self._bags[(id(function), depth)]
        bag = set(function.bag)
        if depth > 0:
            for name, receiver, via in function.calls:
                for callee in self._callees(name, receiver, function, (*stack, id(function)), via):
                    if isinstance(callee, Binding):
                        bag.update(call_ops(callee.target, variants=False))
                    else:
                        bag |= self._bag(callee, depth - 1, (*stack, id(function)))
        found = frozenset(bag)
        if not stack:
            self._bags[(id(function), depth)] = found
        return found

    def _expand(
        self,
        function: _Function,
        depth: int = INLINE_DEPTH,
        stack: tuple = (),
        opened: frozenset = frozenset(),
    ) -> _Expanded | None:
        """The function's program with its helpers spliced in (`_Expanded`), to `depth`; `opened`:
        calls (file, line, col, name) whose helper is spliced in past the depth and the size cap."""
        cached = depth == INLINE_DEPTH and not opened
        if cached and id(function) in self._expanded:
            return self._expanded[id(function)]
        program = function.program()
        if program is None:
            return None
        qualified = f"{function.owner}.{function.name}" if function.owner else function.name
        points = list(program.points)
        files = [function.file.name] * len(points)
        functions = [qualified] * len(points)
        eps, consume, repeats = list(program.eps), list(program.consume), list(program.repeats)
        bound = list(program.bound)
        bindings = function.file.bindings
        n = program.n_states
        inlined: set[int] = set()
        # the calls of helpers not spliced in: (point, helper, the depth left for it)
        beyond: list[tuple[int, _Function, int]] = []
        pending: list[_Splice] = []  # helpers that may be spliced in
        wrapping: set[int] = set()  # calls whose op holds the helper's (an autograd Function's apply)
        for edge, (u, v, p) in enumerate(program.consume):
            point = program.points[p]
            forced = (function.file.name, point.line, point.col, point.name) in opened
            if depth <= 0 and not forced:  # the depth is spent: a helper's call is a block of its ops
                if point.kind == CALL and (receiver := self._receiver(point, function)) is not None:
                    for callee in self._callees(
                        point.name, receiver, function, (*stack, id(function)), point.receiver
                    ):
                        if not isinstance(callee, Binding):
                            beyond.append((p, callee, 0))
                        elif callee.target == ACTIVATION:  # the activation's line answers, not the call's
                            inlined.add(p)
                continue
            receiver = self._receiver(point, function)
            passed: tuple = ()  # lambdas the call is given: it may run each, any number of times
            if point.kind == FRAME:  # a comprehension's or generator expression's own frame
                frame = self._frame(function, point)
                callees: tuple = (frame,) if frame is not None else ()
            else:
                callees = (
                    self._callees(point.name, receiver, function, (*stack, id(function)), point.receiver)
                    if receiver is not None
                    else ()
                )
                if point.kind == CALL and bindings is not None and bindings.lambda_arguments:
                    lines = bindings.lambda_arguments.get((point.line, point.col), ())
                    passed = tuple(f for at in lines if (f := self._lambda(function.file, at)) is not None)
                    callees = (*callees, *passed)
            if not callees and point.arguments:  # a callable given as a value: by its parameters
                callees = tuple(
                    f for f in self._callbacks(function.file, point.arguments) if f is not function
                )
            if not callees and point.callee == BY_NAME and self._is_record(point.name):
                points[p] = replace(point, callee=BY_TYPE)  # a dataclass built: its fields, no op
                continue
            # a dispatch through a table of functions (the attention backends) is no level of its
            # own: the backend's helpers (``repeat_kv``) are spliced in too
            deeper = depth if point.kind == CALL and self._tabled(point.name, function) else depth - 1
            for callee in callees:
                if callee is function:  # recursion: the call runs this very program again, and
                    # returns after the call (any depth; which call returns is not tracked)
                    eps.append((u, program.entry, 0.0))
                    eps.append((program.exit, v, 0.0))
                    inlined.add(p)
                    continue
                if isinstance(callee, Binding):  # a torch op under another name: the call runs it
                    points.append(
                        replace(
                            point,
                            kind=CALL,
                            callee=BY_ATTRIBUTE,
                            name=callee.target,
                            dtype=callee.dtype or point.dtype,
                            bias=callee.bias,
                            bias_default=self._bias_by_default(function.file, callee.bias_flag),
                        )
                    )
                    files.append(function.file.name)
                    functions.append(qualified)
                    consume.append((u, v, len(points) - 1))
                    if callee.target == ACTIVATION:  # (as past the depth, above) one of torch's
                        # activations, the one the config picks: the ops around fit the caller, the
                        # op's own line is the activation's
                        inlined.update((p, len(points) - 1))
                    elif callee.target in _LAYER_OPS:  # a torch.nn layer runs that op, not
                        inlined.add(p)  # another: its point answers, not the call's
                    continue
                inner = self._expand(callee, max(deeper, 0), (*stack, id(function)), opened)
                if inner is None:
                    beyond.append((p, callee, max(deeper, 0)))
                    continue
                start = u
                if point.kind == CALL and autograd_function(point.name, point.receiver) is not None:
                    # the Function's op first, then its ``forward``'s ops, inside it (or none known)
                    start, n = n, n + 1
                    consume[edge] = (u, start, p)
                    eps.append((start, v, 0.0))
                    wrapping.add(p)
                pending.append(_Splice(start, v, p, callee, inner, forced, callee in passed, max(deeper, 0)))
        # the helpers spliced in, smallest first, while the program stays under the cap: a larger
        # helper of a long function (``_sample``) is the one left a block, not those called after it
        for splice in sorted(pending, key=lambda s: len(s.expanded.program.points)):
            inner = splice.expanded
            if len(points) + len(inner.program.points) > MAX_INLINED_POINTS and not splice.forced:
                beyond.append((splice.point, splice.helper, splice.depth))
                continue
            sub, shift, state_shift = inner.program, len(points), n
            points.extend(sub.points)
            files.extend(inner.files)
            functions.extend(inner.functions)
            eps.extend((a + state_shift, b + state_shift, c) for a, b, c in sub.eps)
            consume.extend((a + state_shift, b + state_shift, q + shift) for a, b, q in sub.consume)
            repeats.extend((a + state_shift, q + shift) for a, q in sub.repeats)
            bound.extend(b + state_shift for b in sub.bound)
            eps.append((splice.u, sub.entry + state_shift, 0.0))  # the call runs the helper's body ...
            eps.append((sub.exit + state_shift, splice.v, 0.0))  # ... and returns after the call
            if splice.passed:
                eps.append((sub.exit + state_shift, sub.entry + state_shift, 0.0))
            n += sub.n_states
            if splice.point not in wrapping:  # (a Function's own op answers at its ``apply``)
                inlined.add(splice.point)
            inlined.update(q + shift for q in inner.inlined)
        # a call of a helper not spliced in (past the depth, or too big) rewards the ops the helper
        # and its callees name: judged as a block of unknown ops, a caller saw less of the window
        # than a function a call nearer the leaves and lost to it (`MixtralForCausalLM.forward`'s
        # lm_head to `MixtralModel.forward`, which reached the next step's mask)
        runs: dict[int, set[str]] = {}
        for p, callee, below in beyond:
            if p not in inlined:
                runs.setdefault(p, set()).update(self._bag(callee, max(below, 1)))
        for p, named in runs.items():
            if named:
                points[p] = replace(points[p], runs=frozenset(named))
        combined = Program(
            name=qualified,
            def_line=program.def_line,
            points=tuple(points),
            n_states=n,
            entry=program.entry,
            exit=program.exit,
            eps=tuple(eps),
            consume=tuple(consume),
            repeats=tuple(repeats),
            bound=tuple(bound),
        )
        ops = frozenset(op for point in points for op in predicted_ops(point))
        expanded = _Expanded(combined, tuple(files), tuple(functions), ops, frozenset(inlined))
        if cached:
            self._expanded[id(function)] = expanded
        return expanded

    @staticmethod
    def _receiver(point: CallPoint, caller: _Function) -> str | None:
        """How a program point names what it runs, as `_callees` reads it (None: nothing to resolve)."""
        if point.kind == PROPERTY:
            return PROPERTY_READ
        if point.kind != CALL:
            return None
        callee = point.callee
        if callee in (BY_SELF_METHOD, BY_SELF_ATTRIBUTE):
            return SELF
        if callee in (BY_NAME, BY_LOCAL):
            return NAME
        if callee == BY_SUBSCRIPT:
            return ELEMENT
        if callee == BY_ATTRIBUTE:
            bindings = caller.file.bindings
            if bindings is not None and (point.line, point.col) in bindings.super_calls:
                return SUPER
            if point.name in TORCH_API:  # a tensor's method, unless the receiver's type says otherwise
                return TYPED if point.receiver else None
            return ATTRIBUTE
        return None

    def _callees(self, name: str, receiver: str, caller: _Function, stack: tuple, via: str = "") -> tuple:
        """What a call runs, as far as the source says: functions to splice in, or a torch op's
        `Binding` (``self.proj = nn.Linear(...)``, ``partial(torch.Tensor.to, ...)``); empty when unknown.

        ``self.helper()``/``self.weight``: the method or property of the caller's class (or a base);
        ``self.mlp(x)``: the forward of the class ``__init__`` bound ``self.mlp`` to; ``super().f()``: a
        base's ``f``; ``fn(x)``: what the caller, its enclosing functions or the module bound ``fn`` to
        (a class's instance, a partial, a lambda), else the one function of that name; ``obj.f(x)``
        (`via` says how ``obj`` is written): ``f`` of the classes ``obj`` is bound to or annotated
        with (`_typed`), else the one method of that name.
        """
        found: list = []
        owner = caller.owner
        if receiver in (SELF, PROPERTY_READ, SUPER) and owner:
            method = self._method(owner, name, caller.file, skip_own=receiver == SUPER)
            if method is not None:
                found.append(method)
            elif receiver == SELF:
                for binding in self._attribute_bindings(owner, name, caller.file):
                    found.extend(self._bound(binding, caller.file))
        elif receiver == SELF and not owner:
            found.extend(self._attribute_anywhere(name))
        elif receiver == ELEMENT and name + ELEMENTS in caller.bindings:  # a local container
            for binding in caller.bindings[name + ELEMENTS]:
                found.extend(self._bound(binding, caller.file))
        elif receiver == ELEMENT and owner:
            for binding in self._attribute_bindings(owner, name, caller.file, elements=True):
                found.extend(self._bound(binding, caller.file))
        elif receiver == NAME:
            bindings = caller.bindings.get(name) or (
                caller.file.bindings.module.get(name, ()) if caller.file.bindings is not None else ()
            )
            if bindings:
                for binding in bindings:
                    found.extend(self._bound(binding, caller.file))
            elif name not in GENERIC_NAMES:
                function = self._function(name, caller.file)
                if function is not None:
                    found.append(function)
        elif receiver in (TYPED, ATTRIBUTE):
            if (function_class := autograd_function(name, via)) is not None:
                forward = self._class(function_class, caller.file)
                if forward is not None and (method := self._method(forward[1], "forward", forward[0])):
                    found.append(method)
            elif via:
                found.extend(self._typed(name, via, caller))
            if not found and receiver == ATTRIBUTE and name not in GENERIC_NAMES:
                candidates = self._by_name.get(name, [])
                if len(candidates) == 1:
                    found.append(candidates[0])
        # a function may run itself once more (recursion), no deeper
        callees = tuple(dict.fromkeys(f for f in found if isinstance(f, Binding) or stack.count(id(f)) < 2))
        return callees[
            : MAX_REGISTRY_CALLEES
            if len(callees) > MAX_CALLEES and self._tabled(name, caller)
            else MAX_CALLEES
        ]

    def _typed(self, name: str, via: str, caller: _Function) -> list[_Function]:
        """Method `name` of what the receiver `via` holds, by its bindings: a name the caller bound or
        annotated (``past_key_values: Cache | None``), ``self.<attr>`` as ``__init__`` bound it,
        either's elements (``self.layers[i]``). Where the class leaves the method to its subclasses
        (abstract), each subclass's own is an alternative."""
        indexed = via.endswith("[]")
        path = via.removesuffix("[]")
        if path.startswith("self."):
            if not caller.owner:
                return []
            bound = self._attribute_bindings(caller.owner, path[5:], caller.file, elements=indexed) or ()
        else:
            bound = caller.bindings.get(path + ELEMENTS if indexed else path, ())
        methods: list[_Function] = []
        for binding in bound:
            for found in self._classes_bound(binding, caller.file):
                methods.extend(self._implementations(found, name))
        return list(dict.fromkeys(methods))

    def _implementations(self, found: tuple[_SourceFile, str], name: str) -> list[_Function]:
        """Method `name` of class `found` (or a base's); where that one is abstract or missing, the
        methods of that name its subclasses in the same file define, nearest subclasses first."""
        key = (found[0].name, found[1], name)
        if key not in self._implemented:
            self._implemented[key] = self._find_implementations(found, name)
        return self._implemented[key]

    def _find_implementations(self, found: tuple[_SourceFile, str], name: str) -> list[_Function]:
        method = self._method(found[1], name, found[0])
        if method is not None and not method.abstract:
            return [method]
        source_file, base = found
        classes = source_file.bindings.classes if source_file.bindings is not None else {}
        out: list[_Function] = []
        queue, seen = [base], {base}
        while queue:
            parent = queue.pop(0)
            for child, sketch in classes.items():
                if parent in sketch.bases and child not in seen:
                    seen.add(child)
                    queue.append(child)
                    own = next(
                        (f for f in source_file.functions if f.owner == child and f.name == name), None
                    )
                    if own is not None and not own.abstract:
                        out.append(own)
        return out

    def _tabled(self, name: str, caller: _Function) -> bool:
        """Whether `name` is bound to a lookup in a table of functions (`_registry`)."""
        return any(b.kind == REGISTRY for b in caller.bindings.get(name, ()))

    def _bound(self, binding: Binding, near: _SourceFile) -> list:
        if binding.kind == TORCH_OP:
            return [binding]
        if binding.kind == LAMBDA:
            function = self._lambda(near, binding.line)
            return [function] if function is not None else []
        if binding.kind in (CALLED, BUILT):  # an instance: calling it runs its class's forward
            out: list = []
            for found in self._classes_bound(binding, near):
                for method in ("forward", "__call__"):
                    function = self._method(found[1], method, found[0])
                    if function is not None:
                        out.extend(self._dispatched(found, function) or [function])
                        break
            if not out and binding.kind == CALLED:  # what a function returned: a closure it made
                factory = self._function(binding.target, near)
                if factory is not None and factory.returns:
                    out = [f for f in factory.file.functions if f.line in factory.returns]
            return out
        if binding.kind in (PARTIAL, ALIAS):
            function = self._function(binding.target, near)
            return [function] if function is not None else []
        if binding.kind == REGISTRY:
            return self._registry(binding.target, near)
        return []

    def _classes_bound(self, binding: Binding, near: _SourceFile) -> list[tuple[_SourceFile, str]]:
        """The classes whose instance `binding` (of a name in `near`) is: its class (`CALLED`), or
        each class of the table it was built from (`BUILT`: ``T[config.x](config)``, the config
        picking one), each an alternative; none for any other binding."""
        if binding.kind == CALLED:
            found = self._class(binding.target, near)
            return [found] if found is not None else []
        if binding.kind != BUILT:
            return []
        home, names = self._table(binding.target, near)
        return [found for value in names if (found := self._class(value, home)) is not None]

    def _dispatched(self, found: tuple[_SourceFile, str], forward: _Function) -> list[_Function]:
        """A module whose ``forward_native`` another class than its ``forward``'s defines (SGLang's
        and vLLM's custom ops: a base's ``forward`` picks one of the class's ``forward_<platform>``
        methods at run time): those methods not defined beside ``forward``, each an alternative."""
        base = (forward.file.name, forward.owner)
        methods = [
            method
            for name in DISPATCHED_FORWARDS
            if (method := self._method(found[1], name, found[0])) is not None
            and (method.file.name, method.owner) != base
        ]
        return methods if methods and methods[0].name == DISPATCHED_FORWARDS[0] else []

    def _registry(self, name: str, near: _SourceFile) -> list[_Function]:
        """The functions a module-level table `name` holds (`REGISTRY`): ``NAME = {"sdpa": f, ...}``,
        or ``NAME = Cls()`` where ``Cls`` keeps such a dict as a class attribute (transformers'
        ``ALL_ATTENTION_FUNCTIONS``, an ``AttentionInterface``), in `near` or the file it imports
        `name` from. Which one a call runs depends on the config: each is an alternative."""
        key = (near.name, name)
        if key not in self._registries:
            home, names = self._table(name, near)
            functions = [self._function(value, home) for value in names]
            self._registries[key] = list(dict.fromkeys(f for f in functions if f is not None))
        return self._registries[key]

    def _table(self, name: str, near: _SourceFile) -> tuple[_SourceFile, list[str]]:
        """The file defining the module-level table `name` (`near`, or the file it imports `name` from)
        and the names its values are there (`table_values`); none where it is not found."""
        home, original = near, name
        imported = near.bindings.imports.get(name) if near.bindings is not None else None
        if imported is not None:
            found = self._module_file(near.name, imported.level, imported.module)
            if found is not None:
                self._parse_file(found)
                home, original = found, imported.name
        return home, table_values(home.programs.tree, original) if home.programs is not None else []

    def _callbacks(self, source_file: _SourceFile, arguments: tuple[str, ...]) -> list[_Function]:
        """What a call of a name the source binds to nothing (a parameter, a loop's item: a callable
        given as a value) may run, by the names it passes (`CallPoint.arguments`): the functions and
        ``__call__`` / ``forward`` methods of its own file whose positional parameters are those
        names, in order (``criteria(input_ids, scores, **kwargs)``: each stopping criterion's
        ``__call__(self, input_ids, scores, **kwargs)``); none past `MAX_CALLBACKS`."""
        found = source_file.callbacks.get(arguments)
        if found is None:
            n = len(arguments)
            found = [
                f
                for f in source_file.functions
                if f.required <= n <= len(f.parameters)
                and f.parameters[:n] == arguments
                and (f.owner is None or f.name in MODULE_CALLS)
                and not f.abstract
                and (expanded := self._expand(f, 0)) is not None
                and len(expanded.program.points) <= MAX_CALLBACK_POINTS
            ]
            found = source_file.callbacks[arguments] = found if len(found) <= MAX_CALLBACKS else []
        return found

    def _frame(self, caller: _Function, point: CallPoint) -> _Function | None:
        """The program of the comprehension or generator expression at `point` of `caller`, as a
        function of its own (its ops run where the caller pulls its items)."""
        key = (point.line, point.name)
        frames = caller.file.frames
        if key not in frames:
            function = _Function(caller.file, point.line, point.name, caller.owner, frozenset(), ())
            function.bindings = caller.bindings
            program = function.program()
            if program is not None:
                function.bag = frozenset(op for point in program.points for op in predicted_ops(point))
            frames[key] = function if program is not None else None
        return frames[key]

    def _lambda(self, source_file: _SourceFile, line: int) -> _Function | None:
        if line not in source_file.lambdas:
            function = _Function(source_file, line, "<lambda>", None, frozenset(), ())
            program = function.program()
            if program is not None:
                function.bag = frozenset(op for point in program.points for op in predicted_ops(point))
            source_file.lambdas[line] = function if program is not None else None
        return source_file.lambdas[line]

    def _class(self, name: str, near: _SourceFile) -> tuple[_SourceFile, str] | None:
        """The file defining class `name`: the caller's own, else the one parsed or unparsed file
        that defines it."""
        if near.bindings is not None and name in near.bindings.classes:
            return near, name
        imported = self._imported(name, near, "class")
        if imported is not None:
            return imported
        # (the index reads text: a docstring's line ``class Base and ...`` defines no class)
        holders = [
            f for f in self._defining(name, "class") if f.bindings is not None and name in f.bindings.classes
        ]
        if len(holders) > 1:  # several: the one beside the caller
            holders = [f for f in holders if f.path.parent == near.path.parent]
        return (holders[0], name) if len(holders) == 1 else None

    def _method(
        self, owner: str, name: str, source_file: _SourceFile, skip_own: bool = False, depth: int = 0
    ):
        """Method `name` of class `owner` (of `source_file`) or of its bases, by name."""
        if not skip_own:
            for function in source_file.functions:
                if function.owner == owner and function.name == name:
                    return function
        sketch = source_file.bindings.classes.get(owner) if source_file.bindings is not None else None
        if sketch is None or depth > 4:
            return None
        for base in sketch.bases:
            found = self._class(base, source_file)
            if found is not None and found != (source_file, owner):
                method = self._method(found[1], name, found[0], depth=depth + 1)
                if method is not None:
                    return method
        return None

    def _attribute_anywhere(self, name: str) -> tuple[Binding, ...]:
        """``self.<name>`` in a function of no class (transformers' experts and attention functions,
        attached to classes elsewhere): the torch op the source's classes bind that attribute to,
        where nearly all of them agree (``self.act_fn = ACT2FN[config.hidden_act]``); else nothing."""
        found = self._anywhere.get(name)
        if found is None:
            found = self._anywhere[name] = self._agreed_binding(name)
        return found

    def _agreed_binding(self, name: str) -> tuple[Binding, ...]:
        if self._assigned is None:
            self._assigned = {}
            for source_file in self._all_files():
                if "self." not in source_file.text:
                    continue
                for attribute, value in _SELF_ASSIGNED.findall(source_file.text):
                    self._assigned.setdefault(attribute, []).append(value)
        votes: Counter = Counter()
        for value in self._assigned.get(name, ()):
            try:
                expression = ast.parse(value.strip(), mode="eval").body
            except SyntaxError:
                continue  # a value over several lines: not counted
            bound = tuple(b for b in bindings_of(expression) if b.kind == TORCH_OP)
            if bound and all(b.target == ACTIVATION or f"aten::{b.target}" in ACTIVATION_OPS for b in bound):
                bound = (Binding(TORCH_OP, ACTIVATION),)  # ``nn.GELU()`` here, ``ACT2FN[...]`` there
            votes[bound] += 1
        if not votes:
            return ()
        bound, count = votes.most_common(1)[0]
        agreed = count >= ATTRIBUTE_QUORUM * sum(votes.values()) and count >= ATTRIBUTE_MIN_ASSIGNMENTS
        return bound if agreed else ()

    def _class_scalars(self, name: str, near: _SourceFile) -> frozenset[str]:
        """The attributes class `name` (as `near` names it) only ever sets to numbers."""
        found = self._class(name, near)
        if found is None or found[0].programs is None:
            return frozenset()
        return found[0].programs.scalar_attributes(found[1])

    def _attribute_bindings(self, owner: str, name: str, source_file: _SourceFile, elements: bool = False):
        found = self._class(owner, source_file)
        seen = 0
        while found is not None and seen < 5:
            bindings = found[0].bindings
            sketch = bindings.classes.get(found[1]) if bindings is not None else None
            if sketch is None:  # (`_class` returns files that define the class)
                return ()
            bound = (sketch.elements if elements else sketch.attributes).get(name)
            if bound:
                return bound
            found = next(
                (c for base in sketch.bases if (c := self._class(base, found[0])) is not None and c != found),
                None,
            )
            seen += 1
        return ()

    def _function(self, name: str, near: _SourceFile) -> _Function | None:
        """The module-level function `name`: the caller's file's, else the only one parsed (not looked
        up in unparsed files: common helper names would parse much of a big package)."""
        own = [f for f in near.functions if f.name == name and f.owner is None]
        if len(own) == 1:
            return own[0]
        imported = self._imported(name, near, "def")
        if imported is not None:
            file, original = imported
            defined = [f for f in file.functions if f.name == original and f.owner is None]
            if len(defined) == 1:
                return defined[0]
        found = [f for f in self._by_name.get(name, []) if f.owner is None]
        return found[0] if len(found) == 1 else None

    def _imported(
        self, name: str, near: _SourceFile, keyword: str, hops: int = 3
    ) -> tuple[_SourceFile, str] | None:
        """(the file, the name there) of the class or function (`keyword`) that `near` imports as
        `name` (``from ...pytorch_utils import Conv1D``), following re-exports (a package's
        ``__init__``); None when the import is not of a file under the source roots."""
        imported = near.bindings.imports.get(name) if near.bindings is not None else None
        if imported is None or hops == 0:
            return None
        file = self._module_file(near.name, imported.level, imported.module)
        if file is None:
            return None
        self._parse_file(file)
        if file.bindings is None or file.programs is None:
            return None
        original = imported.name
        if keyword == "class" and original in file.bindings.classes:
            return file, original
        if keyword == "def" and any(f.name == original and f.owner is None for f in file.functions):
            return file, original
        return self._imported(original, file, keyword, hops - 1)

    def _module_file(self, importer: str, level: int, module: str) -> _SourceFile | None:
        """The file of the module that ``from <level dots><module> import ...`` in file `importer`
        (named as origins name files: ``transformers/models/gpt2/modeling_gpt2.py``) imports."""
        by_name = self._files_by_name()
        if level:
            package = importer.split("/")[:-1]  # a module's package; an __init__'s own package
            if level - 1 > len(package):
                return None
            parts = package[: len(package) - (level - 1)] + (module.split(".") if module else [])
        else:
            parts = module.split(".")
        stem = "/".join(parts)
        return by_name.get(stem + ".py") or by_name.get(stem + "/__init__.py")

    def _files_by_name(self) -> dict[str, _SourceFile]:
        if self._by_file_name is None:
            self._by_file_name = {f.name: f for f in self._all_files()}
        return self._by_file_name

    def _is_record(self, name: str) -> bool:
        """Whether every class of this name under the source roots is a ``@dataclass`` (a model's
        output, ``BaseModelOutputWithPast(...)``): building one runs no op, where a call of an unknown
        class may run any (a ``__post_init__`` that runs ops is not modelled)."""
        if self._records is None:
            records: Counter = Counter()
            for source_file in self._all_files():
                if "dataclass" in source_file.text:
                    records.update(m.group(1) for m in _DATACLASS.finditer(source_file.text))
            definitions = self._definitions_index()
            self._records = frozenset(
                name for name, count in records.items() if len(definitions.get(("class", name), ())) == count
            )
        return name in self._records

    def _definitions_index(self) -> dict[tuple[str, str], list[int]]:
        """("class"/"def", name) -> the files (indexes into `_all_files`) that define it."""
        if self._definitions is None:
            self._definitions = {}
            for i, source_file in enumerate(self._all_files()):
                for header in HEADER.finditer(source_file.text):
                    kind = "class" if header.group(2) == "class" else "def"  # ``async def`` too
                    self._definitions.setdefault((kind, header.group(3)), []).append(i)
        return self._definitions

    def _defining(self, name: str, keyword: str) -> list[_SourceFile]:
        """The files that define `name` (``class name``/``def name``), parsed now if few."""
        indexes = self._definitions_index().get((keyword, name), [])
        if not indexes or len(indexes) > MAX_DEFINING_FILES:
            return []
        files = self._all_files()
        for i in indexes:
            self._parse_file(files[i])
        return [files[i] for i in indexes if files[i].programs is not None]

    # -- files --------------------------------------------------------------------------------------
    def _files_for(
        self, window: Sequence[str], hot: int, challengers: Sequence[_SourceFile] = ()
    ) -> list[_SourceFile]:
        """The files whose functions spell the window's ops, rare ones counting most (and the hot one
        most), then those that spell the ops next to the hot op best, then those the trace fits
        (`_supported`, `challengers`), parsed."""
        files = self._all_files()
        hot_op = token_of(window[hot], Cat.CPU_OP).name
        hot_group = frozenset(spellings(hot_op))
        scores = self._spelling_scores(window, hot_group)
        picked = self._best_spelling(scores, MAX_FILES)
        # a window holds the ops of the functions around the hot op's too, which a function of
        # another file (a decoder layer) reaches all of: the ops next to the hot op pick files too
        # (OLMo's norm, ``to``, ``layer_norm``, ``to``, was 27th to 124th by the whole window)
        near = window[max(0, hot - NEAR_OPS) : hot + NEAR_OPS + 1]
        picked.extend(self._best_spelling(self._spelling_scores(near, hot_group), NEAR_FILES, picked))
        # the files whose functions run the ops next to the hot one in their order (Qwen3's attention
        # runs its norm's ops right after a linear; every decoder file spells them)
        picked.extend(self._standing_out(self._order_scores(window, hot), ORDER_FILES, picked))
        # a class or helper that runs the hot op (``Conv1D.forward``'s ``torch.addmm``) explains too
        # little of the window alone: the files that call it by name are aligned as well
        runners = self._runners(picked, hot_op)
        if runners:
            callers = [i for i in self._spelled_by(runners) if files[i] not in picked]
            callers.sort(key=lambda i: (-scores.get(i, (0.0,))[0], files[i].name))
            picked.extend(files[i] for i in callers[:CALLER_FILES])
        # the files the trace's windows fit, where they spell the hot op (or nothing spells it: views)
        for source_file in (*self._supported, *challengers):
            if source_file not in picked and (source_file.spelled & hot_group or not hot_group):
                picked.append(source_file)
        # a package's own tests (`is_test_code`) are not aligned: their reference implementations run
        # in one function what the library runs across several (`_tests_last`)
        library = [f for f in picked if not is_test_code(f.name)]
        for source_file in library:
            self._parse_file(source_file)
        return [f for f in library if f.programs is not None]

    def _order_scores(self, window: Sequence[str], hot: int) -> dict[int, tuple[float, int, int]]:
        """Per file, how well its best function runs the ops around the hot one (`ORDER_OPS` named
        ops on each side) in their order (`FunctionSpellings.best_in_order`)."""
        groups = [frozenset(spellings(token_of(name, Cat.CPU_OP).name)) for name in window]
        before = [g for g in groups[:hot] if g][-ORDER_OPS:]
        after = [g for g in groups[hot:] if g][: ORDER_OPS + (1 if groups[hot] else 0)]
        assert self._functions is not None  # built with the files
        return self._functions.best_in_order([*before, *after])

    def _spelling_scores(
        self, window: Sequence[str], hot_group: frozenset[str]
    ) -> dict[int, tuple[float, int, int]]:
        """Per file (its index in `_all_files`), how well its best function spells the window's ops
        (`FunctionSpellings.best_functions`)."""
        groups = {frozenset(spellings(token_of(name, Cat.CPU_OP).name)) for name in window}
        groups.discard(frozenset())
        # a window's ops are run by one function and its helpers: files score as their best function
        assert self._functions is not None  # built with the files
        return self._functions.best_functions(sorted(groups, key=sorted), hot_group)

    def _best_spelling(
        self, scores: dict[int, tuple[float, int, int]], count: int, picked: Sequence[_SourceFile] = ()
    ) -> list[_SourceFile]:
        """The `count` files (not in `picked`) that spell best by `scores` (`_distinct_ranking`)."""
        out: list[_SourceFile] = []
        for source_file, _ in self._distinct_ranking(scores):
            if len(out) >= count:
                break
            if source_file not in picked:
                out.append(source_file)
        return out

    def _standing_out(
        self, scores: dict[int, tuple[float, int, int]], count: int, picked: Sequence[_SourceFile]
    ) -> list[_SourceFile]:
        """The files (not in `picked`) that score better by `scores` than all but `count` files
        (`_distinct_ranking`): none where more than `count` tie at the top, the scores then saying
        nothing specific (a cast and a store, which a thousand files run in that order)."""
        ranking = list(itertools.islice(self._distinct_ranking(scores), count + 1))
        bar = ranking[count][1] if len(ranking) > count else 0.0
        return [f for f, score in ranking[:count] if score > bar + 1e-9 and f not in picked]

    def _distinct_ranking(
        self, scores: dict[int, tuple[float, int, int]]
    ) -> Iterator[tuple[_SourceFile, float]]:
        """The files that score above 0 by `scores`, best first, and their scores, skipping those whose
        best function is a copy of one ranked before (same text, reaching the same helpers): it adds
        nothing to align (`agree` answers in each copy), so the places go to different code (Llama's
        rotary embedding, not the fifth copy of a variant of it that casts once more)."""
        files = self._all_files()
        ranked = sorted(scores.items(), key=lambda item: (-item[1][0], files[item[0]].name))
        taken: set[tuple] = set()
        for index, (score, line, reach) in ranked:
            if score <= 0:
                return
            key = self._copy_key(files[index].name, line)
            if key is not None:
                if (*key, reach) in taken:
                    continue
                taken.add((*key, reach))
            yield files[index], score

    def _runners(self, picked: list[_SourceFile], hot_op: str) -> frozenset[str]:
        """The specific names (classes, module-level functions) by which other files call the
        functions of `picked` whose own lines run `hot_op`."""
        names = set()
        for source_file in picked:
            self._parse_file(source_file)
            for function in source_file.functions:
                if hot_op not in function.bag:
                    continue
                if function.owner is None:
                    names.add(function.name)  # a module-level helper, called by its name
                elif function.name in ("forward", "__call__"):
                    names.add(function.owner)  # a module: built by its class's name, then called
        return frozenset(n for n in names if n and n not in GENERIC_NAMES and not n.startswith("_"))

    def _parse_file(self, source_file: _SourceFile) -> None:
        if source_file.programs is None and source_file.bindings is None:
            source_file.programs = _parse(
                source_file.text, lambda name: self._class_scalars(name, source_file)
            )
            if source_file.programs is not None:
                source_file.bindings = module_bindings(source_file.programs.tree)
                source_file.functions = _sketches(source_file)
                for function in source_file.functions:
                    self._by_name.setdefault(function.name, []).append(function)
            else:
                source_file.bindings = ModuleBindings()  # unparsable: not tried again

    def _spelled_by(self, group: frozenset[str]) -> frozenset[int]:
        """The files (indexes into `_all_files`) that spell any of `group` (an op's spellings)."""
        found = self._holders.get(group)
        if found is None:
            if self._index is None:
                self._index = {}
                for i, source_file in enumerate(self._all_files()):
                    for name in source_file.spelled:
                        self._index.setdefault(name, []).append(i)
            found = self._holders[group] = frozenset(i for name in group for i in self._index.get(name, ()))
        return found

    def _all_files(self) -> list[_SourceFile]:
        """Every Python file under the source roots, named as the static scan names its sites."""
        if self._files is None:
            from tracer.static.files import discover

            read = [
                (found, text)
                for found in (discover(self.source.roots) if self.source.roots else ())
                if (text := read_source_text(found.absolute)) is not None
            ]
            # what each function spells (file picking), and so what each file spells
            self._functions = FunctionSpellings(text for _, text in read)
            self._files = [
                _SourceFile(found.absolute, found.relative, text, spelled)
                for (found, text), spelled in zip(read, self._functions.file_spellings)
            ]
        return self._files


def _sketches(source_file: _SourceFile) -> list[_Function]:
    """Every function of a parsed file, with the ops it names and the helpers it calls (one walk
    each, no program built)."""
    import ast

    from tracer.join.program import (
        BINARY_OPS,
        COMPARE_OPS,
        UNARY_OPS,
        is_size_value,
        own_nodes,
        positional_parameters,
        runs_on_numbers,
    )

    sketches: list[_Function] = []
    programs = source_file.programs
    if programs is None:
        return sketches
    for line, name, node in programs.functions():
        bag: set[str] = set()
        calls = []
        nodes = list(own_nodes(node))
        # a lambda written in the function runs from it (a table of them, a sort key): its ops count
        nodes += [inner for child in nodes if isinstance(child, ast.Lambda) for inner in ast.walk(child.body)]
        called = {id(child.func) for child in nodes if isinstance(child, ast.Call)}
        for child in nodes:
            if isinstance(child, ast.Call):
                func = child.func
                callee = last_name(func)
                if callee is not None:
                    bag.update(call_ops(callee, variants=False))
                    receiver = _sketch_receiver(func)
                    via = (
                        receiver_path(func.value)
                        if receiver == ATTRIBUTE and isinstance(func, ast.Attribute)
                        else ""
                    )
                    calls.append((callee, receiver, via))
                elif isinstance(func, ast.Subscript):
                    value = func.value
                    if isinstance(value, (ast.Attribute, ast.Name)):
                        name_of = value.attr if isinstance(value, ast.Attribute) else value.id
                        calls.append((name_of, ELEMENT, ""))
            elif (
                isinstance(child, ast.Attribute)
                and isinstance(child.ctx, ast.Load)
                and id(child) not in called
                and isinstance(child.value, ast.Name)
                and child.value.id == "self"
            ):
                calls.append((child.attr, PROPERTY_READ, ""))
            elif isinstance(child, (ast.BinOp, ast.AugAssign)):
                op = BINARY_OPS.get(type(child.op))
                if op and not runs_on_numbers(child):
                    bag.update(operator_ops(op))
            elif isinstance(child, ast.UnaryOp) and type(child.op) in UNARY_OPS:
                bag.add(UNARY_OPS[type(child.op)])
            elif isinstance(child, ast.Compare):
                bag.update(COMPARE_OPS[type(op)] for op in child.ops if type(op) in COMPARE_OPS)
            if isinstance(child, ast.Subscript) and not is_size_value(child.value):  # ``x.shape[-1]``: none
                bag.update(GETITEM_OPS if isinstance(child.ctx, ast.Load) else SETITEM_OPS)
        owner = programs.owner_of_node(node)
        bindings = source_file.bindings
        scope = (
            {}
            if bindings is None
            else bindings.module
            if isinstance(node, ast.Module)
            else bindings.functions.get(id(node), {})
        )
        parameters: tuple[str, ...] = ()
        required = 0
        returns: tuple[int, ...] = ()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parameters, required = positional_parameters(node, method=owner is not None)
            returns = _returned_closures(node, nodes)
        sketches.append(
            _Function(
                source_file,
                line,
                name,
                owner,
                frozenset(bag),
                tuple(dict.fromkeys(calls)),
                scope,
                abstract=_is_abstract(node),
                parameters=parameters,
                required=required,
                returns=returns,
            )
        )
    return sketches


def _returned_closures(node, nodes: list) -> tuple[int, ...]:
    """The def lines of the functions nested in function `node` (`nodes`: its own nodes) that it
    returns by name (``def and_mask(...): ...`` then ``return and_mask``)."""
    import ast

    nested = {c.name: c.lineno for c in nodes if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if not nested:
        return ()
    returned = {
        nested[c.value.id]
        for c in nodes
        if isinstance(c, ast.Return) and isinstance(c.value, ast.Name) and c.value.id in nested
    }
    return tuple(sorted(returned))


def _is_abstract(node) -> bool:
    """A method its subclasses are to define: ``@abstractmethod``, or a body of nothing but a
    docstring, ``...``, ``pass`` or ``raise NotImplementedError``."""
    import ast

    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    if any(last_name(d) == "abstractmethod" for d in node.decorator_list):
        return True
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring (or ``...``)
    for statement in body:
        if isinstance(statement, ast.Pass):
            continue
        raised = statement.exc if isinstance(statement, ast.Raise) else None
        if isinstance(raised, ast.Call):
            raised = raised.func
        if raised is not None and last_name(raised) == "NotImplementedError":
            continue
        return False
    return True


def _sketch_receiver(func) -> str:
    import ast

    if isinstance(func, ast.Name):
        return NAME
    value = func.value
    if isinstance(value, ast.Name) and value.id in ("self", "cls"):
        return SELF
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
        return SUPER
    return ATTRIBUTE


def _parse(text: str, class_scalars: Callable[[str], frozenset[str]]) -> ModulePrograms | None:
    import ast

    try:
        return ModulePrograms(ast.parse(text), STACKLESS.skip, class_scalars)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _text_of(source_file: _SourceFile) -> Callable[[], str]:
    return lambda: source_file.text


class _SameLines:
    """A line's places in every copy of its function (or the line alone when no function holds it), remembered."""

    def __init__(self, copies: FunctionCopies) -> None:
        self._copies = copies
        self._known: dict[tuple[str, int], list[tuple[str, int, str]]] = {}

    def of(self, file: str, line: int) -> list[tuple[str, int, str]]:
        """(file, line, qualified name of the copy; "" for the line itself when no function holds it)."""
        found = self._known.get((file, line))
        if found is None:
            found = self._known[(file, line)] = self._copies.same_line(file, line) or [(file, line, "")]
        return found

    def answering(self, file: str, line: int) -> list[tuple[str, int, str]]:
        """`of` without the copies in the line's own file: the same text in another class of the file
        does not stand in for it, as that class binds what it calls (``self.act``) its own way; where a
        window fits that class, it is aligned and answers for itself (`StacklessRanker._distinct`)."""
        return [place for place in self.of(file, line) if place[0] != file or place[1] == line]


def _fits(rankings: Iterable[Ranking], same: _SameLines) -> list[tuple[float, set[str]]]:
    """Per window (ranking): its best score, and the files of its candidates within `SUPPORT_MARGIN`
    of the best (`Ranking.near`) and of their copies (`FunctionCopies`: a window that fits a function
    fits each copy of it as well)."""
    return [
        (ranking.candidates[0].score, {file for near in ranking.near for file, *_ in same.of(*near)})
        for ranking in rankings
    ]


def _windows_fitting(fits: Iterable[tuple[float, set[str]]]) -> dict[str, float]:
    """Per file, the windows that fit it (`_fits`), each weighing what its best fit explains past
    `MIN_FIT`. A window that spans two functions (a generate loop's step into the model) is fit
    barely, and best by whatever file has most code: counted alike, such windows made a file holding
    Llama's code and more outweigh Llama's own. (Weighting a window by how few files fit it, as idf
    would, did worse on the corpus: a window that one wrong function fits best outweighs the rest.)"""
    support: dict[str, float] = {}
    for best, files in fits:
        weight = -best - MIN_FIT  # a window its best fits barely says little
        for file in files:
            support[file] = support.get(file, 0.0) + weight
    return support


class _FitGaps:
    """How closely the files fit the windows they fit: per window, how far from its best the file's
    closest candidate there (or a copy of one) fits, within `SUPPORT_MARGIN`. Two files compare over
    the windows both fit; one that fits those further, summed, by more than `FIT_TIE` fits less than
    the other. (Whether a file fits a window at all is `_windows_fitting`'s; a file of more code that
    alone fits a few windows by chance, a MoE file beside Llama's, gains nothing here.)"""

    def __init__(self, rankings: Iterable[Ranking], same: _SameLines) -> None:
        import numpy as np

        self._index: dict[str, int] = {}
        cells: list[tuple[int, int, float]] = []
        windows = 0
        for window, ranking in enumerate(rankings):
            windows = window + 1
            best = ranking.candidates[0].score
            gap_of: dict[str, float] = {}
            for candidate in ranking.candidates:
                gap = candidate.score - best
                if gap > SUPPORT_MARGIN:
                    continue
                for file, *_ in same.of(candidate.file, candidate.line):
                    if gap < gap_of.get(file, math.inf):
                        gap_of[file] = gap
            cells.extend(
                (self._index.setdefault(file, len(self._index)), window, gap) for file, gap in gap_of.items()
            )
        self._gaps = np.zeros((len(self._index), windows))
        self._fits = np.zeros((len(self._index), windows))
        for row, window, gap in cells:
            self._gaps[row, window] = gap
            self._fits[row, window] = 1.0

    def less_fit_than(self, among: Iterable[Candidate]) -> Callable[[Candidate], bool]:
        """Whether a candidate's file fits less than some other file of `among`."""
        files = sorted({c.file for c in among if c.file in self._index})
        if len(files) < 2:
            return _never
        rows = [self._index[file] for file in files]
        gaps, fits = self._gaps[rows], self._fits[rows]
        further = gaps @ fits.T - fits @ gaps.T  # [i, j]: over the windows both fit, i's gaps less j's
        less = {file for file, row in zip(files, further, strict=True) if (row > FIT_TIE).any()}
        return lambda candidate: candidate.file in less


def _covering(fitting: Iterable[set[str]]) -> list[str]:
    """The files that together fit the trace's windows (`fitting`: each window's files), picked
    greedily (each the file that fits the most windows no file picked before it fits, and up to
    `COVER_TIED` files tied with it, those that fit more of all the windows first), while one fits
    at least `COVER_MIN_WINDOWS` more: a file that alone fits some windows (a MoE model's router)
    ran, though files of more common code fit more windows in all."""
    remaining = list(fitting)
    total = Counter(file for files in remaining for file in files)
    picked: list[str] = []
    for _ in range(COVER_ROUNDS):
        counts = Counter(file for files in remaining for file in files)
        most = max(counts.values(), default=0)
        if most < COVER_MIN_WINDOWS:
            break
        tied = [file for file, count in counts.items() if count == most]  # copies fit alike
        tied.sort(key=lambda file: (-total[file], file))  # the file more windows fit in all first
        picked.extend(tied[:COVER_TIED])
        remaining = [files for files in remaining if files.isdisjoint(tied)]
    return picked


def _tied(candidates: Sequence[Candidate], same: _SameLines) -> list[Candidate]:
    """The first candidate and those of the same line of its copies whose score is within
    `TIE_MARGIN` of it (their files fit about as many of the trace's windows); empty if none is."""
    best = candidates[0]
    copies = {(file, line) for file, line, _ in same.answering(best.file, best.line)}
    tied = [c for c in candidates if c.score <= best.score + TIE_MARGIN and (c.file, c.line) in copies]
    return tied if len(tied) > 1 else []


def break_tie(
    candidates: tuple[Candidate, ...],
    same: _SameLines,
    importers: Counter,
    used: dict[str, float] | None = None,
    gaps: _FitGaps | None = None,
) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
    """Copies that tie (`_tied`): which of them ran, the trace cannot tell. First the copies in files
    the trace used about as much as the most used one (`used`: the share of a file's functions its
    windows fit, at least `USED_RATIO` of the most): a dense model's trace fits the copies of its
    code in a MoE model's file as well, but leaves that file's experts and router unused. Among
    those, the order of how many files of the code base import theirs (`importer_counts`: the copy
    the rest of the code uses). The ranking says so (the evidence it adds)."""
    tied = _tied(candidates, same)
    if not tied:
        return candidates, ()
    used = used or {}
    less_used = _less_used_than(tied, used)
    less_fit = gaps.less_fit_than(tied) if gaps is not None else _never
    ordered = sorted(
        tied, key=lambda c: (less_used(c), less_fit(c), -importers[c.file], c.score, c.file, c.line)
    )
    rest = [c for c in candidates if c not in tied]
    named = list(dict.fromkeys(c.file for c in ordered))
    files = ", ".join(named[:TIE_FILES_NAMED]) + (
        f" and {len(named) - TIE_FILES_NAMED} more" if len(named) > TIE_FILES_NAMED else ""
    )
    holders = len({file for file, *_ in same.of(tied[0].file, tied[0].line)})
    first = f"the copy most files import ({importers[ordered[0].file]})"
    if any(less_fit(c) for c in tied):
        first = f"of the files whose code fits the trace's windows closest, {first}"
    if any(less_used(c) for c in tied):
        first = (
            f"of the files the trace used most ({used.get(ordered[0].file, 0.0):.0%} of the functions "
            f"of the first), {first}"
        )
    said = (
        f"a tie: the same line of `{ordered[0].function}` and its copies fits about alike in {files} "
        f"({holders} files hold the function); which of them ran, the trace cannot tell; first, {first}"
    )
    return (*ordered, *rest), (said,)


def _never(candidate: Candidate) -> bool:
    return False


def _less_used_than(among: Iterable[Candidate], used: dict[str, float]) -> Callable[[Candidate], bool]:
    """Whether a candidate's file the trace used less than `USED_RATIO` of the most used file of
    `among` (`used`: the share of a file's functions its windows fit), where that one's is at least
    `USED_MIN`."""
    most = max(used.get(c.file, 0.0) for c in among)
    return lambda candidate: most >= USED_MIN and used.get(candidate.file, 0.0) < USED_RATIO * most


def _said_alike(candidates: Sequence[Candidate], same: _SameLines) -> tuple[str, ...]:
    """Different code (no copy of the first) that fits within `NEAR_TIE` of the first: the ranking says
    it is a tie, not a pick (GPT-2's windows fit the three tanh GELUs of transformers' activations
    alike, but for a ``math.sqrt`` call that runs no op; which one the config chose, the trace cannot
    tell: `_default_first` puts first the one its default names)."""
    first = candidates[0]
    copies = {(file, line) for file, line, _ in same.of(first.file, first.line)}
    alike = [
        c for c in candidates[1:] if c.score - first.score <= NEAR_TIE and (c.file, c.line) not in copies
    ]
    if not alike:
        return ()
    named = ", ".join(f"`{c.function}` ({c.file}:{c.line})" for c in (first, *alike[:2]))
    more = f" and {len(alike) - 2} more" if len(alike) > 2 else ""
    return (
        (
            f"a tie: {named}{more} fit the ops around it alike (within {NEAR_TIE}); "
            "which of them ran, the trace cannot tell"
        ),
    )


def _used_first(
    candidates: tuple[Candidate, ...], used: dict[str, float], same: _SameLines
) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
    """Different code of different files that fits about alike (within `ALIKE_MARGIN` of the best):
    if the first is in a file the trace used much less (`USED_RATIO`) than the most used of them, the
    candidates in such files go after. A hybrid model's file (LFM2: convolutions beside attention)
    holds an MLP and an attention that fit a dense model's windows as well as its own file's do, but
    the trace leaves its convolutions unused. Copies of the first are no different code: which copy
    ran is `break_tie`'s (a modular file's copy of a model's code, small and all of it used, is not
    put before the model's file by this)."""
    first = candidates[0]
    near = [c for c in candidates if c.score <= first.score + ALIKE_MARGIN]
    copies = {(file, line) for file, line, _ in same.answering(first.file, first.line)}
    different = [c for c in near[1:] if (c.file, c.line) not in copies and c.file != first.file]
    if not different:
        return candidates, ()
    less_used = _less_used_than((first, *different), used)
    if not less_used(first):
        return candidates, ()
    ordered = sorted(near, key=less_used)  # stable: by score within each
    said = (
        f"`{first.function}` in {first.file} and `{ordered[0].function}` in {ordered[0].file} fit "
        f"about alike; first the file the trace used more ({used.get(ordered[0].file, 0.0):.0%} of its "
        f"functions, against {used.get(first.file, 0.0):.0%})"
    )
    return (*ordered, *candidates[len(near) :]), (said,)


@dataclass(frozen=True)
class _DefaultActivation:
    """The activations a model file picks by config values, when its config keeps the defaults."""

    file: str  # the model file (``transformers/models/gpt2/modeling_gpt2.py``)
    keys: tuple[str, ...]  # the activation table's keys its config's defaults name (``gelu_new``)
    classes: frozenset[str]  # the classes the tables map those keys to (``NewGELUActivation``)
    homes: frozenset[str]  # the files defining the tables


def _default_first(
    candidates: tuple[Candidate, ...], chosen: _DefaultActivation | None
) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
    """Activations of the tables that fit alike (within `NEAR_TIE` of the first, itself one): first
    those the model file the trace ran picks when its config keeps the defaults
    (`StacklessRanker._default_activation`). GPT-2's three tanh GELUs fit its windows alike;
    ``GPT2Config`` defaults ``activation_function`` to ``gelu_new``, ``NewGELUActivation``."""
    if chosen is None or candidates[0].file not in chosen.homes:
        return candidates, ()

    def picked(candidate: Candidate) -> bool:
        owner = (candidate.function or "").split(".", 1)[0]
        return candidate.file in chosen.homes and owner in chosen.classes

    first = candidates[0]
    if picked(first):
        return candidates, ()
    near = [c for c in candidates if c.score <= first.score + NEAR_TIE and picked(c)]
    if not near:
        return candidates, ()
    keys = ", ".join(f'"{key}"' for key in chosen.keys)
    said = (
        f"first `{near[0].function}`: {chosen.file}, the model file the answers name most, picks its "
        f"activation by a config value whose default ({keys}) names it; a checkpoint's config may name another"
    )
    return (*near, *(c for c in candidates if c not in near)), (said,)


def _tests_last(candidates: tuple[Candidate, ...]) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
    """`candidates` with the lines of a package's own tests (`is_test_code`) after the rest: SGLang
    ships 702 test files in its package, whose reference implementations run in one function what the
    library runs across several (the attention backend, the KV pool, the layer), so they fit a window
    of the library's ops better than its own functions do (11% of the op time of the corpus's SGLang
    attention extend was answered in ``sglang/test/kits/...``). A served model runs the library, not
    its tests. Moved, not dropped: where only tests fit, they stay."""
    return _after_the_rest(
        candidates,
        [c for c in candidates if is_test_code(c.file)],
        lambda first: (
            f"`{first.function}` ({first.file}) is a package's test code, which a served model does not "
            "run: its line after the library's"
        ),
    )


def _after_the_rest(
    candidates: tuple[Candidate, ...], moved: list[Candidate], say: Callable[[Candidate], str]
) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
    """`candidates` with those of `moved` after the rest, and what `say` says of the first moved; as
    they were where none or all are moved."""
    if not moved or len(moved) == len(candidates):
        return candidates, ()
    return (*(c for c in candidates if c not in moved), *moved), (say(moved[0]),)


def _best_first(candidates: Iterable[Candidate]) -> list[Candidate]:
    """The first `MAX_CANDIDATES` of `candidates`, best score first (then by file and line)."""
    return sorted(candidates, key=lambda c: (c.score, c.file, c.line))[:MAX_CANDIDATES]


def _shares(support: dict[str, float]) -> dict[str, float]:
    top = max(support.values(), default=0)
    return {file: count / top for file, count in support.items()} if top else {}


def _range_words(ranges: Sequence[str]) -> set[str]:
    words: set[str] = set()
    for name in ranges:
        name = name.removeprefix("kt:fn:")
        words.add(name)
        words.update(part for part in re.split(r"[.:/\s]+", name) if len(part) > 2)
    return words


__all__ = ["OpWindows", "Ranking", "StacklessRanker"]
