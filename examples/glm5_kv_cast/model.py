"""A GLM-5-shaped MLA + MoE decode model whose attention backend casts the FP8 KV pool to BF16.

The founding case of kerneltrace: under SGLang, an MLA attention backend ran
`get_key_buffer(layer_id).to(q.dtype)` on every layer of every decode step, converting the whole
FP8 KV-cache pool (every slot of every request, ~495k tokens) to BF16 before indexing the few
thousand live tokens. Variant "cast_whole" reproduces that; "gather_then_cast" is the fix.
Pure torch, random seeded weights, no record_function ranges (the tool adds its own).

Every step stays in BF16 (softmax and RMSNorm included), so the only ->BF16 conversions in a step are
the FP8 KV reads: the whole-pool cast's kernel name then counts exactly the layers (or twice the layers
with the indexer on), as it did in the seed's trace.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

VARIANTS = ("cast_whole", "gather_then_cast")
# Decode steps before the sliding window of live tokens wraps around its reserved pool slots.
WINDOW_SLACK_STEPS = 1024


@dataclass(frozen=True)
class Preset:
    """Shape of one model: layer count, MLA latent sizes, MoE sizes, KV pool and live context."""

    name: str
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    pool_tokens: int  # slots of the paged KV pool, per layer (SGLang's max_total_num_tokens)
    context_tokens: int  # live tokens one decode step attends to
    n_routed_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64
    batch_size: int = 1
    # DSA-style indexer (GLM-5 uses DeepSeek sparse attention); 0 disables it.
    index_head_dim: int = 0
    index_n_heads: int = 0
    index_topk: int = 0

    @property
    def kv_cache_dim(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def whole_casts_per_layer(self) -> int:
        """FP8->BF16 whole-buffer casts one layer runs in the cast_whole variant."""
        return 2 if self.index_head_dim else 1

    def hf_config(self) -> dict:
        """HuggingFace-style config.json contents, so a tool can read the layer count."""
        return {
            "architectures": ["Glm5KvCastDemoForCausalLM"],
            "model_type": "glm5_kv_cast_demo",
            "preset": self.name,
            "num_hidden_layers": self.num_hidden_layers,
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "n_routed_experts": self.n_routed_experts,
            "num_experts_per_tok": self.num_experts_per_tok,
            "n_shared_experts": 1,
            "moe_intermediate_size": self.moe_intermediate_size,
            "index_head_dim": self.index_head_dim,
            "index_n_heads": self.index_n_heads,
            "index_topk": self.index_topk,
            "torch_dtype": "bfloat16",
            "kv_cache_dtype": "fp8_e4m3",
            "max_total_num_tokens": self.pool_tokens,
            "context_tokens": self.context_tokens,
            "batch_size": self.batch_size,
        }


PRESETS: dict[str, Preset] = {
    # Fast on 2 CPU cores; the whole-pool cast is still the top op by far.
    "cpu-small": Preset(
        name="cpu-small",
        num_hidden_layers=6,
        hidden_size=512,
        num_attention_heads=8,
        pool_tokens=16_384,
        context_tokens=256,
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=256,
    ),
    # Smallest shape that exercises every path (indexer included); for tests and dry runs.
    "tiny": Preset(
        name="tiny",
        num_hidden_layers=2,
        hidden_size=128,
        num_attention_heads=2,
        pool_tokens=2_048,
        context_tokens=64,
        n_routed_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        index_head_dim=32,
        index_n_heads=2,
        index_topk=32,
    ),
    # The seed's scale: 78 layers x 495k-token FP8 pool (~22 GB), 4096 live tokens, batch 1.
    "gpu-full": Preset(
        name="gpu-full",
        num_hidden_layers=78,
        hidden_size=2048,
        num_attention_heads=16,
        pool_tokens=495_000,
        context_tokens=4096,
        n_routed_experts=32,
        num_experts_per_tok=8,
        moe_intermediate_size=256,
    ),
    # For the CUDA-graph capture: 4 layers, and the indexer adds a second whole-buffer cast per layer.
    "gpu-small": Preset(
        name="gpu-small",
        num_hidden_layers=4,
        hidden_size=2048,
        num_attention_heads=16,
        pool_tokens=65_536,
        context_tokens=4096,
        n_routed_experts=32,
        num_experts_per_tok=8,
        moe_intermediate_size=256,
        index_head_dim=128,
        index_n_heads=16,
        index_topk=2048,
    ),
}


class MLATokenToKVPool:
    """Per-layer FP8 latent KV buffers of shape (pool_tokens, 1, 576), laid out like SGLang's pool."""

    def __init__(self, preset: Preset, device: torch.device, dtype: torch.dtype = torch.float8_e4m3fn):
        self.dtype = dtype
        self.kv_lora_rank = preset.kv_lora_rank
        shape = (preset.pool_tokens, 1, preset.kv_cache_dim)
        self.kv_buffer = [_random_fp8(shape, dtype, device) for _ in range(preset.num_hidden_layers)]
        self.index_k_buffer = []
        if preset.index_head_dim:
            index_shape = (preset.pool_tokens, preset.index_head_dim)
            self.index_k_buffer = [
                _random_fp8(index_shape, dtype, device) for _ in range(preset.num_hidden_layers)
            ]

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.kv_buffer[layer_id]

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self.kv_buffer[layer_id][..., : self.kv_lora_rank]

    def get_index_k_buffer(self, layer_id: int) -> torch.Tensor:
        return self.index_k_buffer[layer_id]

    def set_kv_buffer(
        self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor, index_k: torch.Tensor | None = None
    ) -> None:
        # Write through a uint8 view, as SGLang's store_dtype does: index_put has not always been
        # implemented for float8 dtypes on every device.
        self.kv_buffer[layer_id].view(torch.uint8)[loc] = cache_k.to(self.dtype).view(torch.uint8)
        if index_k is not None:
            self.index_k_buffer[layer_id].view(torch.uint8)[loc] = index_k.to(self.dtype).view(torch.uint8)


