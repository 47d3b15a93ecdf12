"""The hold-out set's split (`tests/fixtures/holdout/README.md`): models the no-stack join was never
tuned on, *dev* ones that may be read when a failure is looked into and *check* ones that are only
measured, so that their figure stays an estimate for code nobody here has read."""

from __future__ import annotations

DEV = (
    "falcon",
    "gptj",
    "stablelm",
    "cohere",
    "phi",
    "qwen3_moe",
    "smollm3",
    "codegen",
    "gemma3",
    "exaone4",
    "olmoe",
)
CHECK = ("gpt_bigcode", "starcoder2", "granite", "gemma", "olmo2", "glm", "nemotron", "mpt", "ernie4_5", "helium", "granitemoe")  # fmt: skip


def split_of(model: str) -> str | None:
    """Which half of the hold-out set `model` is in ("dev" or "check"); None for any other model."""
    return "dev" if model in DEV else "check" if model in CHECK else None
