"""The data model every stage shares: sites (static), events (trace), origins (join), findings (explain)."""

from tracer.model.events import Cat, EventTable, Trace, TraceMeta
from tracer.model.finding import Analysis, Finding
from tracer.model.origin import Attributions, Frame, Origin
from tracer.model.site import Site

__all__ = [
    "Analysis",
    "Attributions",
    "Cat",
    "EventTable",
    "Finding",
    "Frame",
    "Origin",
    "Site",
    "Trace",
    "TraceMeta",
]
