"""Instrumented runs: record_function ranges at the static map's sites and at chosen functions.

`profile()` is the one-call API; the parts: `rewrite_module` (ranges into a module's compiled code,
lines and columns kept), `SiteInstrumentation` (import hook + loaded-module patching),
`FunctionRanges` (``kt:fn:`` wrappers, step functions), `named_range` (what runs at run time).
"""

from tracer.instrument.functions import FunctionRanges, resolve_target
from tracer.instrument.patch import InstrumentationReport, SiteInstrumentation, instrument_sites
from tracer.instrument.plan import SitePlan, SiteSelection
from tracer.instrument.rewrite import RewriteResult, SkippedSite, rewrite_module
from tracer.instrument.runtime import function_range, named_range
from tracer.instrument.session import ProfileSession, profile

__all__ = [
    "FunctionRanges",
    "InstrumentationReport",
    "ProfileSession",
    "RewriteResult",
    "SiteInstrumentation",
    "SitePlan",
    "SiteSelection",
    "SkippedSite",
    "function_range",
    "instrument_sites",
    "named_range",
    "profile",
    "resolve_target",
    "rewrite_module",
]
