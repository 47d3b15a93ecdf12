"""What instrumented code calls at run time: named profiler ranges that cost ~nothing unprofiled.

Rewritten statements call ``__kt_range__("kt:site:...")`` (the name `HELPER_NAME`); function wrappers
use `function_range`. Both return a shared no-op context manager unless a profiler is recording, so
the disabled path is two cheap checks (~0.3 us). A failure inside our range code is logged once and
swallowed: the instrumented code always runs exactly as it would without us.

While a profiler records, a range is torch's `_RecordFunctionFast`: a RecordFunction entered and
left in C, the same machinery every aten op inside the range goes through. On the H200's host, under
the CPU+CUDA profiler, one costs 1.7 us with our checks, against 4.4 us for the classic user range
(`ProfiledRange`), 13.7 us for `torch.profiler.record_function` and 15.5 us for one op launch
(`bench/bench_range_cost.py`; tests/fixtures/gpu/round2/range_cost_gpu.txt). Its trace event is a
`cpu_op` named ``kt:...``, which the loader reads as a range (`tracer.model.ranges.is_kerneltrace_range`);
unlike a user range it gets no `gpu_user_annotation` copy. Where torch lacks it, `ProfiledRange`
opens the classic `user_annotation` range.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any, Literal

logger = logging.getLogger("kerneltrace")

# The global name rewritten code calls. A dunder name, so class bodies do not mangle it.
HELPER_NAME = "__kt_range__"
# Attribute a function wrapper carries, pointing at the function it wraps (for unwrapping).
ORIGINAL_ATTRIBUTE = "__kerneltrace_original__"

_NULL_RANGE = contextlib.nullcontext()
_warned: set[str] = set()


def warn_once(key: str, message: str, *args: Any) -> None:
    """Log a failure of ours once per `key` (never raise into the instrumented code)."""
    if key in _warned:
        return
    _warned.add(key)
    logger.warning("kerneltrace: " + message, *args, exc_info=True)  # noqa: LOG014 (called from handlers)


def _not_bound() -> bool:
    _bind()
    return _is_compiling()


# Bound to torch's functions on first use (importing this module does not import torch).
_is_compiling: Callable[[], bool] = _not_bound
_profiler_enabled: Callable[[], bool] = _not_bound
_open_range: Callable[[str], contextlib.AbstractContextManager]  # the range for a name, not yet entered
_enter_user_range: Callable[[str], Any]  # ProfiledRange's pair
_close_user_range: Callable[[Any], None]


def _bind() -> None:
    """Look up torch's functions once: the checks, the range type, the user-range pair."""
    global _is_compiling, _profiler_enabled, _open_range, _enter_user_range, _close_user_range
    import torch

    autograd = torch._C._autograd
    if hasattr(autograd, "_record_function_with_args_enter"):
        # The binding behind record_function's user ranges, without its per-call Python and dispatcher
        # work: the same `user_annotation` event at a quarter of the cost.
        _enter_user_range = autograd._record_function_with_args_enter
        _close_user_range = autograd._record_function_with_args_exit
    else:  # pragma: no cover - a torch without the binding

        def _enter_user_range(name: str) -> Any:
            record = torch.profiler.record_function(name)
            record.__enter__()
            return record

        def _close_user_range(record: Any) -> None:
            record.__exit__(None, None, None)

    _open_range = getattr(torch._C._profiler, "_RecordFunctionFast", None) or ProfiledRange
    _profiler_enabled = autograd._profiler_enabled
    _is_compiling = torch.compiler.is_compiling


class ProfiledRange:
    """A record_function range (a ``user_annotation`` event) that never raises into the code it
    wraps: the range where torch has no `_RecordFunctionFast`."""

    __slots__ = ("_handle", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._handle = None

    def __enter__(self) -> None:
        try:
            self._handle = _enter_user_range(self._name)
        except Exception:
            warn_once("enter", "could not open the range %s; running without it", self._name)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> Literal[False]:
        handle = self._handle
        if handle is not None:
            self._handle = None
            try:
                _close_user_range(handle)
            except Exception:
                warn_once("exit", "could not close the range %s", self._name)
        return False  # never swallow the instrumented code's exception


def named_range(name: str) -> contextlib.AbstractContextManager:
    """The range to enter for `name` now: a real one while a profiler records, else a shared no-op.

    Under torch.compile tracing it is always the no-op (checked first, so compiled regions see no
    graph break).
    """
    try:
        if _is_compiling() or not _profiler_enabled():
            return _NULL_RANGE
    except Exception:
        warn_once("check", "could not ask torch whether a profiler is running")
        return _NULL_RANGE
    try:
        return _open_range(name)
    except Exception:
        warn_once("enter", "could not open the range %s; running without it", name)
        return _NULL_RANGE


# What rewritten statements call; module globals and builtins both get it (see `install_helper`).
site_range = named_range


def install_helper(namespace: dict[str, Any] | None = None) -> None:
    """Make `HELPER_NAME` resolvable: in `namespace` (a module's globals) and in builtins.

    Builtins is the fallback for rewritten code run in a namespace we never saw (runpy, exec); it
    stays installed, since modules imported while instrumenting keep their rewritten code.
    """
    if namespace is not None:
        namespace[HELPER_NAME] = site_range
    if getattr(builtins, HELPER_NAME, None) is not site_range:
        setattr(builtins, HELPER_NAME, site_range)


def function_range(function: Callable, name: str) -> Callable:
    """`function` wrapped so each call runs inside the range `name` while a profiler records."""

    @functools.wraps(function)
    def kerneltrace_range(*args: Any, **kwargs: Any) -> Any:
        try:
            scope = named_range(name)
        except Exception:  # only if `named_range` itself is broken (replaced, half-imported)
            warn_once(f"wrapper:{name}", "range wrapper %s failed; calling the function", name)
            return function(*args, **kwargs)
        with scope:
            return function(*args, **kwargs)

    setattr(kerneltrace_range, ORIGINAL_ATTRIBUTE, function)
    return kerneltrace_range


def is_range_wrapper(obj: object) -> bool:
    return callable(obj) and hasattr(obj, ORIGINAL_ATTRIBUTE)
