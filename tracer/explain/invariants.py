"""Structural invariants: "78 calls/step = once per layer (78 layers)", and saying so when none fits."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tracer.explain.structure import ModelShape


def state_invariant(per_step: Sequence[int], shape: ModelShape) -> str | None:
    """One sentence relating a kernel's calls in each step to the model's layers, experts or tokens."""
    if not per_step:
        return None
    steps = len(per_step)
    active = [c for c in per_step if c > 0]
    if not active:
        return None
    count, _ = Counter(active).most_common(1)[0]
    with_count = sum(1 for c in per_step if c == count)
    if with_count == steps:
        head = f"{count} call{'' if count == 1 else 's'}/step"
    else:
        others = sorted({c for c in per_step if c != count})
        spread = f"{others[0]}" if len(others) == 1 else f"{others[0]}-{others[-1]}"
        head = f"{count} call{'' if count == 1 else 's'} in {with_count} of {steps} steps (others {spread})"
    matched, meaning = _explain_count(count, shape)
    return f"{head} = {meaning}" if matched else f"{head}: {meaning}"


def _explain_count(count: int, shape: ModelShape) -> tuple[bool, str]:
    """(whether a structural unit explains ``count``, the words)."""
    layers, moe, experts, topk, tokens = (
        shape.layers,
        shape.moe_layers,
        shape.experts,
        shape.experts_per_token,
        shape.tokens_per_step,
    )
    layer_words = f"{layers} layers" if layers else ""
    experts_layers = moe or layers
    exact: list[tuple[int | None, str]] = [
        (layers, f"once per layer ({layer_words})"),
        (moe if moe != layers else None, f"once per MoE layer ({moe} of {layers} layers)"),
        (
            experts_layers * experts if experts_layers and experts else None,
            f"once per expert per MoE layer ({experts} experts x {experts_layers} layers)",
        ),
        (
            moe * topk if moe and moe != layers and topk else None,
            f"once per routed expert per MoE layer (top-{topk} x {moe} of {layers} layers)",
        ),
        (experts, f"once per expert ({experts} experts)"),
        (
            layers * tokens if layers and tokens and tokens > 1 else None,
            f"once per token per layer ({tokens} tokens x {layer_words})",
        ),
        (tokens if tokens and tokens > 1 else None, f"once per token ({tokens} tokens)"),
        (1, "once per step"),
    ]
    for unit, text in exact:
        if unit and count == unit:
            return True, text
    if layers and count % layers == 0:
        times = count // layers
        word = "twice" if times == 2 else f"{times} times"
        also = f"; or top-{topk} routed experts per layer" if topk and times == topk else ""
        return True, f"{word} per layer ({layer_words}{also})"
    if moe and moe != layers and count % moe == 0:
        times = count // moe
        word = "twice" if times == 2 else f"{times} times"
        return True, f"{word} per MoE layer ({moe} of {layers} layers)"
    # A few calls outside the layers (a final norm after N per-layer norms) still show the pattern.
    if layers and count >= 2 * layers and count % layers <= 2:
        times, extra = divmod(count, layers)
        word = "twice" if times == 2 else f"{times} times"
        return True, f"{word} per layer + {extra} ({layer_words})"
    if layers:
        return False, f"not a multiple of the {layer_words}"
    return False, "no layer count known (give --layers N or --config config.json)"
