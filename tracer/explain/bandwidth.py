"""Bytes and bandwidth: bytes moved per call from the launching op's shapes and dtypes, device peaks.

Only reads and writes that the shapes prove are counted: a copy/cast reads its source and writes
its destination once. GEMMs and plain elementwise ops get an estimate (every operand read once,
the result written once), marked as such: caches and tiling make the real traffic differ.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# "Input type" spellings -> bytes per element.
TYPE_SIZES: dict[str, int] = {
    "c10::BFloat16": 2,
    "c10::Half": 2,
    "float": 4,
    "double": 8,
    "long int": 8,
    "long": 8,
    "int": 4,
    "short int": 2,
    "short": 2,
    "signed char": 1,
    "unsigned char": 1,
    "short unsigned int": 2,
    "unsigned int": 4,
    "long unsigned int": 8,
    "bool": 1,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "c10::Float8_e8m0fnu": 1,
    "c10::Float4_e2m1fn_x2": 1,
    "c10::complex<c10::Half>": 4,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::qint8": 1,
    "c10::quint8": 1,
    "c10::qint32": 4,
}

# torch ScalarType codes as "Concrete Inputs" spells a dtype argument -> (short name, bytes).
DTYPE_CODES: dict[str, tuple[str, int]] = {
    "0": ("uint8", 1),
    "1": ("int8", 1),
    "2": ("int16", 2),
    "3": ("int32", 4),
    "4": ("int64", 8),
    "5": ("float16", 2),
    "6": ("float32", 4),
    "7": ("float64", 8),
    "8": ("complex32", 4),
    "9": ("complex64", 8),
    "10": ("complex128", 16),
    "11": ("bool", 1),
    "15": ("bfloat16", 2),
    "23": ("float8_e5m2", 1),
    "24": ("float8_e4m3fn", 1),
    "25": ("float8_e5m2fnuz", 1),
    "26": ("float8_e4m3fnuz", 1),
    "27": ("uint16", 2),
    "28": ("uint32", 4),
    "29": ("uint64", 8),
    "44": ("float8_e8m0fnu", 1),
    "45": ("float4_e2m1fn_x2", 1),
}

_SHORT_TYPES = {
    "c10::BFloat16": "bf16",
    "c10::Half": "f16",
    "float": "f32",
    "double": "f64",
    "long int": "i64",
    "int": "i32",
    "short int": "i16",
    "bool": "bool",
    "signed char": "i8",
    "unsigned char": "u8",
    "c10::Float8_e4m3fn": "fp8e4m3",
    "c10::Float8_e5m2": "fp8e5m2",
    "c10::Float8_e4m3fnuz": "fp8e4m3fnuz",
    "c10::Float8_e5m2fnuz": "fp8e5m2fnuz",
}
_SHORT_CODES = {
    "bfloat16": "bf16",
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "int64": "i64",
    "int32": "i32",
    "float8_e4m3fn": "fp8e4m3",
    "float8_e5m2": "fp8e5m2",
}

# Device peak memory bandwidth, GB/s (1 GB = 1e9 bytes). First match wins: specific names first.
PEAK_GBPS: tuple[tuple[str, float], ...] = (
    ("H200", 4800.0),
    ("GH200", 4000.0),
    ("H100 PCIE", 2000.0),
    ("H100 NVL", 3900.0),
    ("H100", 3350.0),  # SXM
    ("H800", 3350.0),
    ("GB200", 8000.0),
    ("B200", 8000.0),
    ("B300", 8000.0),
    ("RTX PRO 6000", 1800.0),
    ("A100-SXM4-40GB", 1555.0),
    ("A100-PCIE-40GB", 1555.0),
    ("A100", 2000.0),  # 80GB parts; 40GB ones are caught above or by memory size below
    ("L40S", 864.0),
    ("L4", 300.0),
)

BASIS_SHAPES = "shapes"  # exact: bytes read + written proven by the op's shapes and dtypes
BASIS_ESTIMATE = "estimate"  # each operand read once and the result written once (GEMM, elementwise)
BASIS_DEVICE = "device"  # the memcpy/memset event's own byte count


@dataclass(frozen=True)
class CallBytes:
    """Bytes one op call reads + writes, and how that number was found."""

    bytes: int
    basis: str


def peak_gbps_for(device_name: str | None, total_memory: int | None = None) -> float | None:
    """The device's peak memory bandwidth in GB/s from its name, or None when unknown."""
    if not device_name:
        return None
    upper = device_name.upper()
    if "A100" in upper and total_memory is not None and total_memory < 60 * 2**30:
        return 1555.0
    for needle, peak in PEAK_GBPS:
        if needle in upper:
            return peak
    return None


def numel(dims: Any) -> int | None:
    if not isinstance(dims, list) or not all(isinstance(d, int) for d in dims):
        return None
    return math.prod(dims)


def type_size(type_name: Any) -> int | None:
    return TYPE_SIZES.get(type_name) if isinstance(type_name, str) else None


