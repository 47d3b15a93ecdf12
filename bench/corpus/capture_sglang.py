"""Record real SGLang modules that run on CPU (sglang==0.5.23, installed with --no-deps).

    python3 -m bench.corpus.capture_sglang --out tests/fixtures/corpus/sglang [--cases norms,kv_pool]

Each case calls SGLang's own code (torch-native paths: `forward_native`, the torch-native attention
backend, the memory pools, native MoE and sampling); the step functions here only call it, so ops
made directly in this file have no truth (it is the recorder's harness) and are left out.
Writes ``OUT/torch<major.minor>/<case>.json.gz`` and ``.truth.json``.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script: import from the repository, not from this folder
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
    sys.path.insert(0, str(REPO))

import torch

from bench.corpus.capture_zoo import pick, print_recording, torch_tag
from bench.corpus.recorder import Workload, record

HEADS, HEAD_DIM, LAYERS, POOL_TOKENS = 4, 16, 2, 256
WARMUP, PROFILED = 1, 3
STEPS = WARMUP + PROFILED  # inputs are made per step in build(): the steps only call SGLang


class _Unavailable:
    """A torchvision attribute on a CPU-only torch: exists, and raises when used."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args, **kwargs):
        raise ImportError(f"{self._name}: torchvision is not installed (stand-in)")

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Unavailable(f"{self._name}.{attribute}")


class _TorchvisionStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """SGLang imports torchvision at package level (multimodal preprocessing, never run here); its
    CUDA wheels do not load on a CPU torch. Same stand-in as tests/plugins/conftest.py."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0"

        def attribute(name: str):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Unavailable(f"{spec.name}.{name}")

        module.__getattr__ = attribute
        return module

    def exec_module(self, module) -> None:
        pass


def make_sglang_importable() -> None:
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - missing, or a CUDA build that cannot load
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        sys.meta_path.insert(0, _TorchvisionStandIn())


def sglang_source(name: str) -> Path | None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))).parent / name
    return path if path.is_file() else None


# -- the cases: build(device) -> step(i) --------------------------------------------------------


def build_norms(device: torch.device):
    """RMSNorm and GemmaRMSNorm `forward_native`, with and without a residual, bf16 activations."""
    from sglang.srt.layers.layernorm import GemmaRMSNorm, RMSNorm

    norm, gemma = RMSNorm(64).to(device), GemmaRMSNorm(64).to(device)
    x = torch.randn(6, 64, device=device, dtype=torch.bfloat16)
    residual = torch.randn(6, 64, device=device, dtype=torch.bfloat16)

    def step(i: int):
        if i % 2:
            out, res = norm.forward_native(x, residual)
            return gemma.forward_native(out, res)
        return gemma.forward_native(norm.forward_native(x))

    return step


def build_activations(device: torch.device):
    """SiluAndMul and GeluAndMul `forward_native`."""
    from sglang.srt.layers.activation import GeluAndMul, SiluAndMul

    silu, gelu = SiluAndMul(), GeluAndMul()
    x = torch.randn(6, 128, device=device, dtype=torch.bfloat16)

    def step(i: int):
        return silu.forward_native(x), gelu.forward_native(x)

    return step


def build_rotary(device: torch.device):
    """`get_rope(...)`'s RotaryEmbedding `forward_native` on flattened q/k, positions per step."""
    from sglang.srt.layers.rotary_embedding import base, get_rope

    # The constructor picks vllm's kernel unless SGLang runs its CPU engine (SGLANG_USE_CPU_ENGINE=1,
    # read once at import): say so, for this module only; forward_native is called directly anyway.
    base._is_cpu = True
    rope = get_rope(HEAD_DIM, HEAD_DIM, 128, 10000, is_neox_style=True, dtype=torch.bfloat16).to(device)
    steps = [
        (
            torch.arange(i, i + 5, device=device),
            torch.randn(5, HEADS * HEAD_DIM, device=device, dtype=torch.bfloat16),
            torch.randn(5, 2 * HEAD_DIM, device=device, dtype=torch.bfloat16),
        )
        for i in range(STEPS)
    ]

    def step(i: int):
        return rope.forward_native(*steps[i])

    return step


