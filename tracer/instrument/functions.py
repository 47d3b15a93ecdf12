"""Function-level ranges: wrap functions named by dotted path in ``kt:fn:<qualname>`` ranges.

``examples.glm5_kv_cast.model.DecodeModel.decode_step`` (or ``module:Class.method``) names the
attribute to wrap; static and class methods stay what they were. Every wrapper is undone by
`FunctionRanges.uninstall`.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tracer.errors import InputError
from tracer.instrument.runtime import function_range
from tracer.model.ranges import function_range_name


@dataclass(frozen=True)
class Target:
    """A resolved dotted path: the object holding the attribute, the attribute, its raw value."""

    path: str
    owner: Any
    attribute: str
    raw: Any  # as stored (a staticmethod/classmethod object stays one)

    @property
    def function(self) -> Callable:
        return self.raw.__func__ if isinstance(self.raw, (staticmethod, classmethod)) else self.raw

    @property
    def qualname(self) -> str:
        name = getattr(self.function, "__qualname__", None)
        return name if isinstance(name, str) and "<locals>" not in name else self.path.rsplit(":", 1)[-1]


def resolve_target(path: str) -> Target:
    """Find the attribute `path` names, importing its module. InputError if it is not there."""
    if ":" in path:  # module:Class.method
        module_name, _, qualname = path.partition(":")
        head, _, attribute = qualname.rpartition(".")
        owner_path = f"{module_name}:{head}" if head else module_name
    else:
        owner_path, _, attribute = path.rpartition(".")
    if not owner_path or not attribute:
        raise InputError(path, "expected a dotted path such as package.module.Class.method")
    try:
        owner = pkgutil.resolve_name(owner_path)
    except (ImportError, AttributeError, ValueError) as err:
        raise InputError(path, f"cannot import {owner_path}: {err}") from None
    raw = owner.__dict__.get(attribute) if isinstance(owner, type) else None
    if raw is None:
        raw = getattr(owner, attribute, None)
    if raw is None:
        raise InputError(path, f"{owner_path} has no attribute {attribute!r}")
    function = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    if isinstance(raw, property) or not callable(function):
        raise InputError(path, "not a function or method")
    return Target(path, owner, attribute, raw)


def _rewrap(target: Target, wrapper: Callable) -> Any:
    if isinstance(target.raw, staticmethod):
        return staticmethod(wrapper)
    if isinstance(target.raw, classmethod):
        return classmethod(wrapper)
    return wrapper


class FunctionRanges:
    """Installs ``kt:fn:`` ranges on functions, and optionally marks one of them as the step."""

    def __init__(self, paths: Sequence[str] = ()) -> None:
        self.targets = [resolve_target(path) for path in paths]
        self._installed: list[Target] = []

    def install(self) -> FunctionRanges:
        for target in self.targets:
            wrapper = function_range(target.function, function_range_name(target.qualname))
            self._set(target, _rewrap(target, wrapper))
        return self

    def install_step(self, path: str, on_step: Callable[[], None]) -> Target:
        """Wrap `path` so that each call is one step: a range around it, then `on_step()` after it."""
        target = resolve_target(path)
        ranged = function_range(target.function, function_range_name(target.qualname))
        original = target.function

        def kerneltrace_step(*args: Any, **kwargs: Any) -> Any:
            try:
                return ranged(*args, **kwargs)
            finally:
                on_step()

        kerneltrace_step.__wrapped__ = original  # type: ignore[attr-defined]
        kerneltrace_step.__qualname__ = getattr(original, "__qualname__", "step")
        kerneltrace_step.__doc__ = getattr(original, "__doc__", None)
        self._set(target, _rewrap(target, kerneltrace_step))
        return target

    def _set(self, target: Target, value: Any) -> None:
        setattr(target.owner, target.attribute, value)
        self._installed.append(target)

    def uninstall(self) -> None:
        for target in reversed(self._installed):
            setattr(target.owner, target.attribute, target.raw)
        self._installed = []
