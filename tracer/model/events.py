"""`Trace`: one profiler trace parsed once into a compact, columnar event table.

Row ``i`` of every column describes event ``i``. Only duration events ("ph": "X") that some stage
uses become rows; flows, counters and metadata are folded into `TraceMeta` or dropped.
Times are integer nanoseconds relative to the trace's own ``ts`` origin (``ts * 1000`` rounded),
so comparisons need no float tolerance; ``meta.base_time_ns`` makes them absolute.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

NONE = -1  # the value of an integer column where the field is absent


class Cat(IntEnum):
    """Event categories that matter; everything else is OTHER."""

    CPU_OP = 0  # "cpu_op" (aten ops, also "operator" in old traces)
    USER_ANNOTATION = 1  # record_function ranges, ProfilerStep#N
    PYTHON_FUNCTION = 2  # only with with_stack=True
    RUNTIME = 3  # cuda_runtime: cudaLaunchKernel, cudaMemcpyAsync, cudaGraphLaunch, ...
    DRIVER = 4  # cuda_driver: cuLaunchKernel, ...
    KERNEL = 5
    MEMCPY = 6
    MEMSET = 7
    GPU_ANNOTATION = 8  # gpu_user_annotation
    OTHER = 9

    @property
    def is_gpu(self) -> bool:
        return self in (Cat.KERNEL, Cat.MEMCPY, Cat.MEMSET)


CATEGORY_NAMES: dict[str, Cat] = {
    "cpu_op": Cat.CPU_OP,
    "operator": Cat.CPU_OP,
    "user_annotation": Cat.USER_ANNOTATION,
    "python_function": Cat.PYTHON_FUNCTION,
    "cuda_runtime": Cat.RUNTIME,
    "cuda_driver": Cat.DRIVER,
    "kernel": Cat.KERNEL,
    "gpu_memcpy": Cat.MEMCPY,
    "gpu_memset": Cat.MEMSET,
    "gpu_user_annotation": Cat.GPU_ANNOTATION,
}


# The integer columns of `EventTable` (every column but `name` and `args`), for code that copies rows.
INT_COLUMNS = (
    "cat",
    "pid",
    "tid",
    "ts_ns",
    "dur_ns",
    "ext_id",
    "correlation",
    "py_id",
    "py_parent",
    "raw_index",
)


@dataclass
class EventTable:
    """Columns of the trace's duration events. Append with `add`; read the columns directly."""

    cat: array = field(default_factory=lambda: array("b"))
    name: list[str] = field(default_factory=list)  # interned
    pid: array = field(default_factory=lambda: array("q"))  # GPU events: device index
    tid: array = field(default_factory=lambda: array("q"))  # GPU events: stream
    ts_ns: array = field(default_factory=lambda: array("q"))
    dur_ns: array = field(default_factory=lambda: array("q"))
    ext_id: array = field(default_factory=lambda: array("q"))  # "External id"
    correlation: array = field(default_factory=lambda: array("q"))
    py_id: array = field(default_factory=lambda: array("q"))  # "Python id"
    py_parent: array = field(default_factory=lambda: array("q"))  # "Python parent id"
    raw_index: array = field(default_factory=lambda: array("q"))  # position in traceEvents
    # The args a later stage reads, trimmed by the loader (shapes, dtypes, grid, bytes, CallFrom,
    # graph ids); None where the event had nothing useful. Keys keep the profiler's spelling.
    args: list[dict[str, Any] | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.cat)

    def add(
        self,
        cat: Cat,
        name: str,
        pid: int,
        tid: int,
        ts_ns: int,
        dur_ns: int,
        ext_id: int = NONE,
        correlation: int = NONE,
        py_id: int = NONE,
        py_parent: int = NONE,
        raw_index: int = NONE,
        args: dict[str, Any] | None = None,
    ) -> int:
        self.cat.append(cat)
        self.name.append(name)
        self.pid.append(pid)
        self.tid.append(tid)
        self.ts_ns.append(ts_ns)
        self.dur_ns.append(dur_ns)
        self.ext_id.append(ext_id)
        self.correlation.append(correlation)
        self.py_id.append(py_id)
        self.py_parent.append(py_parent)
        self.raw_index.append(raw_index)
        self.args.append(args)
        return len(self.cat) - 1

    def taken(self, keep: list[int]) -> EventTable:
        """A new table of the rows `keep`, in that order."""
        out = EventTable()
        for name in INT_COLUMNS:
            column = getattr(self, name)
            getattr(out, name).extend(column[row] for row in keep)
        out.name.extend(self.name[row] for row in keep)
        out.args.extend(self.args[row] for row in keep)
        return out

    def rows(self, *cats: Cat) -> list[int]:
        wanted = set(cats)
        return [i for i, c in enumerate(self.cat) if c in wanted]

    def end_ns(self, row: int) -> int:
        return self.ts_ns[row] + self.dur_ns[row]


@dataclass(frozen=True)
class TraceMeta:
    """What the trace says about itself (top-level keys, device properties, distributed info)."""

    path: str
    base_time_ns: int | None = None
    ts_origin_ns: int = 0  # the trace-relative zero that ts_ns columns count from (ts * 1000)
    with_stack: bool | None = None
    record_shapes: bool | None = None
    devices: tuple[dict[str, Any], ...] = ()  # deviceProperties entries (name, memory, SMs, ...)
    cuda_runtime_version: int | None = None
    rank: int | None = None
    world_size: int | None = None
    has_call_from: bool = False  # python_function events carry CallFrom (torch >= 2.14)
    schema_version: int | None = None
    trace_name: str | None = None

    @property
    def device_name(self) -> str | None:
        return str(self.devices[0].get("name")) if self.devices else None


@dataclass
class Trace:
    """A loaded trace: its metadata and its event table. Built once by `tracer.load`."""

    meta: TraceMeta
    events: EventTable
    notes: list[str] = field(default_factory=list)  # what the loader tolerated or dropped, in words
    # Autograd's fwdbwd flows: backward cpu_op row -> the forward cpu_op row it differentiates.
    fwdbwd: dict[int, int] = field(default_factory=dict)
