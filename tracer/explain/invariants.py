"""Structural invariants: "78 calls/step = once per layer (78 layers)", saying so when none fits, and
the cross-checks that keep the step count honest (steps x layers against the layer marks seen)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from tracer.explain.steps import Steps
from tracer.explain.structure import ModelShape


@dataclass(frozen=True)
class StepCheck:
    """What the cross-checks found, as sentences: what the layer marks confirm, what disagrees with
    the steps (then every calls/step is worded as approximate: "~78 calls/step"), and a layer count
    given against the trace's own (the counts stand; their meaning is in doubt)."""

    confirmed: tuple[str, ...] = ()
    disagreements: tuple[str, ...] = ()
    layer_doubts: tuple[str, ...] = ()

    @property
    def approximate(self) -> bool:
        return bool(self.disagreements)


def check_steps(steps: Steps, shape: ModelShape) -> StepCheck:
    """Steps x layers against the layer ranges or module frames seen, and the given layer count
    against the trace's own. A step holding less than one layer is impossible, so it is said, never
    printed beside a per-layer count as if both were true."""
    marks = shape.marks
    confirmed: list[str] = []
    disagreements: list[str] = []
    doubts = []
    if marks is not None and shape.layers and shape.layers != marks.count:
        doubts.append(
            f"{shape.layers} layers ({shape.layers_source}) but the trace marks {marks.count} ({marks.source})"
        )
    if marks is None or not len(steps):
        return StepCheck(tuple(confirmed), tuple(disagreements), tuple(doubts))
    if steps.clock != "cpu":
        # Kernels on the GPU clock (graph replays, the kernel period); the marks are where Python ran
        # on the CPU (a graph's capture, not its replays): nothing to count them against.
        return StepCheck(tuple(confirmed), tuple(disagreements), tuple(doubts))
    held = [marks.sets_within(s, e) for s, e in zip(steps.starts_ns, steps.ends_ns)]
    runs = [most for _, most in held]
    partial = [i for i, (distinct, _) in enumerate(held) if distinct < marks.count]
    inside = sum(_marks_inside(marks, s, e) for s, e in zip(steps.starts_ns, steps.ends_ns))
    if partial and len(partial) * 2 > len(steps):
        distinct = max(d for d, _ in held)
        disagreements.append(
            f"a step holds at most {distinct} of the {marks.count} layers ({marks.source}): less than one set "
            "of layers, which no step can be; these steps look like layers"
        )
    elif partial:
        which = ", ".join(str(i + 1) for i in partial[:5]) + (" ..." if len(partial) > 5 else "")
        disagreements.append(
            f"step{'s' if len(partial) > 1 else ''} {which} hold{'' if len(partial) > 1 else 's'} fewer than the "
            f"{marks.count} layers ({marks.source})"
        )
    elif max(runs) > 1:
        disagreements.append(
            f"a step runs the layers up to {max(runs)} times ({marks.source}): per-layer counts are per set"
        )
    elif inside != marks.count * len(steps):
        disagreements.append(
            f"{inside} layer marks ({marks.source}) in {len(steps)} steps, not {marks.count} per step"
        )
    else:
        confirmed.append(
            f"{inside} layer marks ({marks.source}) in the {len(steps)} steps = {marks.count} per step, one set of "
            "layers each"
        )
    return StepCheck(tuple(confirmed), tuple(disagreements), tuple(doubts))


def _marks_inside(marks, start: int, end: int) -> int:
    """Layer marks whose middle lies in [start, end) (as `LayerMarks.sets_within` counts them)."""
    import numpy as np

    return int(
        np.searchsorted(marks.middle_ns, end, side="left")
        - np.searchsorted(marks.middle_ns, start, side="left")
    )


def state_invariant(per_step: Sequence[int], shape: ModelShape, kinds: Sequence[str] = ()) -> str | None:
    """One sentence relating a kernel's calls in each step to the model's layers, experts or tokens.

    ``kinds``: each step's kind (`Steps.stages`); a kernel that runs only in the steps of some kinds
    is counted per step of those kinds. With ``shape.approximate`` the count is worded "~78".
    """
    if not per_step:
        return None
    active_steps = _own_kind_steps(per_step, kinds)
    counted = [per_step[i] for i in active_steps]
    steps = len(counted)
    active = [c for c in counted if c > 0]
    if not active:
        return None
    count, _ = Counter(active).most_common(1)[0]
    with_count = sum(1 for c in counted if c == count)
    tilde = "~" if shape.approximate else ""
    calls = f"{tilde}{count} call{'' if count == 1 else 's'}"
    if with_count == steps:
        head = f"{calls}/step"
    else:
        others = sorted({c for c in counted if c != count})
        spread = f"{others[0]}" if len(others) == 1 else f"{others[0]}-{others[-1]}"
        head = f"{calls} in {with_count} of {steps} steps (others {spread})"
    if steps < len(per_step):
        kind = {kinds[i] for i in active_steps}
        named = next(iter(kind)) if len(kind) == 1 and next(iter(kind)) not in ("", "other") else ""
        which = (
            f"{steps} {named + ' ' if named else ''}steps"
            if steps > 1
            else f"one {named + ' ' if named else ''}step"
        )
        head += f" in the {which} it runs in (of {len(per_step)})"
    matched, meaning = _explain_count(count, shape)
    return f"{head} = {meaning}" if matched else f"{head}: {meaning}"


def per_step_calls(per_step: Sequence[int], kinds: Sequence[str] = ()) -> float | None:
    """Mean calls per step, over the steps of the kinds the kernel runs in."""
    steps = _own_kind_steps(per_step, kinds)
    return sum(per_step[i] for i in steps) / len(steps) if steps else None


def _own_kind_steps(per_step: Sequence[int], kinds: Sequence[str]) -> list[int]:
    """The steps a kernel is counted over: all, unless it runs only in steps of some kinds (and in
    every step of those kinds), when only those."""
    every = list(range(len(per_step)))
    if not kinds or len(kinds) != len(per_step):
        return every
    running = {kinds[i] for i in every if per_step[i] > 0}
    if not running or running == set(kinds):
        return every
    own = [i for i in every if kinds[i] in running]
    if any(per_step[i] == 0 for i in own):
        return every
    return own


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
