"""Install site ranges: an import hook for modules not loaded yet, code swaps for those already loaded.

Both compile the module's own source through `tracer.instrument.rewrite`, so every original
statement keeps its line and column. A module imported while the hook is active is compiled with
its ranges (its `.pyc` is neither read nor written). A module already in `sys.modules` keeps its
objects: each of its functions that holds a site gets the rewritten code object (`__code__`), found
by name and first line; `uninstall` puts the original code back.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import CodeType, FunctionType, ModuleType

from tracer.instrument.plan import SitePlan
from tracer.instrument.rewrite import RewriteResult, SkippedSite, rewrite_module
from tracer.instrument.runtime import HELPER_NAME, install_helper
from tracer.model.site import Site

logger = logging.getLogger("kerneltrace")


@dataclass
class InstrumentationReport:
    """What the instrumentation did, for people and tests: per module, sites placed or skipped."""

    imported: list[str] = field(default_factory=list)  # modules compiled with ranges by the hook
    patched: list[str] = field(default_factory=list)  # modules already loaded, functions swapped
    placed: list[Site] = field(default_factory=list)
    skipped: list[SkippedSite] = field(default_factory=list)
    shared: list[tuple[Site, ...]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # "module: why", modules left as they were

    def add(self, result: RewriteResult) -> None:
        self.placed.extend(result.placed)
        self.skipped.extend(result.skipped)
        self.shared.extend(result.shared)

    def summary(self) -> str:
        modules = len(self.imported) + len(self.patched)
        text = (
            f"site ranges: {len(self.placed)} placed in {modules} module(s) "
            f"({len(self.imported)} at import, {len(self.patched)} already loaded), "
            f"{len(self.skipped)} skipped"
        )
        if self.failed:
            text += f", {len(self.failed)} module(s) left alone"
        return text


def _read_source(filename: str) -> bytes:
    with open(filename, "rb") as handle:
        return handle.read()


def iter_codes(code: CodeType) -> Iterator[CodeType]:
    """`code` and every code object nested in its constants."""
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from iter_codes(const)


class SiteRangeLoader(importlib.machinery.SourceFileLoader):
    """Loads a source module compiled with site ranges (never from or to its bytecode cache)."""

    def __init__(self, fullname: str, path: str, sites: Sequence[Site], report: InstrumentationReport):
        super().__init__(fullname, path)
        self.sites = tuple(sites)
        self.report = report

    def get_code(self, fullname: str) -> CodeType:
        source = self.get_data(self.path)
        try:
            result = rewrite_module(source, self.sites, self.path)
            code = result.compile(self.path)
        except Exception as err:  # never break an import: the module loads without its ranges
            self.report.failed.append(f"{fullname}: {type(err).__name__}: {err}")
            return super().get_code(fullname)  # type: ignore[return-value]
        self.report.add(result)
        self.report.imported.append(fullname)
        return code

    def exec_module(self, module: ModuleType) -> None:
        install_helper(module.__dict__)
        super().exec_module(module)


class SiteImportHook(importlib.abc.MetaPathFinder):
    """A meta path finder that hands modules holding planned sites to `SiteRangeLoader`.

    It answers only for modules the plan may hold; for those it asks the other finders for the
    ordinary spec and swaps the loader when the spec is a plain source file with sites.
    """

    def __init__(self, plan: SitePlan, report: InstrumentationReport) -> None:
        self.plan = plan
        self.report = report
        self._local = threading.local()

    def find_spec(self, fullname: str, path=None, target=None):
        if getattr(self._local, "busy", False) or not self.plan.may_hold(fullname):
            return None
        self._local.busy = True
        try:
            spec = _spec_from_other_finders(self, fullname, path, target)
            if spec is None or spec.origin is None:
                return None
            if type(spec.loader) is not importlib.machinery.SourceFileLoader:
                return None
            sites = self.plan.sites_for_file(spec.origin, fullname)
            if not sites:
                return None
            spec.loader = SiteRangeLoader(fullname, spec.origin, sites, self.report)
            return spec
        except Exception:  # never break an import: the module then loads as usual
            logger.warning("kerneltrace: could not prepare %s for site ranges", fullname, exc_info=True)
            return None
        finally:
            self._local.busy = False


def _spec_from_other_finders(hook: SiteImportHook, fullname: str, path, target):
    for finder in sys.meta_path:
        if finder is hook:
            continue
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        spec = find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


@dataclass
class CodeSwap:
    function: FunctionType
    original: CodeType


def patch_loaded_modules(
    modules: Sequence[ModuleType], plan: SitePlan, report: InstrumentationReport
) -> list[CodeSwap]:
    """Give the functions of already-loaded `modules` their rewritten code; returns what to undo."""
    new_codes: dict[str, dict[tuple[str, int], CodeType]] = {}
    candidates = [(m, getattr(m, "__file__", None)) for m in modules]
    sources = [(m, f) for m, f in candidates if isinstance(f, str) and f.endswith(".py")]
    try:
        plan.prefetch((f, m.__name__) for m, f in sources)
    except Exception:  # each file is then scanned on its own below, failures reported per module
        logger.debug("kerneltrace: batch scan failed; scanning module by module", exc_info=True)
    for module, filename in sources:
        try:
            sites = plan.sites_for_file(filename, module.__name__)
            if not sites:
                continue
            result = rewrite_module(_read_source(filename), sites, filename)
            code = result.compile(filename)
        except Exception as err:  # a module we cannot rewrite keeps its code
            report.failed.append(f"{module.__name__}: {type(err).__name__}: {err}")
            continue
        install_helper(module.__dict__)
        ranged = {(c.co_name, c.co_firstlineno): c for c in iter_codes(code) if HELPER_NAME in c.co_names}
        if ranged:
            new_codes[filename] = ranged
            report.add(result)
            report.patched.append(module.__name__)
    if not new_codes:
        return []
    swaps: list[CodeSwap] = []
    for function in _live_functions(modules, set(new_codes)):
        code = function.__code__
        new = new_codes[code.co_filename].get((code.co_name, code.co_firstlineno))
        if new is None or new is code or not _same_shape(code, new):
            continue
        swaps.append(CodeSwap(function, code))
        function.__code__ = new
    return swaps


def _live_functions(modules: Sequence[ModuleType], filenames: set[str]) -> list[FunctionType]:
    """Every function object whose code comes from `filenames`: reachable from the modules
    (module globals, classes, decorator closures, ``__wrapped__``) and, for closures made at run
    time, from the garbage collector. (gc alone misses objects frozen by `gc.freeze()`, as SGLang
    does after start-up.)"""
    found: dict[int, FunctionType] = {}
    seen: set[int] = set()
    for module in modules:
        stack: list[object] = list(vars(module).values())
        while stack:
            obj = stack.pop()
            if id(obj) in seen or isinstance(obj, ModuleType):
                continue
            seen.add(id(obj))
            if isinstance(obj, FunctionType):
                if obj.__code__.co_filename in filenames:
                    found[id(obj)] = obj
                for cell in obj.__closure__ or ():
                    with contextlib.suppress(ValueError):  # an empty cell
                        stack.append(cell.cell_contents)
                stack.append(obj.__dict__.get("__wrapped__"))
            elif isinstance(obj, (staticmethod, classmethod)):
                stack.append(obj.__func__)
            elif isinstance(obj, property):
                stack.extend((obj.fget, obj.fset, obj.fdel))
            elif isinstance(obj, functools.partial):
                stack.append(obj.func)
            elif isinstance(obj, type):
                if obj.__module__ == module.__name__:
                    stack.extend(vars(obj).values())
            elif callable(obj):  # functools.lru_cache and other wrappers that keep __wrapped__
                with contextlib.suppress(AttributeError):
                    stack.append(object.__getattribute__(obj, "__wrapped__"))
    for obj in gc.get_objects():
        if type(obj) is FunctionType and obj.__code__.co_filename in filenames:
            found[id(obj)] = obj
    return list(found.values())


def _same_shape(old: CodeType, new: CodeType) -> bool:
    """Is `new` the ranged version of `old` (same variables), not code from an edited file?"""
    return (
        old.co_varnames == new.co_varnames
        and old.co_freevars == new.co_freevars
        and old.co_cellvars == new.co_cellvars
        and old.co_argcount == new.co_argcount
        and set(old.co_names) <= set(new.co_names)
    )


class SiteInstrumentation:
    """Site ranges for a plan: `install()` patches loaded modules and hooks future imports."""

    def __init__(self, plan: SitePlan) -> None:
        self.plan = plan
        self.report = InstrumentationReport()
        self.hook = SiteImportHook(plan, self.report)
        self._swaps: list[CodeSwap] = []
        self.installed = False

    def install(self) -> SiteInstrumentation:
        if self.installed:
            return self
        install_helper()
        loaded = [m for name, m in list(sys.modules.items()) if m is not None and self.plan.may_hold(name)]
        self._swaps = patch_loaded_modules(loaded, self.plan, self.report)
        sys.meta_path.insert(0, self.hook)
        self.installed = True
        return self

    def add_loaded_module(self, module: ModuleType) -> None:
        """Also give an already-loaded `module` its site ranges (scanned now), e.g. the model's file."""
        if module.__name__ not in self.plan.scan_modules:
            self.plan.scan_modules = (*self.plan.scan_modules, module.__name__)
        self._swaps.extend(patch_loaded_modules([module], self.plan, self.report))

    def uninstall(self) -> None:
        """Stop hooking imports and restore swapped code (modules imported meanwhile keep ranges)."""
        if not self.installed:
            return
        if self.hook in sys.meta_path:
            sys.meta_path.remove(self.hook)
        for swap in reversed(self._swaps):
            swap.function.__code__ = swap.original
        self._swaps = []
        self.installed = False

    def __enter__(self) -> SiteInstrumentation:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()


def instrument_sites(sites: Sequence[Site], **selection) -> SiteInstrumentation:
    """Install site ranges for `sites` (optionally filtered: `min_risk`, `rules`, `paths`)."""
    from tracer.instrument.plan import SiteSelection

    return SiteInstrumentation(SitePlan(sites, selection=SiteSelection(**selection))).install()
