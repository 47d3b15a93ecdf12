"""Real SGLang attention on CPU: an FP8 KV pool, the torch-native backend, RadixAttention layers.

Everything here is SGLang's own code (sglang==0.5.23); only `RunnerHandles` stands in for the
ModelRunner, whose constructor needs a GPU and a checkpoint: the backend reads just these three
attributes from it. `capture_runner` runs SGLang's CUDA-graph capture pass on CPU, with the one
GPU-only step (capturing a shape into a CUDA graph) replaced by a real SGLang decode step.
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
        """One decode step over all layers; returns the last layer's attention output.

        Step `s` writes its token's K/V at pool position ``context + s - 1`` (the same values every
        time) and reads positions up to there. So once steps 0..5 have run in order (`settle`), step
        `s` returns the same output whatever ran before: the fresh-pool output of steps 0..5 in order.
        """
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


def capture_runner(decode: SGLangDecode, capture_bs: tuple[int, ...] = (1, 2)):
    """A real `DecodeCudaGraphRunner` whose capture pass (`_capture_one_stream`, SGLang's own code)
    runs on CPU: built without `__init__` (it needs a GPU ModelRunner) and given the attributes
    that pass reads. Only `capture_one_shape`, the per-shape CUDA-graph capture, is a stand-in: it
    runs one real SGLang decode step (`decode`) per shape and keeps the outputs in
    ``runner.captured_outputs``, step ``bs % 6`` for batch size ``bs``."""
    import types

    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    runner = object.__new__(DecodeCudaGraphRunner)
    runner.model_runner = types.SimpleNamespace(
        device="cpu", gpu_id=0, model=torch.nn.Identity(), is_draft_worker=False
    )
    runner.capture_bs = list(capture_bs)
    runner.compile_bs = []
    runner.captured_req_width = 1
    runner.record_nolora_graph = False
    runner.attention_graph_variants = None
    runner.enable_profile_cuda_graph = False
    runner.captured_outputs = []

    def capture_one_shape(bs, forward, stream_idx=None, variant_label=None, attention_variant=None):
        runner.captured_outputs.append(decode.decode_step(bs % 6))

    runner.capture_one_shape = capture_one_shape
    return runner


def sglang_ranks(tp_rank: int = 0):
    """SGLang's parallel state for one rank of a single-process run (what the scheduler publishes)."""
    from sglang.srt.runtime_context import get_parallel

    return get_parallel().override(tp_rank=tp_rank, tp_group=None, num_dp_ranks=1, pp_size=1, moe_ep_size=1)


def hook_of(method):
    """The hook inside HookRegistry's AROUND wrapper (its closure holds `hook` and `original_fn`)."""
    cells = dict(zip(method.__code__.co_freevars, (c.cell_contents for c in method.__closure__), strict=True))
    return cells["hook"]


def user_ranges(trace_path) -> list[str]:
    """The record_function range names of a trace, in file order (loaded by `tracer.load`)."""
    from tracer.load import load_trace
    from tracer.model.events import Cat

    table = load_trace(trace_path).events
    return [table.name[r] for r in range(len(table)) if table.cat[r] == Cat.USER_ANNOTATION]


def settle(decode: SGLangDecode, steps: int = 6) -> list[torch.Tensor]:
    """Run decode steps 0..steps-1 in order; after this every step's output is fixed (see `decode_step`)."""
    return [decode.decode_step(step) for step in range(steps)]
