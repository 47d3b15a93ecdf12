"""Which sites get a range, in which file: a given list, or each hot module scanned when it loads."""

from __future__ import annotations

import fnmatch
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracer.model.site import Site


@dataclass(frozen=True)
class SiteSelection:
    """Filters on sites: minimum risk, rule codes, path globs (all must hold; empty = any)."""

    min_risk: float = 0.0
    rules: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()  # globs on `Site.path` or any tail of it: "sglang/srt/mem_cache/*"
    launching_only: bool = True  # zero-copy sites (`.view(dtype)`) launch nothing worth a range

    def matches(self, site: Site) -> bool:
        if site.risk < self.min_risk:
            return False
        if self.launching_only and not site.launches_kernel:
            return False
        if self.rules and site.rule not in self.rules:
            return False
        return not (self.paths and not any(_glob(site.path, pattern) for pattern in self.paths))

    def select(self, sites: Iterable[Site]) -> list[Site]:
        return [site for site in sites if self.matches(site)]


ALL_SITES = SiteSelection()


def _glob(path: str, pattern: str) -> bool:
    parts = path.split("/")
    return any(fnmatch.fnmatch("/".join(parts[i:]), pattern) for i in range(len(parts)))


def _normal(filename: str) -> str:
    return os.path.abspath(filename).replace(os.sep, "/")


def file_holds_site_path(filename: str, site_path: str) -> bool:
    """Is `filename` (absolute, on disk) the file `Site.path` names (relative to its import root)?"""
    normal = _normal(filename)
    return normal == site_path or normal.endswith("/" + site_path.lstrip("/"))


class SitePlan:
    """Answers "which sites are in this file?" for the import hook and the live patcher.

    Either from a fixed list of sites (matched to files by their `Site.path` suffix), or lazily:
    a module under one of `scan_modules` (dotted prefixes, e.g. ``sglang.srt.layers.attention``) is
    scanned with `tracer.static.scan` the first time it is asked about. `selection` filters both.
    """

    def __init__(
        self,
        sites: Sequence[Site] = (),
        *,
        scan_modules: Sequence[str] = (),
        selection: SiteSelection = ALL_SITES,
    ) -> None:
        self.selection = selection
        self.scan_modules = tuple(scan_modules)
        self._by_basename: dict[str, list[Site]] = defaultdict(list)
        for site in selection.select(sites):
            self._by_basename[site.path.rsplit("/", 1)[-1]].append(site)
        self._scanned: dict[str, list[Site]] = {}

    def may_hold(self, module_name: str) -> bool:
        """Cheap test on a module's name before anyone looks for its file."""
        if self._in_scan_modules(module_name):
            return True
        last = module_name.rsplit(".", 1)[-1]
        return f"{last}.py" in self._by_basename or "__init__.py" in self._by_basename

    def sites_for_file(self, filename: str, module_name: str | None = None) -> list[Site]:
        """The selected sites in the source file `filename` (absolute path)."""
        sites = [
            site
            for site in self._by_basename.get(os.path.basename(filename), ())
            if file_holds_site_path(filename, site.path)
        ]
        if module_name is not None and self._in_scan_modules(module_name):
            sites.extend(self._scan(filename))
        return sites

    def _in_scan_modules(self, module_name: str) -> bool:
        return any(module_name == p or module_name.startswith(p + ".") for p in self.scan_modules)

    def prefetch(self, files: Iterable[tuple[str, str]]) -> None:
        """Scan many (filename, module name) pairs in one pass (one cache lookup, one rule load)."""
        todo = [f for f, name in files if f not in self._scanned and self._in_scan_modules(name)]
        if not todo:
            return
        from tracer.static import scan

        result = scan([Path(f) for f in todo], jobs=1)  # never fork workers inside a host process
        by_path: dict[str, list[Site]] = defaultdict(list)
        for site in result.sites:
            by_path[site.path].append(site)
        for filename in todo:
            self._scanned[filename] = [
                site
                for path, sites in by_path.items()
                if file_holds_site_path(filename, path)
                for site in self.selection.select(sites)
            ]

    def _scan(self, filename: str) -> list[Site]:
        if filename not in self._scanned:
            from tracer.static import scan

            result = scan([Path(filename)], jobs=1)
            self._scanned[filename] = self.selection.select(result.sites)
        return self._scanned[filename]
