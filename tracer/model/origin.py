"""`Origin`: where a GPU kernel came from, and `Attributions`: the join's answer for every kernel."""

from __future__ import annotations

from array import array
from dataclasses import asdict, dataclass, field
from typing import Any

from tracer.model.events import Trace


@dataclass(frozen=True)
class Frame:
    """A Python frame named by the trace: ``file(def_line): function``."""

    file: str
    function: str
    def_line: int | None = None
    call_line: int | None = None  # the exact line executing in this frame, when known (CallFrom)

    @property
    def label(self) -> str:
        line = f"({self.def_line})" if self.def_line is not None else ""
        return f"{self.file}{line}: {self.function}"


@dataclass(frozen=True)
class Origin:
    """The chain from scope ranges down to a source line, for one launch context.

    Several kernels share one Origin when they come from the same place; the join deduplicates.
    ``confidence`` is 1.0 for an exact line (CallFrom, a kerneltrace site range, a unique site
    match), lower for a choice among candidates, 0.0 where no line is known.
    """

    ranges: tuple[str, ...] = ()  # record_function ranges, outermost first (ProfilerStep excluded)
    frames: tuple[Frame, ...] = ()  # Python frames, outermost first
    ops: tuple[str, ...] = ()  # CPU op chain, outermost first: ("aten::to", "aten::_to_copy", "aten::copy_")
    file: str | None = None
    line: int | None = None
    source: str | None = None  # the text of that line (or the site's call text)
    site_id: str | None = None
    rule: str | None = None
    confidence: float = 0.0
    evidence: tuple[str, ...] = ()  # how the line was found, in words
    replay: bool = False  # replayed from a CUDA graph
    candidates: tuple[str, ...] = field(default=(), compare=False)  # ranked "file:line" when unsure

    @property
    def location(self) -> str:
        if self.file is None:
            return "?"
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    @property
    def key(self) -> str:
        """What groups kernels into one origin across steps and layers: the line, else the context."""
        if self.file is not None and self.line is not None:
            return f"{self.file}:{self.line}"
        if self.frames:
            return self.frames[-1].label + " > " + " > ".join(self.ops)
        if self.ops:
            return " > ".join(self.ops)
        return "<graph replay>" if self.replay else "<unknown>"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["location"] = self.location
        data["key"] = self.key
        return data


@dataclass
class Attributions:
    """The join's output: one row per GPU activity (kernel, memcpy, memset) of the trace.

    ``gpu_rows[i]`` is the event row in ``trace.events``; ``op_rows[i]`` the innermost CPU op that
    launched it (-1 for none, e.g. graph replays); ``origin_ids[i]`` indexes ``origins``.
    """

    trace: Trace
    gpu_rows: array = field(default_factory=lambda: array("q"))
    op_rows: array = field(default_factory=lambda: array("q"))
    origin_ids: array = field(default_factory=lambda: array("q"))
    origins: list[Origin] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.gpu_rows)
