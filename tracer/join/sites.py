"""Find the static site a call in a Python frame ran: by file, def line, method, dtype and call order."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from tracer.join.dtypes import METHOD_DTYPES, canonical_dtype
from tracer.join.frames import same_file
from tracer.model.site import Site

# Ops that run directly in a frame without a builtin-method frame, and the site methods they come from.
OP_METHODS: dict[str, tuple[str, ...]] = {
    "aten::index_put_": ("__setitem__", "index_put_"),
    "aten::index_put": ("__setitem__", "index_put"),
    "aten::copy_": ("__setitem__", "copy_"),
    "aten::slice": ("__setitem__",),
    "aten::select": ("__setitem__",),
    "aten::fill_": ("__setitem__", "fill_"),
    "aten::masked_fill_": ("__setitem__", "masked_fill_"),
    "aten::index": ("__getitem__",),
}


@dataclass(frozen=True)
class SiteChoice:
    """The site picked for one call (or None), how sure, why, and the ranked alternatives."""

    site: Site | None
    confidence: float
    evidence: tuple[str, ...]
    candidates: tuple[Site, ...] = ()


class SiteIndex:
    """Static sites grouped by file name, then by enclosing function (def line)."""

    def __init__(self, sites: Sequence[Site] = ()) -> None:
        self.sites = tuple(sites)
        self.by_id = {site.id: site for site in self.sites}
        self._by_basename: dict[str, list[Site]] = defaultdict(list)
        for site in self.sites:
            self._by_basename[site.path.replace("\\", "/").rsplit("/", 1)[-1]].append(site)
        self._functions: dict[tuple[str, int | None], tuple[Site, ...]] = {}

    def __bool__(self) -> bool:
        return bool(self.sites)

    def in_file(self, file: str) -> list[Site]:
        base = file.replace("\\", "/").rsplit("/", 1)[-1]
        return [s for s in self._by_basename.get(base, ()) if same_file(s.path, file)]

    def in_function(self, file: str, def_line: int | None) -> tuple[Site, ...]:
        """Sites inside the function whose ``def`` is at `def_line` of `file`, in source order."""
        key = (file, def_line)
        found = self._functions.get(key)
        if found is None:
            found = tuple(
                sorted(
                    (s for s in self.in_file(file) if s.def_line == def_line),
                    key=lambda s: (s.line, s.col),
                )
            )
            self._functions[key] = found
        return found

    def at_line(self, file: str, line: int) -> list[Site]:
        return sorted(
            (s for s in self.in_file(file) if s.line <= line <= (s.end_line or s.line)), key=lambda s: s.col
        )


def site_dtype(site: Site) -> str | None:
    """The dtype a site casts to when the source says it literally (``torch.bfloat16``, ``.float()``)."""
    return canonical_dtype(site.target_dtype) or METHOD_DTYPES.get(site.method)


def choose_site(
    in_function: Sequence[Site],
    methods: Sequence[str],
    *,
    nth: int,
    calls: int,
    target_dtype: str | None,
    function: str,
    source_dtype: str | None = None,
) -> SiteChoice:
    """Pick the site of the `nth` (0-based) of `calls` same-method calls in one run of a function."""
    method_label = "/".join(f".{m}" for m in methods)
    same_method = [s for s in in_function if s.method in methods]
    if target_dtype and source_dtype and target_dtype != source_dtype:
        # The op changed the dtype: a `.to(device)` with no dtype cannot be the one that ran.
        casting = [s for s in same_method if not (s.method == "to" and s.target_dtype is None)]
        if casting and len(casting) < len(same_method) and len(same_method) != calls:
            same_method = casting
    if not same_method:
        where = f"{len(in_function)} other site(s)" if in_function else "no static site"
        return SiteChoice(None, 0.0, (f"{where} in `{function}`, none of them a {method_label} call",))
    order = f"call {nth + 1} of {calls} {method_label} calls in this run of `{function}`"
    dtype_ok = [s for s in same_method if _dtype_agrees(s, target_dtype)]
    if len(same_method) == calls and nth < calls:
        site = same_method[nth]
        evidence = [f"{order}; `{function}` has {len(same_method)} {method_label} site(s) in source order"]
        if _dtype_agrees(site, target_dtype):
            if target_dtype and site_dtype(site):
                evidence.append(f"target dtype {target_dtype} matches the source")
            return SiteChoice(site, 1.0, tuple(evidence))
        evidence.append(f"but the source casts to {site_dtype(site)}, the trace to {target_dtype}")
        return SiteChoice(site, 0.6, tuple(evidence), _ranked(same_method, site, dtype_ok))
    if len(same_method) == 1:
        site = same_method[0]
        return SiteChoice(
            site,
            0.9 if _dtype_agrees(site, target_dtype) else 0.5,
            (f"the only {method_label} site in `{function}` ({order}: a loop or a helper called twice)",),
        )
    counts = f"{order}, but `{function}` has {len(same_method)} {method_label} sites: counts disagree"
    looped = [i for i, s in enumerate(same_method) if s.in_loop]
    if calls > len(same_method) and len(looped) == 1 and nth < calls:
        # One site sits in a loop: the calls before it map to the sites before it, the extra
        # calls to the loop site, and the rest to the sites after it.
        loop, extra = looped[0], calls - len(same_method)
        index = nth if nth < loop else loop if nth <= loop + extra else nth - extra
        site = same_method[index]
        if _dtype_agrees(site, target_dtype):
            reasons = (counts, f"the one in a loop ({site.location}) ran {extra + 1} times")
            return SiteChoice(site, 0.8, reasons, tuple(same_method))
    if target_dtype and len(dtype_ok) == 1:
        return SiteChoice(
            dtype_ok[0], 0.7, (counts, f"only one of them casts to {target_dtype}"), tuple(same_method)
        )
    pool = dtype_ok or same_method
    guess = pool[min(nth, len(pool) - 1)]
    return SiteChoice(guess, 0.4, (counts, "ranked by call order"), _ranked(pool, guess, pool))


def _dtype_agrees(site: Site, target_dtype: str | None) -> bool:
    literal = site_dtype(site)
    return literal is None or target_dtype is None or literal == target_dtype


def _ranked(sites: Sequence[Site], first: Site, preferred: Sequence[Site]) -> tuple[Site, ...]:
    rest = [s for s in preferred if s is not first] + [
        s for s in sites if s is not first and s not in preferred
    ]
    return (first, *rest)
