"""Model code as real models write it: RMSNorm, rotary embedding, MoE routing, sampling, and a small
decoder built from them."""

from __future__ import annotations

import torch

from bench.corpus.zoo.registry import shape


class RMSNorm(torch.nn.Module):
    """Llama's RMSNorm: upcast, variance, rsqrt, downcast, weight."""

    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width, dtype=torch.bfloat16))
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return self.weight * hidden_states.to(input_dtype)


class GemmaNorm(RMSNorm):
    """Gemma's variant: the weight is applied in float32 as (1 + w), then one cast at the end."""

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


@shape("rmsnorm", "Llama and Gemma RMSNorm: upcast, pow/mean/rsqrt, downcast, `type_as`, a `_norm` helper")
def build_rmsnorm(device: torch.device):
    norms = [RMSNorm(16).to(device), GemmaNorm(16).to(device)]
    x = torch.randn(2, 3, 16, device=device, dtype=torch.bfloat16)

    def step(i: int):
        with torch.no_grad():
            h = norms[0](x)
            return norms[1](h) + norms[i % 2](h)

    return step


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(torch.nn.Module):
    """Rotary position embedding: inv_freq in float32, cos/sin cast to the activations' dtype."""

    def __init__(self, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        positions = position_ids[:, None, :].float()
        freqs = (inv_freq.to(x.device) @ positions).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


@shape("rotary", "rotary embedding: float32 frequencies, `.to(dtype=x.dtype)` of cos/sin, rotate_half")
def build_rotary(device: torch.device):
    rope = RotaryEmbedding(8).to(device)
    q = torch.randn(2, 2, 5, 8, device=device, dtype=torch.bfloat16)
    k = torch.randn(2, 2, 5, 8, device=device, dtype=torch.bfloat16)

    def step(i: int):
        positions = torch.arange(i, i + 5, device=device)[None].expand(2, -1)
        cos, sin = rope(q, positions)
        return apply_rotary(q, k, cos, sin)

    return step


class MoE(torch.nn.Module):
    """Top-k routing in float32, a loop over the experts that got tokens (data dependent),
    `index_add_` of each expert's output cast back to the hidden dtype."""

    def __init__(self, width: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.gate = torch.nn.Linear(width, experts, bias=False, dtype=torch.bfloat16)
        self.experts = torch.nn.ModuleList(
            torch.nn.Linear(width, width, bias=False, dtype=torch.bfloat16) for _ in range(experts)
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        router_logits = self.gate(hidden)
        routing_weights = torch.softmax(router_logits, dim=-1, dtype=torch.float)
        routing_weights, selected = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden.dtype)
        out = torch.zeros_like(hidden)
        expert_mask = torch.nn.functional.one_hot(selected, num_classes=len(self.experts)).permute(2, 1, 0)
        hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in hit:
            expert = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
            current = hidden[None, top_x].reshape(-1, hidden.shape[-1])
            current = expert(current) * routing_weights[top_x, idx, None]
            out.index_add_(0, top_x, current.to(hidden.dtype))
        return out


@shape(
    "moe_routing", "MoE: softmax(dtype=float), topk, `/=`, one_hot, a loop over the experts hit, index_add_"
)
def build_moe(device: torch.device):
    moe = MoE(8, 6, 2).to(device)
    batches = [torch.randn(n, 8, device=device, dtype=torch.bfloat16) for n in (3, 5, 2, 4)]

    def step(i: int):
        with torch.no_grad():
            return moe(batches[i % 4])

    return step


def sample(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, generator) -> torch.Tensor:
    """Temperature, top-k, top-p filtering and multinomial sampling, greedy when temperature is 0."""
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k > 0:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1, None]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(logits, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative > top_p
        remove[..., 1:] = remove[..., :-1].clone()
        remove[..., 0] = False
        logits = logits.masked_fill(remove.scatter(-1, sorted_idx, remove), float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


@shape("sampling", "sampling: greedy or temperature/top-k/top-p per step, sort/cumsum/scatter, multinomial")
def build_sampling(device: torch.device):
    logits = torch.randn(3, 32, device=device, dtype=torch.bfloat16)
    settings = [(0.0, 0, 1.0), (0.7, 5, 1.0), (1.0, 0, 0.9), (0.8, 8, 0.8)]

    def step(i: int):
        generator = torch.Generator(device=device).manual_seed(i)
        temperature, top_k, top_p = settings[i % 4]
        return sample(logits, temperature, top_k, top_p, generator)

    return step


class MLP(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.gate_proj = torch.nn.Linear(width, 2 * width, bias=False, dtype=torch.bfloat16)
        self.up_proj = torch.nn.Linear(width, 2 * width, bias=False, dtype=torch.bfloat16)
        self.down_proj = torch.nn.Linear(2 * width, width, bias=False, dtype=torch.bfloat16)
        self.act_fn = torch.nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(torch.nn.Module):
    def __init__(self, width: int, heads: int, moe: bool) -> None:
        super().__init__()
        self.heads = heads
        self.input_norm = RMSNorm(width)
        self.post_norm = RMSNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width, bias=False, dtype=torch.bfloat16)
        self.o_proj = torch.nn.Linear(width, width, bias=False, dtype=torch.bfloat16)
        self.mlp = MoE(width, 4, 2) if moe else MLP(width)

    def forward(
        self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: list
    ) -> torch.Tensor:
        residual = hidden
        hidden = self.input_norm(hidden)
        b, n, width = hidden.shape
        q, k, v = self.qkv(hidden).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, k, cos, sin)
        if cache:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        cache[:] = [k, v]
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=n > 1)
        hidden = residual + self.o_proj(attn.transpose(1, 2).reshape(b, n, width))
        residual = hidden
        hidden = self.post_norm(hidden)
        if isinstance(self.mlp, MoE):
            hidden = self.mlp(hidden.view(-1, width)).view(b, n, width)
        else:
            hidden = self.mlp(hidden)
        return residual + hidden


class TinyDecoder(torch.nn.Module):
    """Embedding, rotary, a ModuleList of dense and MoE layers with a KV cache, final norm, lm head."""

    def __init__(self, vocab: int = 64, width: int = 16, heads: int = 2, depth: int = 3) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width, dtype=torch.bfloat16)
        self.rotary = RotaryEmbedding(width // heads)
        self.layers = torch.nn.ModuleList(DecoderLayer(width, heads, moe=i % 2 == 1) for i in range(depth))
        self.norm = RMSNorm(width)
        self.lm_head = torch.nn.Linear(width, vocab, bias=False, dtype=torch.bfloat16)

    def forward(self, ids: torch.Tensor, start: int, caches: list[list]) -> torch.Tensor:
        hidden = self.embed(ids)
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)[None].expand(
            ids.shape[0], -1
        )
        cos, sin = self.rotary(hidden, positions)
        for layer, cache in zip(self.layers, caches):
            hidden = layer(hidden, cos, sin, cache)
        logits = self.lm_head(self.norm(hidden)[:, -1])
        return logits.float()


@shape(
    "tiny_decoder_generate",
    "a decoder (RMSNorm, rotary, dense + MoE layers, KV cache) prefilling then decoding",
)
def build_decoder(device: torch.device):
    model = TinyDecoder().to(device)
    prompt = torch.randint(0, 64, (2, 5), device=device)

    def step(i: int):
        caches = [[] for _ in model.layers]
        ids, start = prompt, 0
        with torch.no_grad():
            for _ in range(1 + i % 3):
                logits = model(ids, start, caches)
                start += ids.shape[1]
                ids = sample(logits, 0.0, 0, 1.0, None)[:, None]
        return ids

    return step
