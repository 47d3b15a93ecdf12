"""Write a CPU trace of real SGLang decode steps recorded without stacks (argv[1]).

SGLang 0.5.23's torch-native attention backend over an FP8 (e4m3) `MHATokenToKVPool`
(tests/plugins/sglang_cpu.py), a long context so that the per-request FP8 -> BF16 casts of the
gathered keys and values are among the hot ops; `with_stack=False`, no kerneltrace ranges.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "plugins"))

from conftest import _ensure_torchvision  # noqa: E402

_ensure_torchvision()

import torch  # noqa: E402
from sglang_cpu import SGLangDecode  # noqa: E402

torch.manual_seed(0)
torch.set_num_threads(1)
decode = SGLangDecode(batch=2, context=200)
for step in range(2):
    decode.decode_step(step)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
    for step in range(2, 5):
        decode.decode_step(step)
prof.export_chrome_trace(sys.argv[1])