def _layer(layer_id: int):
    from sglang.srt.layers.radix_attention import RadixAttention

    return RadixAttention(HEADS, HEAD_DIM, scaling=HEAD_DIM**-0.5, num_kv_heads=HEADS, layer_id=layer_id)


def build_kv_pool(device: torch.device):
    """MHATokenToKVPool in FP8 (e4m3): `set_kv_buffer` casts bf16 K/V in, `get_key_buffer`/
    `get_value_buffer` view them back; then the caller's gather."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    pool = MHATokenToKVPool(
        size=POOL_TOKENS, page_size=1, dtype=torch.float8_e4m3fn, head_num=HEADS, head_dim=HEAD_DIM,
        layer_num=LAYERS, device=str(device), enable_memory_saver=False,
    )  # fmt: skip
    layers = [_layer(i) for i in range(LAYERS)]
    k = torch.randn(3, HEADS, HEAD_DIM, device=device, dtype=torch.bfloat16)
    v = torch.randn(3, HEADS, HEAD_DIM, device=device, dtype=torch.bfloat16)

    locs = [torch.tensor([i + 1, i + 9, i + 40], device=device) for i in range(STEPS)]

    def step(i: int):
        loc = locs[i]
        outs = []
        for layer in layers:
            pool.set_kv_buffer(layer, loc, k, v)
            outs.append(pool.get_key_buffer(layer.layer_id))
            outs.append(pool.get_value_buffer(layer.layer_id))
        return outs

    return step


class _Runner:
    """The three ModelRunner attributes `TorchNativeAttnBackend.__init__` reads."""

    def __init__(self, device: str, req_to_token_pool, token_to_kv_pool) -> None:
        self.device = device
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool = token_to_kv_pool


def _attention_setup(device: torch.device, batch: int):
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    generator = torch.Generator().manual_seed(0)
    kv_pool = MHATokenToKVPool(
        size=POOL_TOKENS, page_size=1, dtype=torch.bfloat16, head_num=HEADS, head_dim=HEAD_DIM,
        layer_num=LAYERS, device=str(device), enable_memory_saver=False,
    )  # fmt: skip
    req_pool = ReqToTokenPool(size=batch, max_context_len=64, device=str(device), enable_memory_saver=False)
    slots = torch.randperm(POOL_TOKENS - 1, generator=generator)[: batch * 64] + 1
    req_pool.req_to_token[:batch, :] = slots.view(batch, 64).to(torch.int32).to(device)
    for layer_id in range(LAYERS):
        history = torch.randn(POOL_TOKENS + 1, HEADS, HEAD_DIM, generator=generator).to(torch.bfloat16)
        kv_pool.k_buffer[layer_id].copy_(history.to(device))
        kv_pool.v_buffer[layer_id].copy_(history.flip(0).to(device))
    backend = TorchNativeAttnBackend(_Runner(str(device), req_pool, kv_pool))
    return backend, req_pool, kv_pool, [_layer(i) for i in range(LAYERS)]


def build_attention_decode(device: torch.device):
    """Decode steps through `RadixAttention.forward` -> the torch-native backend's `forward_decode`
    (SDPA per request over the pool, `set_kv_buffer` of the new token)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    batch = 2
    backend, req_pool, _, layers = _attention_setup(device, batch)
    qkv = torch.randn(batch, 3, HEADS * HEAD_DIM, device=device, dtype=torch.bfloat16)

    def decode_batch(i: int) -> ForwardBatch:
        seq_len = 16 + i
        return ForwardBatch(
            forward_mode=ForwardMode.DECODE,
            batch_size=batch,
            input_ids=torch.zeros(batch, dtype=torch.long, device=device),
            req_pool_indices=torch.arange(batch, device=device),
            seq_lens=torch.full((batch,), seq_len, device=device),
            out_cache_loc=req_pool.req_to_token[:batch, seq_len - 1].long(),
            seq_lens_sum=batch * seq_len,
            seq_lens_cpu=torch.full((batch,), seq_len),
        )

    batches = [decode_batch(i) for i in range(STEPS)]
    q, k, v = qkv.unbind(dim=1)

    def step(i: int):
        forward_batch = batches[i]
        backend.init_forward_metadata(forward_batch)
        out = q
        with forward_context(ForwardContext(attn_backend=backend), forward_batch=forward_batch):
            for layer in layers:
                out = layer.forward(out, k, v, forward_batch)
        return out

    return step


