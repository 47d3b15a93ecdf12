"""Names of the record_function ranges kerneltrace's instrumentation emits, and their parsing.

A site range names the site's id and location, so a trace alone says which line launched the
kernels inside it (no re-scan needed): ``kt:site:3fa2c19b0d@sglang/srt/layers/x.py:120``.
A function range names a qualified function: ``kt:fn:FlashInferMLABackend.forward_decode``.

Either is a `user_annotation` event (torch's record_function) or, from torch's cheaper
`_RecordFunctionFast`, a `cpu_op` event: the loader reads both as ranges (`is_kerneltrace_range`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tracer.model.site import Site

SITE_PREFIX = "kt:site:"
FUNCTION_PREFIX = "kt:fn:"
RANGE_PREFIXES = (SITE_PREFIX, FUNCTION_PREFIX)
_SITE_RANGE = re.compile(r"^kt:site:(?P<id>[0-9a-f]+)@(?P<path>.+):(?P<line>\d+)$")


@dataclass(frozen=True)
class SiteRange:
    site_id: str
    path: str
    line: int


def site_range_name(site: Site) -> str:
    return f"{SITE_PREFIX}{site.id}@{site.path}:{site.line}"


def function_range_name(qualname: str) -> str:
    return f"{FUNCTION_PREFIX}{qualname}"


def is_kerneltrace_range(name: str) -> bool:
    """Is `name` one of our ranges (whatever category the trace files it under)?"""
    return name.startswith(RANGE_PREFIXES)


def parse_site_range(name: str) -> SiteRange | None:
    match = _SITE_RANGE.match(name)
    if match is None:
        return None
    return SiteRange(match["id"], match["path"], int(match["line"]))
