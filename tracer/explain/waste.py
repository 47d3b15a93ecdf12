"""Waste that shapes reveal: a cast of a whole buffer whose next consumer keeps only a few rows."""

from __future__ import annotations

from dataclasses import dataclass

from tracer.explain.bandwidth import (
    call_bytes,
    human_bytes,
    short_type,
    target_dtype,
    tensor_inputs,
)
from tracer.explain.optree import OpTree

CAST_OPS = (
    "aten::to",
    "aten::_to_copy",
    "aten::copy_",
    "aten::clone",
    "aten::contiguous",
    "aten::float",
    "aten::half",
    "aten::bfloat16",
)
INDEX_OPS = (
    "aten::index",
    "aten::index_select",
    "aten::gather",
    "aten::slice",
    "aten::narrow",
    "aten::embedding",
    "aten::take",
)
WASTE_FRACTION = 0.5  # flag when the consumer keeps at most this share of the rows
_TYPE_BY_SHORT = {
    "bfloat16": "c10::BFloat16",
    "float16": "c10::Half",
    "float32": "float",
    "float64": "double",
    "float8_e4m3fn": "c10::Float8_e4m3fn",
    "float8_e5m2": "c10::Float8_e5m2",
    "int64": "long int",
    "int32": "int",
    "bool": "bool",
}


@dataclass(frozen=True)
class WholeBufferCast:
    """A cast whose output is indexed down to ``kept`` of ``rows`` rows by the very next op."""

    bytes: int
    rows: int
    kept: int
    source: str  # "fp8e4m3[495000,1,576]"
    target: str  # "bf16"
    consumer: str  # "aten::index"

    @property
    def text(self) -> str:
        share = self.kept / self.rows
        pct = f"{share:.1%}" if share >= 0.001 else f"{share:.2%}"
        return (
            f"cast {human_bytes(self.bytes)} whole buffer {self.source} -> {self.target}, "
            f"then {self.consumer} kept {self.kept} of {self.rows} rows ({pct})"
        )


def whole_buffer_cast(tree: OpTree, launch_op: int) -> WholeBufferCast | None:
    """Check one call: the cast around ``launch_op`` and the op that consumes its output next."""
    events = tree.events
    cast = launch_op
    for parent in tree.ancestors(launch_op):
        if events.name[parent] not in CAST_OPS:
            break
        cast = parent
    if events.name[cast] not in CAST_OPS:
        return None
    produced = _output(events.name[cast], events.args[cast], events.name[launch_op], events.args[launch_op])
    if produced is None:
        return None
    out_dims, out_type, in_desc, moved = produced
    if len(out_dims) < 1 or out_dims[0] < 2:
        return None
    for row in tree.following(cast, limit=8):
        inputs = tensor_inputs(events.args[row] or {})
        if not inputs or inputs[0][0] != out_dims or (out_type and inputs[0][1] != out_type):
            continue
        name = events.name[row]
        if name not in INDEX_OPS:
            return None  # the first reader of the output is not an index: it may need every row
        kept = _kept_rows(tree, row)
        if kept is None or kept > out_dims[0] * WASTE_FRACTION:
            return None
        return WholeBufferCast(
            moved, out_dims[0], kept, in_desc, short_type(out_type) if out_type else "?", name
        )
    return None


def _output(cast_name, cast_args, launch_name, launch_args):
    """(output dims, output type, "type[dims]" of the input, bytes moved) of a cast call."""
    if launch_name == "aten::copy_" and launch_args:
        inputs = tensor_inputs(launch_args)
        if len(inputs) >= 2:
            (dst, dst_type), (src, src_type) = inputs[0], inputs[1]
            moved = call_bytes("aten::copy_", launch_args)
            if moved is None:
                return None
            return dst, dst_type, f"{short_type(src_type)}[{','.join(map(str, src))}]", moved.bytes
    if cast_args and cast_name in ("aten::to", "aten::_to_copy"):
        inputs = tensor_inputs(cast_args)
        target = target_dtype(cast_args)
        moved = call_bytes(cast_name, cast_args)
        if not inputs or moved is None:
            return None
        dims, in_type = inputs[0]
        out_type = _TYPE_BY_SHORT.get(target[0], "") if target else in_type
        return dims, out_type, f"{short_type(in_type)}[{','.join(map(str, dims))}]", moved.bytes
    return None


def _kept_rows(tree: OpTree, row: int) -> int | None:
    """Rows of dim 0 the index op keeps, from its index tensor's shape or its slice bounds."""
    events = tree.events
    name, args = events.name[row], events.args[row] or {}
    dims = args.get("Input Dims") or []
    concrete = args.get("Concrete Inputs") or []
    if name == "aten::index_select" and len(dims) >= 3 and _int(concrete, 1) in (0, None):
        return _numel(dims[2])
    if name in ("aten::slice", "aten::narrow") and _int(concrete, 1) in (0, None):
        start, end = _int(concrete, 2), _int(concrete, 3)
        if name == "aten::narrow":
            return end  # narrow(self, dim, start, length)
        if start is not None and end is not None:
            rows = dims[0][0] if dims and dims[0] and isinstance(dims[0][0], int) else end
            return max(0, min(end, rows) - start)
        return None
    if name in ("aten::gather", "aten::take", "aten::embedding"):
        index = dims[2] if name == "aten::gather" and len(dims) > 2 else dims[1] if len(dims) > 1 else None
        return _numel(index) if index else None
    if name == "aten::index":
        # The indices are a TensorList the profiler leaves empty; the op reshapes each index tensor
        # first, and that child shows the length (a bool mask would show as a non-long type: skip it).
        for child in tree.inside(row, limit=8):
            child_args = events.args[child] or {}
            for child_dims, child_type in tensor_inputs(child_args):
                if child_type in ("long int", "int") and len(child_dims) == 1:
                    return child_dims[0]
    return None


def _numel(dims) -> int | None:
    if not isinstance(dims, list) or not all(isinstance(d, int) for d in dims):
        return None
    out = 1
    for d in dims:
        out *= d
    return out


def _int(values: list, position: int) -> int | None:
    try:
        return int(values[position])
    except (IndexError, TypeError, ValueError):
        return None
