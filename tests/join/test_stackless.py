"""Traces recorded without stacks: `--source` alone ranks the culprit line first (a ranking, said so)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tracer.api import explain_trace

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def sglang_source() -> Path:
    return Path(importlib.util.find_spec("sglang").origin).parent


@pytest.fixture(scope="module")
def sglang_nostack_trace(tmp_path_factory) -> Path:
    """Real SGLang decode (torch-native attention over an FP8 pool), CPU, no stacks, recorded now."""
    out = tmp_path_factory.mktemp("sglang") / "decode_nostack.json"
    subprocess.run(
        [sys.executable, str(HERE / "make_sglang_nostack.py"), str(out)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return out


def _line_of(path: Path, text: str, after: str) -> int:
    """The line holding `text` after the first line holding `after` (the function it is in)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    return next(i for i, line in enumerate(lines[start:], start + 1) if line.strip() == text)


def test_sglang_fp8_casts_ranked_first_without_stacks(
    sglang_nostack_trace: Path, sglang_source: Path
) -> None:
    analysis = explain_trace(sglang_nostack_trace, source=[sglang_source])
    backend = sglang_source / "srt" / "layers" / "attention" / "torch_native_backend.py"
    decode = "def _run_sdpa_forward_decode("
    key_line = _line_of(backend, "per_req_key = per_req_key.to(per_req_query.dtype)", decode)
    value_line = _line_of(backend, "per_req_value = per_req_value.to(per_req_query.dtype)", decode)
    # The FP8 -> BF16 casts of the gathered keys and values: the biggest copies of the step.
    casts = [f for f in analysis.findings if f.category == "cast/copy" and any("fp8" in s for s in f.shapes)]
    first, second = casts[:2]
    assert {first.origin.line, second.origin.line} == {key_line, value_line}
    for finding in (first, second):
        origin = finding.origin
        assert origin.file == "sglang/srt/layers/attention/torch_native_backend.py"
        assert origin.frames == () and origin.answer == "ranked" and origin.confidence < 0.5
        assert origin.evidence[0] == "a ranking, not a match:"
        assert origin.candidates[0] == origin.location
        assert "`TorchNativeAttnBackend._run_sdpa_forward_decode`" in origin.evidence[2]
        assert finding.calls_per_step is not None


def test_glm5_whole_pool_cast_ranked_first_with_source_alone(own_gpu_traces: Path, repo_root: Path) -> None:
    """The founding case without stacks, no --sites: the example's folder is all it is given."""
    analysis = explain_trace(
        own_gpu_traces / "glm5_cast_whole_nostack.json.gz", source=[repo_root / "examples" / "glm5_kv_cast"]
    )
    top = analysis.findings[0]
    assert "direct_copy_kernel_cuda" in top.kernel
    assert top.origin.location.endswith("glm5_kv_cast/model.py:209")
    assert top.origin.answer == "ranked" and top.origin.rule == "KT101"
    # second: a call on the path to it (`MLAAttention.forward` calling `forward_decode`); the call of
    # `keys_cast_whole` itself (line 197), past the depth helpers are spliced in from
    # `DecoderLayer.forward`, is no answer: the helper's own line answers (`CallPoint.runs`), judged
    # by the layer's ops around it (the block of that call opened, `StacklessRanker._opened`)
    assert [c.rsplit("/", 1)[-1] for c in top.origin.candidates[:2]] == ["model.py:209", "model.py:285"]
    assert "`AttentionBackend.keys_cast_whole` (called from `DecoderLayer.forward`)" in top.origin.evidence[2]
    assert top.calls_per_step == 78
