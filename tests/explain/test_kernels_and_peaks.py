"""Kernel categories and short names on the real kernel names of the H200 fixtures; device peaks."""

from __future__ import annotations

import pytest

from tracer.explain.bandwidth import peak_gbps_for
from tracer.explain.kernels import categorise, shorten
from tracer.load import load_trace
from tracer.model.events import Cat


@pytest.fixture(scope="module")
def kernel_names(shared_gpu_traces) -> set[str]:
    names: set[str] = set()
    for path in sorted(shared_gpu_traces.glob("*.json.gz")):
        table = load_trace(path).events
        names |= {table.name[r] for r, c in enumerate(table.cat) if c == Cat.KERNEL}
    return names


def _one(names: set[str], *needles: str) -> str:
    return next(n for n in sorted(names) if all(needle in n for needle in needles))


@pytest.mark.parametrize(
    ("needles", "short", "category"),
    [
        (
            ("unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda", "lambda(float)"),
            "unrolled_elementwise_kernel<direct_copy_kernel_cuda>",
            "cast/copy",
        ),
        (
            ("vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda",),
            "vectorized_elementwise_kernel<bfloat16_copy_kernel_cuda>",
            "cast/copy",
        ),
        (("CatArrayBatchedCopy<",), "CatArrayBatchedCopy", "cast/copy"),
        (
            ("index_elementwise_kernel", "index_kernel_impl"),
            "index_elementwise_kernel<index_kernel_impl>",
            "cast/copy",
        ),
        (
            (
                "elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16",
                "MulFunctor",
            ),
            "elementwise_kernel<MulFunctor>",
            "other",
        ),
        (("reduce_kernel<512, 1", "MeanOps"), "reduce_kernel<MeanOps>", "other"),
        (("nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT",), "nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT", "gemm"),
        (("_ZN7cutlass13device_kernel", "GemmUniversal"), "device_kernel<GemmUniversal>", "gemm"),
        (("cublasLt::splitKreduce_kernel",), "splitKreduce_kernel", "gemm"),
        (("cudnn_generated_fort_native_sdpa_sm90_flash",), None, "attention"),
    ],
)
def test_real_kernel_names(kernel_names, needles, short, category):
    name = _one(kernel_names, *needles)
    if short is not None:
        assert shorten(name) == short
    assert len(shorten(name)) <= 80
    assert categorise(name) == category


def test_copy_kernels_of_other_families_follow_their_op():
    # A plain elementwise kernel launched by aten::copy_ is a copy; by aten::mul it is not.
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float>>(int)"
    assert categorise(name, ("aten::to", "aten::_to_copy", "aten::copy_")) == "cast/copy"
    assert categorise(name, ("aten::mul",)) == "other"
    assert (
        categorise("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
        == "communication"
    )
    assert categorise("Memcpy DtoD (Device -> Device)", is_memcpy=True) == "memcpy"


@pytest.mark.parametrize(
    ("device", "memory", "peak"),
    [
        ("NVIDIA H200", None, 4800.0),
        ("NVIDIA H100 80GB HBM3", None, 3350.0),
        ("NVIDIA B200", None, 8000.0),
        ("NVIDIA A100-SXM4-80GB", None, 2000.0),
        ("NVIDIA A100-SXM4-40GB", None, 1555.0),
        ("NVIDIA A100-PCIE", 40 * 2**30, 1555.0),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", None, 1800.0),
        ("Some Future GPU", None, None),
        (None, None, None),
    ],
)
def test_peak_bandwidth_table(device, memory, peak):
    assert peak_gbps_for(device, memory) == peak
