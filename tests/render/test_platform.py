"""scan --platform: on a CUDA machine the code paths CUDA runs come first; the MUSA, XPU, NPU and
HPU backends' copies of the same pattern rank below them, saying why. On the real sglang package."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tracer.cli import main
from tracer.model.site import Site
from tracer.static.platform import OTHER_PLATFORM_WEIGHT, apply_platform, site_platforms

OTHERS = ("xpu", "npu", "hpu", "musa")


def _site(path: str, function: str, risk: float = 85) -> Site:
    return Site(path, 1, 0, "to", "to", function, None, "x", text="x.to(y)", risk=risk, reasons=("+85 base",))


def test_platform_words_come_from_paths_and_names():
    assert site_platforms(
        _site("sglang/srt/layers/attention/xpu_backend.py", "XPUAttentionBackend.forward")
    ) == {"xpu"}
    assert site_platforms(
        _site("sglang/srt/layers/dsa/dsa_npu_indexer.py", "DSANPUIndexerMixin.forward_npu")
    ) == {"npu"}
    assert site_platforms(_site("sglang/srt/layers/attention/aiter_backend.py", "AiterAttnBackend.f")) == {
        "rocm"
    }
    assert (
        site_platforms(_site("sglang/srt/layers/attention/flashattention_backend.py", "F.forward_extend"))
        == set()
    )
    assert site_platforms(_site("a/relationship.py", "command")) == set()  # words, not substrings


def test_other_platforms_rank_lower_with_a_reason():
    sites = [
        _site("a/xpu_backend.py", "XPUBackend.forward"),
        _site("a/flash_backend.py", "F.forward", risk=60),
    ]
    ranked = apply_platform(sites, "cuda")
    assert [s.path for s in ranked] == ["a/flash_backend.py", "a/xpu_backend.py"]
    assert ranked[1].risk == 85 + OTHER_PLATFORM_WEIGHT
    assert (
        ranked[1].reasons[-1].startswith(f"{OTHER_PLATFORM_WEIGHT:+g} code for xpu, not this machine's cuda")
    )
    assert apply_platform(sites, "any")[0].risk == 85
    assert apply_platform([_site("a/x.py", "f.forward_cuda")], "rocm")[0].risk == 85  # ROCm runs CUDA paths


@pytest.mark.slow
def test_cuda_scan_of_sglang_puts_cuda_paths_first(sglang_root):
    def top(platform: str) -> list[dict]:
        result = CliRunner().invoke(
            main,
            ["scan", str(sglang_root / "sglang" / "srt" / "layers" / "attention"), "--json", "--top", "40"]
            + ["--platform", platform],
        )
        assert result.exit_code == 0, result.output
        return json.loads(result.output)["sites"]

    def other_platform(site: dict) -> bool:
        return bool(site_platforms(Site.from_dict(site)) & set(OTHERS))

    anywhere = top("any")
    assert any(other_platform(s) for s in anywhere[:10])  # the XPU backend's copies of the founding pattern
    cuda = top("cuda")
    first_other = next(i for i, s in enumerate(cuda) if other_platform(s))
    assert first_other >= 10 and all(not other_platform(s) for s in cuda[:first_other])
    moved = cuda[first_other]
    assert "not this machine's cuda (--platform)" in moved["reasons"][-1]
