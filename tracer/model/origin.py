"""`Origin`: where a GPU kernel came from, and `Attributions`: the join's answer for every kernel."""

from __future__ import annotations

from array import array
from dataclasses import asdict, dataclass, field
from typing import Any

from tracer.model.events import Trace

BEFORE_TRACE_LABEL = "<launched before the trace>"

# What kind of answer an Origin's line is (`Origin.answer`), the same word in every rendering.
EXACT = "exact"  # CallFrom, a kerneltrace range, or the only line that fits the whole run
RESOLVED = "resolved"  # the best of the lines that fit, with the others named (confidence 0.5-0.9)
AMBIGUOUS = "ambiguous"  # several lines fit equally: the first is shown, all are listed
RANKED = "ranked"  # no Python frames: a ranking of candidate lines, never a match
NO_LINE = "none"
EXACT_CONFIDENCE = 0.9


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
class FusedLine:
    """One user line whose ops an Inductor kernel fused: ``model.py:101`` with its ops ``("to", "mul")``."""

    file: str
    line: int
    ops: tuple[str, ...] = ()  # the line's graph ops in the kernel, in graph order ("to", "mul", "silu")
    source: str | None = None  # the text of the line
    function: str | None = None  # the function the line is in

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def label(self) -> str:
        """``model.py:101 [to, mul]``."""
        return f"{self.location} [{', '.join(self.ops)}]" if self.ops else self.location


@dataclass(frozen=True)
class CompiledRegion:
    """The torch.compile'd code that launched a kernel: the compiled function and the line that called it."""

    graph: str  # Inductor's generated module (its path), or "CompiledFxGraph <cache key>"
    function: str | None = None  # the compiled function ("fused", "forward")
    file: str | None = None
    def_line: int | None = None
    call_file: str | None = None  # the user line that called the compiled function or module
    call_function: str | None = None
    call_line: int | None = None
    call_source: str | None = None
    call_at_compile: bool = False  # the call line is where Dynamo compiled it (no frames to say more)
    compile_id: str | None = None  # Dynamo's "0/0" (frame / recompile), from `Torch-Compiled Region: 0/0`
    provenance: str = ""  # how the fused lines were found (`tracer.join.compiled` names the sources)

    @property
    def call_location(self) -> str | None:
        if self.call_file is None:
            return None
        return f"{self.call_file}:{self.call_line}" if self.call_line is not None else self.call_file


def _is_plumbing(frame: Frame) -> bool:
    """Frames every caller shares: built-ins, ``nn.Module`` markers, torch's own Python code."""
    return frame.file.startswith(("<", "torch/")) or frame.file == "nn.Module"


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
    before_trace: bool = False  # launched before the profiler started: the launch is not in the trace
    candidates: tuple[str, ...] = field(default=(), compare=False)  # ranked "file:line" when unsure
    # An Inductor kernel of torch.compile'd code: each user line whose ops it fused, and the region.
    fused: tuple[FusedLine, ...] = ()
    compiled: CompiledRegion | None = None

    @property
    def answer(self) -> str:
        """`EXACT`, `RESOLVED`, `AMBIGUOUS`, `RANKED` or `NO_LINE`: how far the line can be trusted."""
        if self.line is None:
            return NO_LINE
        if self.evidence and self.evidence[0].startswith("a ranking"):
            return RANKED
        if self.confidence >= EXACT_CONFIDENCE:
            return EXACT
        if len(self.candidates) > 1 and self.confidence < 0.5:
            return AMBIGUOUS
        return RESOLVED

    @property
    def location(self) -> str:
        if self.file is None:
            return "?"
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    @property
    def caller_frame(self) -> Frame | None:
        """The innermost frame of the caller's own code (not a built-in, nn.Module marker or torch)."""
        return next((f for f in reversed(self.frames) if not _is_plumbing(f)), None)

    @property
    def key(self) -> str:
        """What groups kernels into one origin across steps and layers: the line, else the context."""
        if self.file is not None and self.line is not None:
            return f"{self.file}:{self.line}"
        if self.frames:
            # Built-in calls (`linear`, `cat`) and torch's module plumbing are shared by every
            # caller, so the caller's own frame keys the origin (they alone would merge them all).
            own = self.caller_frame or self.frames[-1]
            builtin = self.frames[-1]
            via = f" > {builtin.function}" if builtin is not own and builtin.file.startswith("<") else ""
            return own.label + via + " > " + " > ".join(self.ops)
        if self.ops:
            return " > ".join(self.ops)
        if self.before_trace:
            return BEFORE_TRACE_LABEL
        return "<graph replay>" if self.replay else "<unknown>"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["location"] = self.location
        data["key"] = self.key
        data["answer"] = self.answer
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
    # "gpu": rows are kernels/memcpys/memsets; "cpu": the trace has no GPU activity, so rows are its
    # leaf CPU ops (no CPU op inside them) and op_rows[i] == gpu_rows[i].
    time_basis: str = "gpu"
    # Graph replays launch from no op of this trace (op_rows -1). Where their capture was profiled:
    # gpu row -> (the trace holding the capture, the capture-time op row that created the kernel's
    # graph node). A graph replays its capture's shapes, so that op's args size the replayed kernel;
    # its time is the capture's, not the replay's.
    capture_ops: dict[int, tuple[Trace, int]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.gpu_rows)