def _random_fp8(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # Fill row blocks so the temporary full-precision copy stays small next to a 285 MB layer.
    out = torch.empty(shape, dtype=dtype, device=device)
    rows_per_block = 65_536
    for start in range(0, shape[0], rows_per_block):
        block = out[start : start + rows_per_block]
        block.copy_(torch.randn(block.shape, device=device, dtype=torch.bfloat16))
    return out


class AttentionBackend:
    """Absorbed-MLA decode over the paged pool; `variant` decides where the FP8->BF16 cast happens."""

    def __init__(self, pool: MLATokenToKVPool, kv_cache_dim: int, variant: str):
        self.pool = pool
        self.scale = 1.0 / math.sqrt(kv_cache_dim)
        self.variant = check_variant(variant)

    def forward_decode(self, q: torch.Tensor, layer_id: int, kv_indices: torch.Tensor) -> torch.Tensor:
        """q (batch, heads, 576) against the live latent tokens; returns (batch, heads, 512)."""
        if self.variant == "cast_whole":
            k = self.keys_cast_whole(q, layer_id, kv_indices)
        else:
            k = self.keys_gather_then_cast(q, layer_id, kv_indices)
        k = k.squeeze(1)
        v = k[:, : self.pool.kv_lora_rank]
        scores = torch.einsum("bhd,nd->bhn", q, k) * self.scale
        probs = torch.softmax(scores, dim=-1)
        return torch.einsum("bhn,nd->bhd", probs, v)

    def keys_cast_whole(self, q: torch.Tensor, layer_id: int, kv_indices: torch.Tensor) -> torch.Tensor:
        # The bug: converts every slot of the pool (0.85 GB of memory traffic per layer at gpu-full's
        # scale), then keeps the few thousand live rows.
        k = self.pool.get_key_buffer(layer_id).to(q.dtype)
        return k[kv_indices]

    def keys_gather_then_cast(self, q: torch.Tensor, layer_id: int, kv_indices: torch.Tensor) -> torch.Tensor:
        # The fix: gather the live rows in FP8, then convert only those.
        k = self.pool.get_key_buffer(layer_id)[kv_indices].to(q.dtype)
        return k


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    return variant


def _linear(in_features: int, out_features: int) -> nn.Linear:
    layer = nn.Linear(in_features, out_features, bias=False)
    nn.init.normal_(layer.weight, std=in_features**-0.5)
    return layer


class Indexer(nn.Module):
    """DSA-style lightning indexer: scores live tokens against a small FP8 key cache, keeps the top-k."""

    def __init__(self, preset: Preset, backend: AttentionBackend):
        super().__init__()
        self.backend = backend
        self.n_heads = preset.index_n_heads
        self.head_dim = preset.index_head_dim
        self.topk = preset.index_topk
        self.wq = _linear(preset.hidden_size, self.n_heads * self.head_dim)
        self.wk = _linear(preset.hidden_size, self.head_dim)
        self.weights_proj = _linear(preset.hidden_size, self.n_heads)

    def project_key(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.wk(hidden)

    def forward(self, hidden: torch.Tensor, layer_id: int, kv_indices: torch.Tensor) -> torch.Tensor:
        """Returns the subset of kv_indices (batch 1) that the attention will read."""
        q = self.wq(hidden).view(hidden.shape[0], self.n_heads, self.head_dim)
        if self.backend.variant == "cast_whole":
            index_k = self.index_keys_cast_whole(q, layer_id, kv_indices)
        else:
            index_k = self.backend.pool.get_index_k_buffer(layer_id)[kv_indices].to(q.dtype)
        per_head = torch.relu(torch.einsum("bhd,nd->bhn", q, index_k))
        token_scores = (per_head * self.weights_proj(hidden).unsqueeze(-1)).sum(dim=1)
        keep = token_scores.topk(min(self.topk, kv_indices.numel()), dim=-1).indices
        return kv_indices[keep[0]]

    def index_keys_cast_whole(self, q: torch.Tensor, layer_id: int, kv_indices: torch.Tensor) -> torch.Tensor:
        # Same mistake on the indexer's key cache: a second whole-pool cast, same kernel, other line.
        index_k = self.backend.pool.get_index_k_buffer(layer_id).to(q.dtype)
        return index_k[kv_indices]


class MLAAttention(nn.Module):
    """Writes the new token's latent into the pool, then attends over the live tokens."""

    def __init__(self, preset: Preset, layer_id: int, backend: AttentionBackend):
        super().__init__()
        self.layer_id = layer_id
        self.backend = backend
        self.n_heads = preset.num_attention_heads
        self.kv_cache_dim = preset.kv_cache_dim
        self.q_proj = _linear(preset.hidden_size, self.n_heads * preset.kv_cache_dim)
        self.kv_a_proj = _linear(preset.hidden_size, preset.kv_cache_dim)
        self.o_proj = _linear(self.n_heads * preset.kv_lora_rank, preset.hidden_size)
        self.indexer = Indexer(preset, backend) if preset.index_head_dim else None

    def forward(self, hidden: torch.Tensor, out_loc: torch.Tensor, kv_indices: torch.Tensor) -> torch.Tensor:
        batch = hidden.shape[0]
        latent = self.kv_a_proj(hidden).unsqueeze(1)
        index_k = self.indexer.project_key(hidden) if self.indexer is not None else None
        self.backend.pool.set_kv_buffer(self.layer_id, out_loc, latent, index_k)
        if self.indexer is not None:
            kv_indices = self.indexer(hidden, self.layer_id, kv_indices)
        q = self.q_proj(hidden).view(batch, self.n_heads, self.kv_cache_dim)
        attn = self.backend.forward_decode(q, self.layer_id, kv_indices)
        return self.o_proj(attn.reshape(batch, -1))


class ExpertMLP(nn.Module):
    """SiLU-gated MLP (the shared expert)."""

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_up_proj = _linear(hidden_size, 2 * intermediate_size)
        self.down_proj = _linear(intermediate_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class MoE(nn.Module):
    """Routed MoE: softmax router, top-k experts run by gathering their weights, plus one shared expert.

    The selected experts are gathered by index instead of a Python loop over `ids.tolist()`, which
    would synchronise with the GPU on every layer and break CUDA-graph capture.
    """

    def __init__(self, preset: Preset):
        super().__init__()
        hidden, inter = preset.hidden_size, preset.moe_intermediate_size
        self.top_k = preset.num_experts_per_tok
        self.router = _linear(hidden, preset.n_routed_experts)
        self.w_gate_up = nn.Parameter(torch.randn(preset.n_routed_experts, 2 * inter, hidden) * hidden**-0.5)
        self.w_down = nn.Parameter(torch.randn(preset.n_routed_experts, hidden, inter) * inter**-0.5)
        self.shared_expert = ExpertMLP(hidden, inter)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        routing = torch.softmax(self.router(x), dim=-1)
        weights, expert_ids = routing.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        gate_up = torch.einsum("bh,bkih->bki", x, self.w_gate_up[expert_ids])
        gate, up = gate_up.chunk(2, dim=-1)
        expert_out = torch.einsum("bki,bkhi->bkh", F.silu(gate) * up, self.w_down[expert_ids])
        routed = (expert_out * weights.unsqueeze(-1)).sum(dim=1)
        return routed + self.shared_expert(x)


class RMSNorm(nn.Module):
    """RMSNorm computed in the activation dtype."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


class DecoderLayer(nn.Module):
    """One GLM-5-style layer: RMSNorm, MLA attention, residual, RMSNorm, MoE, residual."""

    def __init__(self, preset: Preset, layer_id: int, backend: AttentionBackend):
        super().__init__()
        self.input_layernorm = RMSNorm(preset.hidden_size)
        self.self_attn = MLAAttention(preset, layer_id, backend)
        self.post_attention_layernorm = RMSNorm(preset.hidden_size)
        self.mlp = MoE(preset)

    def forward(self, hidden: torch.Tensor, out_loc: torch.Tensor, kv_indices: torch.Tensor) -> torch.Tensor:
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), out_loc, kv_indices)
        hidden = hidden + self.mlp(self.post_attention_layernorm(hidden))
        return hidden


class DecodeModel(nn.Module):
    """N decoder layers sharing one paged FP8 KV pool; one call of `decode_step` is one decode step."""

    def __init__(
        self,
        preset: Preset,
        variant: str = "cast_whole",
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.bfloat16,
        seed: int = 0,
    ):
        super().__init__()
        self.preset = preset
        device = torch.device(device)
        torch.manual_seed(seed)
        with torch.device(device):
            self.pool = MLATokenToKVPool(preset, device)
            self.backend = AttentionBackend(self.pool, preset.kv_cache_dim, variant)
            self.layers = nn.ModuleList(
                DecoderLayer(preset, i, self.backend) for i in range(preset.num_hidden_layers)
            )
            self.norm = RMSNorm(preset.hidden_size)
            # The request's tokens sit at scattered pool slots, as a paged allocator leaves them.
            slots = preset.context_tokens + WINDOW_SLACK_STEPS
            if slots > preset.pool_tokens:
                raise ValueError(
                    f"preset {preset.name}: pool_tokens must be >= context_tokens + {WINDOW_SLACK_STEPS}"
                )
            self.seq_locs = torch.randperm(preset.pool_tokens)[:slots]
        self.to(dtype)
        self.requires_grad_(False)

    @property
    def variant(self) -> str:
        return self.backend.variant

    def set_variant(self, variant: str) -> None:
        self.backend.variant = check_variant(variant)

    def positions(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(out_loc, kv_indices) of decode step `step`: a sliding window of context_tokens live slots.

        The window keeps a fixed length so shapes are static (CUDA graphs); the newest slot is the
        token written this step.
        """
        start = step % WINDOW_SLACK_STEPS + 1
        kv_indices = self.seq_locs[start : start + self.preset.context_tokens]
        out_loc = kv_indices[-1:].expand(self.preset.batch_size)
        return out_loc, kv_indices

    def forward(
        self, token_hidden: torch.Tensor, out_loc: torch.Tensor, kv_indices: torch.Tensor
    ) -> torch.Tensor:
        hidden = token_hidden
        for layer in self.layers:
            hidden = layer(hidden, out_loc, kv_indices)
        return self.norm(hidden)

    @torch.inference_mode()
    def decode_step(self, token_hidden: torch.Tensor, step: int) -> torch.Tensor:
        out_loc, kv_indices = self.positions(step)
        return self(token_hidden, out_loc, kv_indices)

    def example_input(self, seed: int = 1) -> torch.Tensor:
        generator = torch.Generator(device="cpu").manual_seed(seed)
        hidden = torch.randn(self.preset.batch_size, self.preset.hidden_size, generator=generator)
        return hidden.to(self.norm.weight.dtype).to(self.seq_locs.device)


def preset_summary(preset: Preset) -> dict:
    """The preset's fields plus the byte counts a reader of its trace needs."""
    whole_cast_bytes = preset.pool_tokens * preset.kv_cache_dim * (1 + 2)  # read fp8, write bf16
    return {
        **asdict(preset),
        "kv_pool_bytes": preset.pool_tokens * preset.kv_cache_dim * preset.num_hidden_layers,
        "whole_cast_bytes_per_call": whole_cast_bytes,
    }