def build_attention_extend(device: torch.device):
    """Prefill/extend through `RadixAttention.forward` -> `forward_extend` (a prefix in the pool,
    new tokens written with `set_kv_buffer`, causal SDPA per request)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    batch = 2
    backend, req_pool, _, layers = _attention_setup(device, batch)

    new = 3
    tokens = batch * new

    def extend_batch(i: int) -> ForwardBatch:
        prefix = 4 + i
        seq_len = prefix + new
        return ForwardBatch(
            forward_mode=ForwardMode.EXTEND,
            batch_size=batch,
            input_ids=torch.zeros(tokens, dtype=torch.long, device=device),
            req_pool_indices=torch.arange(batch, device=device),
            seq_lens=torch.full((batch,), seq_len, device=device),
            out_cache_loc=req_pool.req_to_token[:batch, prefix:seq_len].reshape(-1).long(),
            seq_lens_sum=batch * seq_len,
            seq_lens_cpu=torch.full((batch,), seq_len),
            extend_prefix_lens=torch.full((batch,), prefix, device=device),
            extend_prefix_lens_cpu=[prefix] * batch,
            extend_seq_lens=torch.full((batch,), new, device=device),
            extend_seq_lens_cpu=[new] * batch,
            extend_num_tokens=tokens,
        )

    batches = [extend_batch(i) for i in range(STEPS)]
    qs = [torch.randn(tokens, HEADS * HEAD_DIM, device=device, dtype=torch.bfloat16) for _ in range(STEPS)]

    def step(i: int):
        forward_batch, q = batches[i], qs[i]
        backend.init_forward_metadata(forward_batch)
        out = q
        with forward_context(ForwardContext(attn_backend=backend), forward_batch=forward_batch):
            for layer in layers:
                out = layer.forward(out, q, q, forward_batch)
        return out

    return step


def build_moe(device: torch.device):
    """Native MoE: `fused_topk_torch_native` routing, then `moe_forward_native` (a loop over the
    experts that got tokens, SiluAndMul, the weighted sum)."""
    from sglang.srt.layers.moe.fused_moe_native import moe_forward_native
    from sglang.srt.layers.moe.moe_runner import MoeRunnerConfig
    from sglang.srt.layers.moe.topk import StandardTopKOutput, fused_topk_torch_native

    experts, hidden, inter = 4, 32, 16
    layer = types.SimpleNamespace(
        num_experts=experts,
        w13_weight=torch.randn(experts, 2 * inter, hidden, device=device, dtype=torch.bfloat16) * 0.1,
        w2_weight=torch.randn(experts, hidden, inter, device=device, dtype=torch.bfloat16) * 0.1,
    )
    config = MoeRunnerConfig(activation="silu")
    batches = [torch.randn(n, hidden, device=device, dtype=torch.bfloat16) for n in (3, 5, 2, 4)]
    gates = [torch.randn(x.shape[0], experts, device=device, dtype=torch.bfloat16) for x in batches]

    def step(i: int):
        x, gate = batches[i % 4], gates[i % 4]
        weights, ids = fused_topk_torch_native(x, gate, topk=2, renormalize=bool(i % 2))
        return moe_forward_native(layer, x, StandardTopKOutput(weights, ids, gate), config)

    return step


def build_sampling(device: torch.device):
    """`top_k_top_p_min_p_sampling_from_probs_torch` with and without min-p, and `top_p_normalize`."""
    from sglang.srt.layers.sampler import (
        top_k_top_p_min_p_sampling_from_probs_torch,
        top_p_normalize_probs_torch,
    )

    probs = torch.softmax(torch.randn(3, 64, device=device), dim=-1)
    top_ks = torch.tensor([5, 10, 64], device=device)
    top_ps = torch.tensor([0.9, 0.5, 1.0], device=device)
    min_ps = torch.tensor([0.0, 0.05, 0.1], device=device)
    positions = torch.arange(3, device=device)

    def step(i: int):
        ids = top_k_top_p_min_p_sampling_from_probs_torch(
            probs, top_ks, top_ps, min_ps, bool(i % 2), None, positions
        )
        return ids, top_p_normalize_probs_torch(probs, top_ps)

    return step


def build_fp8_helpers(device: torch.device):
    """fp8_utils on CPU: `input_to_float8` (per-tensor), `block_quant_to_tensor_quant` (dequantise
    tiles in a double loop, requantise), `block_quant_dequant` (repeat_interleave of the scales)."""
    from sglang.srt.layers.quantization.fp8_utils import (
        block_quant_dequant,
        block_quant_to_tensor_quant,
        input_to_float8,
    )

    x = torch.randn(8, 32, device=device, dtype=torch.bfloat16)
    weight_q = (torch.randn(32, 32, device=device) * 8).to(torch.float8_e4m3fn)
    scales = torch.rand(2, 2, device=device) + 0.5

    def step(i: int):
        if i % 2:
            return block_quant_to_tensor_quant(weight_q, scales, [16, 16])
        return input_to_float8(x), block_quant_dequant(weight_q, scales, [16, 16], torch.bfloat16)

    return step


def build_unquant_linear(device: torch.device):
    """`UnquantizedLinearMethod.apply` (the quantization method of unquantized layers) and
    `UnquantizedEmbeddingMethod.embedding`."""
    from sglang.srt.layers.quantization.unquant import UnquantizedEmbeddingMethod, UnquantizedLinearMethod

    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(
        torch.randn(16, 32, device=device, dtype=torch.bfloat16), requires_grad=False
    )
    linear, embedding = UnquantizedLinearMethod(), UnquantizedEmbeddingMethod()
    x = torch.randn(4, 32, device=device, dtype=torch.bfloat16)
    ids = torch.tensor([1, 3, 5], device=device)
    bias = torch.randn(16, device=device, dtype=torch.bfloat16)

    def step(i: int):
        return linear.apply(layer, x, bias if i % 2 else None), embedding.embedding(layer, ids)

    return step


CASES: dict[str, tuple[Callable[[torch.device], Callable[[int], Any]], str]] = {
    "norms": (build_norms, "layernorm.RMSNorm / GemmaRMSNorm.forward_native, with and without residual"),
    "activations": (build_activations, "activation.SiluAndMul / GeluAndMul.forward_native"),
    "rotary": (build_rotary, "rotary_embedding get_rope(...).forward_native"),
    "kv_pool": (build_kv_pool, "memory_pool.MHATokenToKVPool (fp8 e4m3) set_kv_buffer / get_key_buffer / get_value_buffer"),
    "attention_decode": (build_attention_decode, "RadixAttention -> TorchNativeAttnBackend.forward_decode over MHATokenToKVPool"),
    "attention_extend": (build_attention_extend, "RadixAttention -> TorchNativeAttnBackend.forward_extend over MHATokenToKVPool"),
    "moe_native": (build_moe, "moe.topk.fused_topk_torch_native + moe.fused_moe_native.moe_forward_native"),
    "fp8_helpers": (build_fp8_helpers, "quantization.fp8_utils input_to_float8, block_quant_to_tensor_quant, block_quant_dequant"),
    "unquant_linear": (build_unquant_linear, "quantization.unquant UnquantizedLinearMethod.apply, UnquantizedEmbeddingMethod.embedding"),
    "sampling": (build_sampling, "sampler.top_k_top_p_min_p_sampling_from_probs_torch, top_p_normalize_probs_torch"),
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cases", help="comma-separated (default: all)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    make_sglang_importable()
    import sglang

    device = torch.device(args.device)
    torch.set_num_threads(1)
    out = args.out / torch_tag()
    for name in pick(args.cases, CASES):
        build, about = CASES[name]
        workload = Workload(
            name=name, build=build, steps=PROFILED, warmup=WARMUP, about=f"sglang {sglang.__version__}: {about}",
            extra={"family": "sglang", "group": name, "sglang": sglang.__version__},
        )  # fmt: skip
        rec = record(
            workload,
            out,
            device=device,
            source_roots=[f"package:sglang=={sglang.__version__}"],
            find_source=sglang_source,
        )
        print_recording(rec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
