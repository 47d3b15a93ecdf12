"""Capture this folder's CUDA-graph trace fixtures on a GPU (see fixtures/README.md here).

    python tests/join/replay/make_replay_traces.py --out tests/join/replay/fixtures

Writes, each with torch.profiler(CPU+CUDA, with_stack, record_shapes):
- split_capture.json.gz / split_replays.json.gz: the capture of a graph profiled in one trace, three
  replays of it in another (as SGLang writes capture traces apart from the serving traces);
- two_streams.json.gz: a graph whose capture forks onto a side stream (the index-key cast runs there,
  beside the main stream's work), captured and replayed three times in one trace;
- two_graphs.json.gz: two graphs of different code (decode and a "verify" pass) captured in one
  trace, then replayed interleaved: decode, verify, decode, verify.
Every block casts a whole FP8 buffer to BF16 twice, from two lines that launch the same kernel
(``# line:key_cast``, ``# line:index_cast``); the tests find the lines by those markers.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

HIDDEN = 512
POOL_ROWS = 32768
INDEX_DIM = 64
BLOCKS = 2
REPLAYS = 3


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(HIDDEN, HIDDEN, bias=False, dtype=torch.bfloat16)
        self.register_buffer("key_pool", torch.randn(POOL_ROWS, HIDDEN).to(torch.float8_e4m3fn))
        self.register_buffer("index_pool", torch.randn(POOL_ROWS, INDEX_DIM).to(torch.float8_e4m3fn))

    def keys(self) -> torch.Tensor:
        return self.key_pool.to(torch.bfloat16)  # line:key_cast

    def index_keys(self) -> torch.Tensor:
        return self.index_pool.to(torch.bfloat16)  # line:index_cast

    def forward(
        self, hidden: torch.Tensor, live: torch.Tensor, side: torch.cuda.Stream | None
    ) -> torch.Tensor:
        if side is not None:  # the index keys on a side stream, beside the projection
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                index_k = self.index_keys()
        else:
            index_k = self.index_keys()
        query = self.proj(hidden)  # line:proj
        if side is not None:
            torch.cuda.current_stream().wait_stream(side)
        picked = (query[:, :INDEX_DIM] @ index_k[live].T).softmax(-1)  # line:index_scores
        keys = self.keys()[live]
        return hidden + (picked @ keys).to(hidden.dtype)  # line:attend


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))

    def decode(
        self, hidden: torch.Tensor, live: torch.Tensor, side: torch.cuda.Stream | None = None
    ) -> torch.Tensor:
        for block in self.blocks:
            hidden = block(hidden, live, side)
        return hidden

    def verify(self, hidden: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        # A different pass (other lines, other op sequence): its own graph.
        scores = hidden.float().pow(2).mean(-1, keepdim=True)  # line:verify_norm
        return (hidden * torch.rsqrt(scores + 1e-6)).to(hidden.dtype)  # line:verify_scale


def graphed(fn, *args) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        out = fn(*args)
    return graph, out


def warm_up(fn, *args) -> None:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def profiled():
    return profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True, record_shapes=True
    )


def export(prof, path: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(path, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    print(f"{path}: {path.stat().st_size / 1024:.0f} KiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = Model().cuda()
    hidden = torch.randn(1, HIDDEN, device="cuda", dtype=torch.bfloat16)
    live = torch.randint(0, POOL_ROWS, (1024,), device="cuda")
    facts: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}

    with torch.no_grad():
        # 1. capture in one trace, replays in another
        warm_up(model.decode, hidden, live)
        with profiled() as prof:
            graph, _ = graphed(model.decode, hidden, live)
            torch.cuda.synchronize()
        export(prof, args.out / "split_capture.json.gz")
        with profiled() as prof:
            for _ in range(REPLAYS):
                graph.replay()
            torch.cuda.synchronize()
        export(prof, args.out / "split_replays.json.gz")

        # 2. a two-stream graph, capture and replays in one trace
        side = torch.cuda.Stream()
        warm_up(model.decode, hidden, live, side)
        with profiled() as prof:
            graph2, _ = graphed(model.decode, hidden, live, side)
            for _ in range(REPLAYS):
                graph2.replay()
            torch.cuda.synchronize()
        export(prof, args.out / "two_streams.json.gz")

        # 3. two graphs of different code, replayed interleaved
        warm_up(model.verify, hidden, live)
        with profiled() as prof:
            decode_graph, _ = graphed(model.decode, hidden, live)
            verify_graph, _ = graphed(model.verify, hidden, live)
            for _ in range(2):
                decode_graph.replay()
                verify_graph.replay()
            torch.cuda.synchronize()
        export(prof, args.out / "two_graphs.json.gz")
    (args.out / "capture_facts.json").write_text(json.dumps(facts, indent=2) + "\n")


if __name__ == "__main__":
    main()
