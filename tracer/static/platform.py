"""The platform factor of the risk score: code written for another accelerator ranks lower.

On an NVIDIA machine the MUSA, XPU, NPU or HPU backend's copy of a hot pattern never runs, so it
should not sit among the top rows. A site is another platform's when its path, function or class
names that platform (``xpu_backend.py``, ``forward_npu``, ``XPUAttentionBackend``, ``hip``/``aiter``
for ROCm); its risk drops by `OTHER_PLATFORM_WEIGHT` with the reason in words. Code that names no
platform, or this one, keeps its score.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import replace

from tracer.model.site import Site

ANY = "any"
# platform -> the words that mark its code (whole words of a path, or parts of a CamelCase name)
PLATFORM_WORDS: dict[str, tuple[str, ...]] = {
    "cuda": ("cuda", "nvidia", "trtllm", "cutlass", "cutedsl"),
    "rocm": ("rocm", "hip", "aiter", "amd", "gfx942", "gfx950", "gfx95"),
    "xpu": ("xpu", "intel"),
    "npu": ("npu", "ascend"),
    "hpu": ("hpu", "habana", "gaudi"),
    "musa": ("musa",),
    "mlu": ("mlu", "cambricon"),
}
PLATFORMS = (ANY, "cpu", *PLATFORM_WORDS)
# ROCm builds of torch run the CUDA code paths too (HIP is CUDA's API), so those stay.
ALSO_RUNS = {"rocm": {"cuda"}}
OTHER_PLATFORM_WEIGHT = -30  # below the same pattern in code this platform runs (85 -> 55)

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z]|\d|\b|_)|[A-Z]?[a-z]+|[A-Z]+|\d+")


def _words(text: str) -> set[str]:
    """Lower-case words of a path or name: ``XPUAttentionBackend`` -> xpu, attention, backend;
    ``flashattention_backend_hip.py`` -> flashattention, backend, hip, py."""
    words = set()
    for part in re.split(r"[^A-Za-z0-9]+", text):
        if not part:
            continue
        words.add(part.lower())
        words.update(match.lower() for match in _WORD.findall(part))
    return words


def site_platforms(site: Site) -> set[str]:
    """The platforms a site's path, function and class names mark it as written for."""
    words = _words(site.path) | _words(site.function)
    return {platform for platform, marks in PLATFORM_WORDS.items() if words & set(marks)}


def detect_platform() -> str:
    """This machine's platform: torch's answer when torch is already imported (importing it just
    to ask costs seconds), else NVIDIA's driver or ROCm's device node; "any" when none is found."""
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):  # a broken driver: ask the system instead
            if torch.cuda.is_available():
                return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    if os.path.exists("/proc/driver/nvidia/version"):
        return "cuda"
    if os.path.exists("/dev/kfd"):
        return "rocm"
    return ANY


def apply_platform(sites: Iterable[Site], platform: str) -> list[Site]:
    """`sites` with the risk of other platforms' code lowered, ranked again (highest first).

    ``platform`` is one of `PLATFORMS`; "any" leaves every score as it is."""
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}")
    out = []
    for site in sites:
        marked = site_platforms(site)
        runs = {platform, *ALSO_RUNS.get(platform, ())}
        if platform != ANY and marked and not marked & runs:
            others = ", ".join(sorted(marked))
            reason = (
                f"{OTHER_PLATFORM_WEIGHT:+g} code for {others}, not this machine's {platform} (--platform)"
            )
            site = replace(
                site, risk=max(0.0, site.risk + OTHER_PLATFORM_WEIGHT), reasons=(*site.reasons, reason)
            )
        out.append(site)
    out.sort(key=lambda s: (-s.risk, s.path, s.line, s.col))
    return out
