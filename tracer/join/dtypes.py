"""Dtypes as traces spell them: c10 ScalarType codes in ``Concrete Inputs``, C++ names in ``Input type``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# c10::ScalarType order (c10/core/ScalarType.h), checked by profiling `.to(dtype)` on torch 2.14.1.
SCALAR_TYPE_CODES: dict[str, str] = {
    "0": "torch.uint8",
    "1": "torch.int8",
    "2": "torch.int16",
    "3": "torch.int32",
    "4": "torch.int64",
    "5": "torch.float16",
    "6": "torch.float32",
    "7": "torch.float64",
    "8": "torch.complex32",
    "9": "torch.complex64",
    "10": "torch.complex128",
    "11": "torch.bool",
    "15": "torch.bfloat16",
    "23": "torch.float8_e5m2",
    "24": "torch.float8_e4m3fn",
    "25": "torch.float8_e5m2fnuz",
    "26": "torch.float8_e4m3fnuz",
    "27": "torch.uint16",
    "28": "torch.uint32",
    "29": "torch.uint64",
    "44": "torch.float8_e8m0fnu",
}

# ``Input type`` strings (C++ type names) -> torch dtype names.
INPUT_TYPE_NAMES: dict[str, str] = {
    "unsigned char": "torch.uint8",
    "signed char": "torch.int8",
    "short int": "torch.int16",
    "short": "torch.int16",
    "int": "torch.int32",
    "long int": "torch.int64",
    "long": "torch.int64",
    "c10::Half": "torch.float16",
    "float": "torch.float32",
    "double": "torch.float64",
    "c10::complex<c10::Half>": "torch.complex32",
    "c10::complex<float>": "torch.complex64",
    "c10::complex<double>": "torch.complex128",
    "bool": "torch.bool",
    "c10::BFloat16": "torch.bfloat16",
    "c10::Float8_e5m2": "torch.float8_e5m2",
    "c10::Float8_e4m3fn": "torch.float8_e4m3fn",
    "c10::Float8_e5m2fnuz": "torch.float8_e5m2fnuz",
    "c10::Float8_e4m3fnuz": "torch.float8_e4m3fnuz",
    "c10::Float8_e8m0fnu": "torch.float8_e8m0fnu",
    "short unsigned int": "torch.uint16",
    "unsigned int": "torch.uint32",
    "long unsigned int": "torch.uint64",
}

# What a method call casts to, when the method names its dtype.
METHOD_DTYPES: dict[str, str] = {
    "float": "torch.float32",
    "half": "torch.float16",
    "bfloat16": "torch.bfloat16",
    "double": "torch.float64",
    "int": "torch.int32",
    "long": "torch.int64",
    "short": "torch.int16",
    "bool": "torch.bool",
    "byte": "torch.uint8",
    "char": "torch.int8",
}

_DTYPE_ALIASES = {
    "torch.float": "torch.float32",
    "torch.half": "torch.float16",
    "torch.double": "torch.float64",
    "torch.long": "torch.int64",
    "torch.int": "torch.int32",
    "torch.short": "torch.int16",
    "torch.cfloat": "torch.complex64",
    "torch.cdouble": "torch.complex128",
}


def canonical_dtype(text: str | None) -> str | None:
    """``"torch.float"`` -> ``"torch.float32"``; an expression (``"q.dtype"``) -> None."""
    if not text or not text.startswith("torch."):
        return None
    return _DTYPE_ALIASES.get(text, text)


COPY_OPS = ("aten::copy_", "aten::_to_copy")  # the ops whose dtypes `copy_dtypes` reads


def copy_dtypes(op_name: str, args: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(target, source) dtypes of a copying op, from its recorded inputs; (None, None) if unknown."""
    if not args:
        return None, None
    types: Sequence[Any] = args.get("Input type") or ()
    if op_name == "aten::copy_" and len(types) >= 2:
        return INPUT_TYPE_NAMES.get(types[0]), INPUT_TYPE_NAMES.get(types[1])
    if op_name == "aten::_to_copy":
        concrete: Sequence[Any] = args.get("Concrete Inputs") or ()
        target = SCALAR_TYPE_CODES.get(concrete[1]) if len(concrete) > 1 else None
        return target, INPUT_TYPE_NAMES.get(types[0]) if types else None
    return None, None