def target_dtype(args: dict[str, Any], position: int = 1) -> tuple[str, int] | None:
    """The dtype argument of a cast op (``aten::to``/``_to_copy``) from ``Concrete Inputs``."""
    concrete = args.get("Concrete Inputs") or []
    if position < len(concrete) and isinstance(concrete[position], str):
        return DTYPE_CODES.get(concrete[position])
    return None


def short_type(type_name: str) -> str:
    return _SHORT_TYPES.get(type_name, type_name.removeprefix("c10::"))


def tensor_inputs(args: dict[str, Any]) -> list[tuple[list[int], str]]:
    """(dims, type) of each plain tensor input (TensorList inputs expanded), in order; each dims a
    list of ints (its `numel` is not None), so callers take `math.prod` of it."""
    dims_list = args.get("Input Dims") or []
    types = args.get("Input type") or []
    out: list[tuple[list[int], str]] = []
    for dims, type_name in zip(dims_list, types):
        if type_name in ("TensorList", "GenericList") and isinstance(dims, list):
            out.extend((d, "") for d in dims if isinstance(d, list) and d and numel(d) is not None)
        elif type_name in TYPE_SIZES and isinstance(dims, list) and numel(dims) is not None:
            out.append((dims, type_name))
    return out


def describe_shapes(op: str, args: dict[str, Any] | None) -> str:
    """``aten::copy_ bf16[20000,1,64] <- fp8e4m3[20000,1,64]``: an op call's tensor shapes, short."""
    if not args:
        return op
    dims_list = args.get("Input Dims") or []
    types = args.get("Input type") or []
    parts = []
    for dims, type_name in zip(dims_list, types):
        if type_name in TYPE_SIZES and isinstance(dims, list):
            parts.append(f"{short_type(type_name)}[{','.join(str(d) for d in dims)}]")
        elif type_name == "TensorList" and isinstance(dims, list):
            parts.append("[" + ", ".join("[" + ",".join(str(d) for d in t) + "]" for t in dims[:4]) + "]")
    target = target_dtype(args) if op in ("aten::to", "aten::_to_copy") else None
    text = f"{op} " + ", ".join(parts)
    if target is not None:
        text += f" -> {_SHORT_CODES.get(target[0], target[0])}"
    return text


_ELEMENTWISE = re.compile(
    r"^aten::(add|sub|mul|div|neg|silu|gelu|relu|sigmoid|tanh|exp|log|pow|rsqrt|sqrt|cos|sin|abs|clamp|"
    r"where|masked_fill|maximum|minimum|eq|ne|lt|le|gt|ge|bitwise_\w+|logical_\w+|reciprocal|softplus|"
    r"fill|zero|mean|sum|softmax|_softmax|rms_norm|_fused_rms_norm|layer_norm|native_layer_norm)_?$"
)


def call_bytes(op: str, args: dict[str, Any] | None, kernel: str = "") -> CallBytes | None:
    """Bytes read + written by one call of ``op`` with these args; None when the shapes cannot say.

    ``kernel`` (the launched kernel's name) supplies the element size where the op's args lack it
    (``aten::cat`` records a TensorList without dtypes; its kernel says ``OpaqueType<2u>``).
    """
    if not args:
        return None
    if op == "aten::copy_":
        return _copy_bytes(args)
    if op in ("aten::_to_copy", "aten::to"):
        return _cast_bytes(args)
    if op in ("aten::clone", "aten::contiguous"):
        inputs = tensor_inputs(args)
        if inputs and (size := type_size(inputs[0][1])):
            return CallBytes(2 * math.prod(inputs[0][0]) * size, BASIS_SHAPES)
        return None
    if op in ("aten::cat", "aten::stack"):
        return _cat_bytes(args, kernel)
    if op == "aten::index_select":
        return _index_select_bytes(args)
    if op in ("aten::gather", "aten::embedding"):
        return _gather_bytes(op, args)
    if op in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"):
        return _gemm_bytes(op, args)
    if _ELEMENTWISE.match(op):
        return _elementwise_bytes(args)
    if _INDUCTOR_KERNEL.match(op):
        return _kernel_buffer_bytes(args)
    return None


# A kernel Inductor generated, recorded as an op of its own name (Triton: "triton_poi_fused_mul_0";
# C++ with cpp.enable_kernel_profile: "graph_0_cpp_fused_mul_0"): its args are the buffers it uses.
_INDUCTOR_KERNEL = re.compile(r"^(triton_|graph_\d+_cpp_|cpp_fused_)")


def _kernel_buffer_bytes(args: dict[str, Any]) -> CallBytes | None:
    """A fused kernel's launch passes every buffer it reads or writes once: each counted once (an
    in-place buffer, read and written, once too), as Inductor's own bandwidth estimate does."""
    inputs = tensor_inputs(args)
    if not inputs:
        return None
    total = 0
    for dims, type_name in inputs:
        size, count = type_size(type_name), numel(dims)
        if size is None or count is None:
            return None
        total += count * size
    return CallBytes(total, BASIS_ESTIMATE)


