"""The model's structure as far as a trace or config shows it: layer count, where the layers ran,
experts, top-k, tokens."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracer.errors import InputError
from tracer.model.events import Cat, Trace

if TYPE_CHECKING:
    import numpy as np

_LAYER_RANGE = re.compile(r"(?:^|[^A-Za-z])layers?[._\[/](\d+)(?:$|[^0-9])")
_LAYER_MODULE = re.compile(r"^nn\.Module: (\w*?(?:DecoderLayer|EncoderLayer|Layer|Block))_(\d+)$")
_TOKENS = re.compile(r"\bbs=(\d+)")

LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers")
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts", "n_experts")
TOPK_KEYS = ("num_experts_per_tok", "moe_topk", "top_k", "num_experts_per_token")


@dataclass(frozen=True)
class LayerMarks:
    """Where the trace marks its layers: the span (trace ns) and number of each layer range or
    decoder-layer module frame, in start order. Step detection asks how many whole sets of layers a
    span holds; the cross-checks count them per step."""

    count: int  # distinct layer numbers
    source: str  # "ranges layers.N", "nn.Module LlamaDecoderLayer"
    starts_ns: np.ndarray
    ends_ns: np.ndarray
    index: np.ndarray  # 0..count-1, by order of first appearance
    middle_ns: np.ndarray = field(repr=False)  # the marks' middles, ascending
    by_middle: np.ndarray = field(repr=False)  # their layer numbers, in that order

    def sets_within(self, start_ns: int, end_ns: int) -> tuple[int, int]:
        """(distinct layers, most runs of one layer) among the marks whose middle is in [start_ns,
        end_ns) (a step found from its kernels starts at its first kernel, inside its first layer's range)."""
        import numpy as np

        middle = self.middle_ns
        lo = int(np.searchsorted(middle, start_ns, side="left"))
        hi = int(np.searchsorted(middle, end_ns, side="left"))
        inside = self.by_middle[lo:hi]
        if not len(inside):
            return 0, 0
        runs = np.bincount(inside)
        return int((runs > 0).sum()), int(runs.max())


@dataclass(frozen=True)
class ModelShape:
    """Counts that calls per step can be explained by; None where unknown."""

    layers: int | None = None
    layers_source: str | None = (
        None  # "--layers", "config.json", "ranges layers.N", "nn.Module LlamaDecoderLayer", "kernel sequence: ..."
    )
    moe_layers: int | None = None  # layers with routed experts (DeepSeek: layers - first_k_dense_replace)
    experts: int | None = None
    experts_per_token: int | None = None
    tokens_per_step: int | None = None  # batch size of decode steps (SGLang step names: bs=N)
    marks: LayerMarks | None = field(default=None, compare=False, repr=False)
    # The steps' evidence disagrees (tracer.explain.invariants.check_steps): counts are worded "~78".
    approximate: bool = False


def find_model_shape(
    trace: Trace,
    *,
    layers: int | None = None,
    config: Path | None = None,
) -> ModelShape:
    """Layer count from --layers, else the config, else ``layers.N`` ranges, else decoder-layer modules.

    The trace's own layer marks are kept either way: the step cross-checks compare them with the count.
    """
    fields: dict[str, Any] = {}
    if config is not None:
        fields = _read_config(Path(config))
    marks = find_layer_marks(trace)
    source = None
    if layers is not None:
        if layers <= 0:
            raise InputError("--layers", f"must be a positive layer count, not {layers}")
        source = "--layers"
    elif fields.get("layers"):
        layers, source = fields["layers"], Path(config).name if config else "config"
    elif marks is not None:
        layers, source = marks.count, marks.source
    moe_layers = None
    if fields.get("experts") and layers:
        moe_layers = max(0, layers - int(fields.get("first_k_dense", 0) or 0))
    return ModelShape(
        layers=layers,
        layers_source=source,
        moe_layers=moe_layers,
        experts=fields.get("experts"),
        experts_per_token=fields.get("top_k"),
        marks=marks,
    )


def config_architectures(path: Path) -> tuple[str, ...]:
    """The model classes a config names (HuggingFace's ``architectures``: ``MistralForCausalLM``; a
    multimodal config's language model's too); empty where it names none. Entries that are not class
    names are left out."""
    scopes = _config_scopes(_config_object(path))
    found = (
        name
        for scope in scopes
        if isinstance(scope.get("architectures"), list)
        for name in scope["architectures"]
    )
    return tuple(dict.fromkeys(name for name in found if isinstance(name, str) and name.isidentifier()))


def _config_object(path: Path) -> dict[str, Any]:
    from tracer.input_files import MAX_CONFIG_BYTES, read_json_side_input

    data = read_json_side_input(path, "--config", MAX_CONFIG_BYTES)  # a regular file, bounded, typed
    if not isinstance(data, dict):
        raise InputError(
            path, "not a JSON model config (expected an object such as HuggingFace's config.json)"
        )
    return data


def _config_scopes(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The config and the language model's part of it: multimodal configs keep its numbers (and
    classes) under text_config."""
    return [data] + [
        data[k] for k in ("text_config", "language_config", "llm_config") if isinstance(data.get(k), dict)
    ]


def _read_config(path: Path) -> dict[str, Any]:
    scopes = _config_scopes(_config_object(path))
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


def is_layer_range(name: str) -> bool:
    """``model.layers.3``, ``layer_3``, ``layers[3]``: a range that marks one layer (never a step)."""
    return _LAYER_RANGE.search(name) is not None


def find_layer_marks(trace: Trace) -> LayerMarks | None:
    """The layer ranges (``layers.N``: the family of names with the most layer numbers) or, without
    them, the decoder-layer module frames (``nn.Module: LlamaDecoderLayer_3``); None when the trace
    marks fewer than two layers."""
    from tracer.join.columns import column, rows_where, values_at
    from tracer.join.frame_names import frame_names

    events = trace.events
    cat = column(events.cat)
    range_rows = rows_where(cat, (Cat.USER_ANNOTATION,))
    range_names = values_at(events.name, range_rows)
    frames = frame_names(events)
    # A name both a range and a frame (rare) counts as what its first row is.
    frame_set = dict(frames.distinct)
    for name in set(range_names) & frame_set.keys():
        first = rows_where(cat, (Cat.USER_ANNOTATION, Cat.PYTHON_FUNCTION))
        row = next(r for r in first.tolist() if events.name[r] == name)
        if events.cat[row] == Cat.USER_ANNOTATION:
            frame_set.pop(name)
    families: dict[str, dict[str, int]] = defaultdict(dict)  # "model.layers.#" -> name -> layer number
    for name in dict.fromkeys(range_names):
        match = _LAYER_RANGE.search(name)
        if match and name not in frame_set:
            family = name[: match.start(1)] + "#" + name[match.end(1) :]
            families[family][name] = int(match.group(1))
    if families:
        family = max(families, key=lambda f: (len(families[f]), -len(f)))
        if len(families[family]) > 1:
            numbers = families[family]
            rows = [r for r, n in zip(range_rows.tolist(), range_names) if n in numbers]
            return _marks(trace, rows, [numbers[events.name[r]] for r in rows], "ranges layers.N")
    module_layers: dict[str, set[int]] = defaultdict(set)
    for name in frame_set:
        if name.startswith("nn.Module: "):
            match = _LAYER_MODULE.match(name)
            if match:
                module_layers[match.group(1)].add(int(match.group(2)))
    if not module_layers:
        return None
    # Prefer decoder layers; otherwise the layer class with the most instances.
    best = max(module_layers, key=lambda cls: ("DecoderLayer" in cls, len(module_layers[cls])))
    if len(module_layers[best]) < 2:
        return None
    wanted = {f"nn.Module: {best}_{n}": n for n in module_layers[best]}
    import numpy as np

    # One test per frame (a million in a long trace): in C, by map, not a Python loop per frame.
    is_layer = np.fromiter(map(wanted.__contains__, frames.names), dtype=bool, count=len(frames.names))
    rows = frames.rows[is_layer].tolist()
    return _marks(trace, rows, [wanted[events.name[r]] for r in rows], f"nn.Module {best}")


def _marks(trace: Trace, rows: list[int], numbers: list[int], source: str) -> LayerMarks:
    import numpy as np

    events = trace.events
    starts = np.asarray([events.ts_ns[r] for r in rows], dtype=np.int64)
    ends = starts + np.asarray([events.dur_ns[r] for r in rows], dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    _, index = np.unique(np.asarray(numbers, dtype=np.int64), return_inverse=True)
    index = index.reshape(-1)
    middle = starts + (ends - starts) // 2
    by_middle = np.argsort(middle, kind="stable")
    return LayerMarks(
        int(index.max()) + 1,
        source,
        starts[order],
        ends[order],
        index[order],
        middle[by_middle],
        index[by_middle],
    )


def tokens_per_step(labels: tuple[str, ...]) -> int | None:
    """The batch size SGLang's step names carry (``step[DECODE bs=8]``) when all steps agree."""
    sizes = {int(m.group(1)) for label in labels if (m := _TOKENS.search(label))}
    return sizes.pop() if len(sizes) == 1 else None
