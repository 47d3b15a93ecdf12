"""Kernel names: sort each GPU kernel (or CPU op) into a category and shorten its C++ name readably."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

# Ops whose kernels move or convert data rather than compute (the founding case's family).
COPY_OPS = frozenset(
    {
        "aten::copy_",
        "aten::_to_copy",
        "aten::to",
        "aten::clone",
        "aten::contiguous",
        "aten::cat",
        "aten::stack",
        "aten::index",
        "aten::index_select",
        "aten::index_put_",
        "aten::_index_put_impl_",
        "aten::gather",
        "aten::embedding",
        "aten::take",
        "aten::repeat",
        "aten::repeat_interleave",
        "aten::_unsafe_index",
    }
)
GEMM_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::matmul",
        "aten::linear",
        "aten::_scaled_mm",
        "aten::_grouped_mm",
        "aten::einsum",
    }
)
ATTENTION_OPS = frozenset(
    {
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_flash_attention_forward",
        "aten::_efficient_attention_forward",
        "aten::_cudnn_attention_forward",
    }
)

_COMMUNICATION = re.compile(
    r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce|c10d::", re.IGNORECASE
)
_ATTENTION = re.compile(
    r"flash|fmha|attention|attn|flashinfer|(?<![a-z])mla|sdpa|paged_?kv|decode_?kernel", re.IGNORECASE
)
_GEMM = re.compile(
    r"gemm|gemv|cutlass|xmma|nvjet|cublas|splitkreduce|(?<![a-z])dot_kernel|matmul|wgmma|hgmma|deep_?gemm",
    re.IGNORECASE,
)
_COPY = re.compile(
    r"copy_kernel|direct_copy|CatArrayBatchedCopy|index_elementwise_kernel|indexSelect|index_select|"
    r"gather_kernel|scatter_gather|_to_copy|concat|transpose_kernel|permute_kernel",
    re.IGNORECASE,
)


def categorise(
    name: str, ops: Sequence[str] = (), *, is_memcpy: bool = False, is_memset: bool = False
) -> str:
    """One of `tracer.model.finding.CATEGORIES` for a kernel (or CPU op) name and its launching op chain."""
    if is_memcpy or name.startswith("Memcpy"):
        return "memcpy"
    if is_memset or name.startswith("Memset"):
        return "memset"
    innermost = ops[-1] if ops else name
    if _COMMUNICATION.search(name) or any(_COMMUNICATION.search(op) for op in ops):
        return "communication"
    if _ATTENTION.search(name) or innermost in ATTENTION_OPS or name in ATTENTION_OPS:
        return "attention"
    if _GEMM.search(name) or innermost in GEMM_OPS or name in GEMM_OPS:
        return "gemm"
    if _COPY.search(name) or innermost in COPY_OPS or name in COPY_OPS:
        return "cast/copy"
    return "other"


# Template wrappers that say nothing on their own: look inside them for the functor that does the work.
_WRAPPERS = frozenset(
    {
        "gpu_kernel_impl",
        "gpu_kernel_impl_nocast",
        "BinaryFunctor",
        "AUnaryFunctor",
        "BUnaryFunctor",
        "func_wrapper_t",
        "ReduceOp",
        "gpu_index_kernel",
        "enable_3x_kernel_for_sm9x",
        "enable_sm90_or_later",
    }
)
_TYPE_WORDS = re.compile(
    r"^(?:c10::\w+|float|double|half|bool|char|short|int|long|unsigned( \w+)?|signed( \w+)?|long long|"
    r"__nv_\w+|cutlass::(?:bfloat16_t|half_t|float_e4m3_t|float_e5m2_t)|std::\w+.*|at::native::OpaqueType<.*|"
    r"OpaqueType<.*|TrivialOffsetCalculator<.*|OffsetCalculator<.*|at::native::memory::\w+.*|"
    r"[-\d]+[ul]*|true|false|\(.*\)\d+|cute::.*|at::cuda::detail::.*)$"
)
_MAX_SHORT = 80
_OP_NAME = re.compile(r"^\w+::\w+$")


@lru_cache(maxsize=4096)
def shorten(name: str) -> str:
    """A readable kernel name: namespaces, argument lists and type parameters dropped, the functor kept.

    ``void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(...)::{lambda()#3}
    ...>(...)`` becomes ``unrolled_elementwise_kernel<direct_copy_kernel_cuda>``.
    """
    text = name.strip()
    if _OP_NAME.match(text):  # a CPU op (CPU-only traces): "aten::copy_" is already short
        return text
    if text.startswith("_Z"):
        text = _demangled_prefix(text)
    text = text.removeprefix("void ").replace("(anonymous namespace)::", "")
    head, template = _split_template(text)
    base = _last_component(head)
    if not base:
        return _clip(text)
    functor = _functor(template) if template is not None else None
    return _clip(f"{base}<{functor}>" if functor else base)


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_SHORT else text[: _MAX_SHORT - 1] + "…"


def _split_template(text: str) -> tuple[str, str | None]:
    """``ns::name<args>(params)`` -> (``ns::name``, ``args``); (``text``, None) without a template."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == "(" and depth == 0:
            return text[:i], None
        if ch == "<":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                return text[:start], text[start + 1 : i]
    return text, None


def _last_component(qualified: str) -> str:
    return qualified.strip().split("::")[-1].strip()


def _template_args(args: str) -> list[str]:
    """Top-level comma-separated arguments of a template argument list."""
    out: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in args:
        if ch in "<({[":
            depth += 1
        elif ch in ">)}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if current:
        out.append("".join(current).strip())
    return out


def _functor(template: str, depth: int = 0) -> str | None:
    """The first informative name among template arguments, looking through wrapper templates."""
    if depth > 6:
        return None
    for arg in _template_args(template):
        if not arg or _TYPE_WORDS.match(arg):
            continue
        head, inner = _split_template(arg)
        # `direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::...` names its function first.
        head = head.split("(")[0]
        name = _last_component(head)
        if not name or name[0].isdigit() or name.startswith("{"):
            continue
        if name in _WRAPPERS and inner is not None:
            found = _functor(inner, depth + 1)
            if found:
                return found
            continue
        if name in ("OpaqueType", "TensorInfo", "array"):
            continue
        return name
    return None


_LENGTH = re.compile(r"(\d+)")  # Itanium names are <length><identifier> runs
_NOTABLE = re.compile(r"Gemm|Fmha|Attention|Flash")


def _demangled_prefix(mangled: str) -> str:
    """Best-effort readable head of an Itanium-mangled name: its nested name and a Gemm-ish word in it.

    ``_ZN7cutlass13device_kernelIN2at4cuda...GemmUniversal...`` -> ``cutlass::device_kernel<GemmUniversal>``.
    """
    pos = 3 if mangled.startswith("_ZN") else 2
    parts: list[str] = []
    while pos < len(mangled):
        match = _LENGTH.match(mangled, pos)
        if match is None:
            break
        length = int(match.group(1))
        start = match.end()
        parts.append(mangled[start : start + length])
        pos = start + length
    head = "::".join(parts) if parts else mangled[:40]
    for match in _LENGTH.finditer(mangled):
        length = int(match.group(1))
        word = mangled[match.end() : match.end() + length]
        if len(word) == length and word.isidentifier() and _NOTABLE.search(word):
            return f"{head}<{word}>"
    return head
