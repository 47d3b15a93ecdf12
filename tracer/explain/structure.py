"""The model's structure as far as a trace or config shows it: layer count, experts, top-k, tokens."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracer.errors import InputError
from tracer.model.events import Cat, Trace

_LAYER_RANGE = re.compile(r"(?:^|[^A-Za-z])layers?[._\[/](\d+)(?:$|[^0-9])")
_LAYER_MODULE = re.compile(r"^nn\.Module: (\w*?(?:DecoderLayer|EncoderLayer|Layer|Block))_(\d+)$")
_TOKENS = re.compile(r"\bbs=(\d+)")

LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers")
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts", "n_experts")
TOPK_KEYS = ("num_experts_per_tok", "moe_topk", "top_k", "num_experts_per_token")


@dataclass(frozen=True)
class ModelShape:
    """Counts that calls per step can be explained by; None where unknown."""

    layers: int | None = None
    layers_source: str | None = (
        None  # "--layers", "config.json", "ranges layers.N", "nn.Module LlamaDecoderLayer"
    )
    moe_layers: int | None = None  # layers with routed experts (DeepSeek: layers - first_k_dense_replace)
    experts: int | None = None
    experts_per_token: int | None = None
    tokens_per_step: int | None = None  # batch size of decode steps (SGLang step names: bs=N)


def find_model_shape(
    trace: Trace,
    *,
    layers: int | None = None,
    config: Path | None = None,
) -> ModelShape:
    """Layer count from --layers, else the config, else ``layers.N`` ranges, else decoder-layer modules."""
    fields: dict[str, Any] = {}
    if config is not None:
        fields = _read_config(Path(config))
    source = None
    if layers is not None:
        if layers <= 0:
            raise InputError("--layers", f"must be a positive layer count, not {layers}")
        source = "--layers"
    elif fields.get("layers"):
        layers, source = fields["layers"], Path(config).name if config else "config"
    else:
        layers, source = _layers_from_trace(trace)
    moe_layers = None
    if fields.get("experts") and layers:
        moe_layers = max(0, layers - int(fields.get("first_k_dense", 0) or 0))
    return ModelShape(
        layers=layers,
        layers_source=source,
        moe_layers=moe_layers,
        experts=fields.get("experts"),
        experts_per_token=fields.get("top_k"),
    )


def _read_config(path: Path) -> dict[str, Any]:
    from tracer.input_files import MAX_CONFIG_BYTES, read_json_side_input

    data = read_json_side_input(path, "--config", MAX_CONFIG_BYTES)  # a regular file, bounded, typed
    if not isinstance(data, dict):
        raise InputError(
            path, "not a JSON model config (expected an object such as HuggingFace's config.json)"
        )
    # Multimodal configs keep the language model's numbers under text_config.
    scopes = [data] + [
        data[k] for k in ("text_config", "language_config", "llm_config") if isinstance(data.get(k), dict)
    ]
    fields: dict[str, Any] = {}
    for name, keys in (("layers", LAYER_KEYS), ("experts", EXPERT_KEYS), ("top_k", TOPK_KEYS)):
        for scope in scopes:
            value = next((scope[k] for k in keys if _count(scope.get(k))), None)
            if value is not None:
                fields[name] = value
                break
    for scope in scopes:
        if _count(scope.get("first_k_dense_replace")) or scope.get("first_k_dense_replace") == 0:
            fields["first_k_dense"] = scope["first_k_dense_replace"]
            break
    if "layers" not in fields:
        raise InputError(path, f"no layer count in the config (looked for {', '.join(LAYER_KEYS)})")
    return fields


def _count(value: Any) -> bool:
    """A plausible count in a config: a positive int (not a bool), below a million."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1_000_000


def _layers_from_trace(trace: Trace) -> tuple[int | None, str | None]:
    from tracer.join.columns import column, rows_where, values_at
    from tracer.join.frame_names import frame_names

    events = trace.events
    cat = column(events.cat)
    # Names are tested once each (they repeat per step), as the category of their first row says.
    ranges = dict.fromkeys(values_at(events.name, rows_where(cat, (Cat.USER_ANNOTATION,))))
    frames = dict(frame_names(events).distinct)  # a copy: names may be dropped below
    for name in ranges.keys() & frames.keys():
        first = rows_where(cat, (Cat.USER_ANNOTATION, Cat.PYTHON_FUNCTION))
        row = next(r for r in first.tolist() if events.name[r] == name)
        (frames if events.cat[row] == Cat.USER_ANNOTATION else ranges).pop(name)
    range_layers: set[int] = set()
    module_layers: dict[str, set[int]] = defaultdict(set)
    for name in ranges:
        match = _LAYER_RANGE.search(name)
        if match:
            range_layers.add(int(match.group(1)))
    for name in frames:
        if name.startswith("nn.Module: "):
            match = _LAYER_MODULE.match(name)
            if match:
                module_layers[match.group(1)].add(int(match.group(2)))
    if len(range_layers) > 1:
        return len(range_layers), "ranges layers.N"
    if module_layers:
        # Prefer decoder layers; otherwise the layer class with the most instances.
        best = max(module_layers, key=lambda cls: ("DecoderLayer" in cls, len(module_layers[cls])))
        if len(module_layers[best]) > 1:
            return len(module_layers[best]), f"nn.Module {best}"
    return None, None


def tokens_per_step(labels: tuple[str, ...]) -> int | None:
    """The batch size SGLang's step names carry (``step[DECODE bs=8]``) when all steps agree."""
    sizes = {int(m.group(1)) for label in labels if (m := _TOKENS.search(label))}
    return sizes.pop() if len(sizes) == 1 else None
