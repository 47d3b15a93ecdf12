"""Real SGLang attention on CPU: an FP8 KV pool, the torch-native backend, RadixAttention layers.

Everything here is SGLang's own code (sglang==0.5.23); only `RunnerHandles` stands in for the
ModelRunner, whose constructor needs a GPU and a checkpoint: the backend reads just these three
attributes from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

HEADS, HEAD_DIM, LAYERS, POOL_TOKENS = 4, 32, 2, 1024


@dataclass
class RunnerHandles:
    """The ModelRunner attributes `TorchNativeAttnBackend.__init__` reads."""

    device: str
    req_to_token_pool: object
    token_to_kv_pool: object


class SGLangDecode:
    """Decode steps through `RadixAttention.forward` -> `AttentionBackend.forward` -> the torch-native
    backend, reading an FP8 (e4m3) `MHATokenToKVPool` whose keys the backend casts to BF16."""

    def __init__(self, batch: int = 2, context: int = 48, seed: int = 0) -> None:
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
        from sglang.srt.layers.radix_attention import RadixAttention
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

        generator = torch.Generator().manual_seed(seed)
        self.batch, self.context = batch, context
        self.kv_pool = MHATokenToKVPool(
            size=POOL_TOKENS,
            page_size=1,
            dtype=torch.float8_e4m3fn,
            head_num=HEADS,
            head_dim=HEAD_DIM,
            layer_num=LAYERS,
            device="cpu",
            enable_memory_saver=False,
        )
        self.req_pool = ReqToTokenPool(
            size=batch, max_context_len=256, device="cpu", enable_memory_saver=False
        )
        # Each request's tokens sit at scattered pool slots, as the paged allocator leaves them.
        slots = torch.randperm(POOL_TOKENS - 1, generator=generator)[: batch * 256] + 1
        self.req_pool.req_to_token[:batch, :] = slots.view(batch, 256).to(torch.int32)
        for layer_id in range(LAYERS):  # fill the pool with FP8 history
            history = torch.randn(POOL_TOKENS + 1, HEADS, HEAD_DIM, generator=generator)
            self.kv_pool.k_buffer[layer_id].copy_(history.to(torch.float8_e4m3fn).view(torch.uint8))
            self.kv_pool.v_buffer[layer_id].copy_(history.flip(0).to(torch.float8_e4m3fn).view(torch.uint8))
        self.backend = TorchNativeAttnBackend(RunnerHandles("cpu", self.req_pool, self.kv_pool))
        self.layers = [
            RadixAttention(HEADS, HEAD_DIM, scaling=HEAD_DIM**-0.5, num_kv_heads=HEADS, layer_id=i)
            for i in range(LAYERS)
        ]
        self.inputs = [
            torch.randn(batch, 3, HEADS * HEAD_DIM, generator=generator).to(torch.bfloat16) for _ in range(8)
        ]

    def forward_batch(self, step: int):
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

        seq_len = self.context + step
        return ForwardBatch(
            forward_mode=ForwardMode.DECODE,
            batch_size=self.batch,
            input_ids=torch.zeros(self.batch, dtype=torch.long),
            req_pool_indices=torch.arange(self.batch),
            seq_lens=torch.full((self.batch,), seq_len),
            out_cache_loc=self.req_pool.req_to_token[: self.batch, seq_len - 1].long(),
            seq_lens_sum=self.batch * seq_len,
        )

    def decode_step(self, step: int) -> torch.Tensor:
        """One decode step over all layers; returns the last layer's attention output."""
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        batch = self.forward_batch(step)
        qkv = self.inputs[step % len(self.inputs)]
        q, k, v = qkv.unbind(dim=1)
        self.backend.init_forward_metadata(batch)
        out = q
        with forward_context(ForwardContext(attn_backend=self.backend), forward_batch=batch):
            for layer in self.layers:
                out = layer.forward(q + out, k, v, batch)
        return out