def _copy_bytes(args: dict[str, Any]) -> CallBytes | None:
    inputs = tensor_inputs(args)
    if len(inputs) < 2:
        return None
    (dst, dst_type), (src, src_type) = inputs[0], inputs[1]
    dst_size, src_size = type_size(dst_type), type_size(src_type)
    if dst_size is None or src_size is None:
        return None
    return CallBytes(math.prod(dst) * dst_size + math.prod(src) * src_size, BASIS_SHAPES)


def _cast_bytes(args: dict[str, Any]) -> CallBytes | None:
    inputs = tensor_inputs(args)
    if not inputs:
        return None
    dims, type_name = inputs[0]
    in_size = type_size(type_name)
    if in_size is None:
        return None
    target = target_dtype(args)
    out_size = target[1] if target is not None else in_size
    return CallBytes(math.prod(dims) * (in_size + out_size), BASIS_SHAPES)


_OPAQUE = re.compile(r"OpaqueType<(\d+)u?>")


def _cat_bytes(args: dict[str, Any], kernel: str) -> CallBytes | None:
    types = args.get("Input type") or []
    dims_list = args.get("Input Dims") or []
    match = _OPAQUE.search(kernel)
    if not types or types[0] != "TensorList" or not dims_list or match is None:
        return None  # a TensorList carries no dtype; without the kernel's element size, don't guess
    size = int(match.group(1))
    elements = sum(numel(d) or 0 for d in dims_list[0] if isinstance(d, list))
    return CallBytes(2 * elements * size, BASIS_SHAPES)


def _index_select_bytes(args: dict[str, Any]) -> CallBytes | None:
    dims_list = args.get("Input Dims") or []
    types = args.get("Input type") or []
    if len(dims_list) < 3 or not types or (size := type_size(types[0])) is None:
        return None
    source, index = dims_list[0], dims_list[2]
    k = numel(index)
    if not source or k is None or numel(source) is None:
        return None
    dim = _int_arg(args, 1, default=0)
    rest = math.prod(d for i, d in enumerate(source) if i != dim % len(source))
    return CallBytes(k * rest * size * 2 + k * 8, BASIS_SHAPES)


def _gather_bytes(op: str, args: dict[str, Any]) -> CallBytes | None:
    dims_list = args.get("Input Dims") or []
    types = args.get("Input type") or []
    if len(dims_list) < 2 or not types or (size := type_size(types[0])) is None:
        return None
    if op == "aten::embedding":
        weight, indices = dims_list[0], dims_list[1]
        count = numel(indices)
        if count is None or not weight or numel(weight) is None:
            return None
        row = math.prod(weight[1:])
        return CallBytes(count * row * size * 2 + count * 8, BASIS_SHAPES)
    index = dims_list[2] if len(dims_list) > 2 else None
    count = numel(index)
    if count is None:
        return None
    return CallBytes(count * (size * 2 + 8), BASIS_SHAPES)


def _gemm_bytes(op: str, args: dict[str, Any]) -> CallBytes | None:
    inputs = [(d, t) for d, t in tensor_inputs(args) if len(d) >= 1]
    mats = [(d, t) for d, t in inputs if len(d) >= 2]
    if len(mats) < 2:
        return None
    (a, a_type), (b, b_type) = mats[-2], mats[-1]
    size_a, size_b = type_size(a_type), type_size(b_type)
    if size_a is None or size_b is None:
        return None
    if op == "aten::linear":  # weight is (N, K)
        m_rows, n_cols = math.prod(a[:-1]), b[0]
    else:
        m_rows, n_cols = math.prod(a[:-1]), b[-1]
    total = math.prod(a) * size_a + math.prod(b) * size_b + m_rows * n_cols * size_a
    total += sum(math.prod(d) * (type_size(t) or 0) for d, t in inputs if (d, t) not in mats)  # bias
    return CallBytes(total, BASIS_ESTIMATE)


def _elementwise_bytes(args: dict[str, Any]) -> CallBytes | None:
    inputs = tensor_inputs(args)
    if not inputs:
        return None
    reads = 0
    for dims, type_name in inputs:
        size = type_size(type_name)
        if size is None:
            return None
        reads += math.prod(dims) * size
    out_dims = _broadcast([d for d, _ in inputs])
    out_size = type_size(inputs[0][1]) or 0
    return CallBytes(reads + math.prod(out_dims) * out_size, BASIS_ESTIMATE)


def _broadcast(shapes: Sequence[list[int]]) -> list[int]:
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for shape in shapes:
        for i, d in enumerate(reversed(shape)):
            out[rank - 1 - i] = max(out[rank - 1 - i], d)
    return out


def _int_arg(args: dict[str, Any], position: int, default: int) -> int:
    concrete = args.get("Concrete Inputs") or []
    try:
        return int(concrete[position])
    except (IndexError, TypeError, ValueError):
        return default


def human_bytes(count: float) -> str:
    """``1.1 GB``, ``640 KB``: decimal units, as bandwidth is quoted (`tracer.formatting`, as every
    output writes bytes)."""
    from tracer.formatting import format_bytes

    return format_bytes(count)
