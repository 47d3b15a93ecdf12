"""Record real transformers models (tiny random configs, no download): forward and generate.

    python3 -m bench.corpus.capture_transformers --out tests/fixtures/corpus/transformers [--models llama,gpt2]

Writes ``OUT/torch<major.minor>/<model>_<forward|generate>.json.gz`` and ``.truth.json``. The models'
source is the installed transformers package (``module:transformers`` in the truth files).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script: import from the repository, not from this folder
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
    sys.path.insert(0, str(REPO))

import torch

from bench.corpus.capture_zoo import pick, print_recording, torch_tag
from bench.corpus.recorder import Workload, record

VOCAB, BATCH, PROMPT = 128, 2, 6
_DENSE = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}
# model -> (config class name, config keywords): each as small as the architecture allows.
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", _DENSE),
    "mistral": ("MistralConfig", _DENSE),
    "qwen2": ("Qwen2Config", _DENSE),
    "qwen3": ("Qwen3Config", dict(_DENSE, head_dim=8)),
    "gemma2": ("Gemma2Config", dict(_DENSE, head_dim=8, sliding_window=4)),
    "phi3": ("Phi3Config", dict(_DENSE, pad_token_id=0)),
    "olmo": ("OlmoConfig", dict(_DENSE, pad_token_id=0)),
    "gpt2": ("GPT2Config", {"vocab_size": VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}),
    "opt": (
        "OPTConfig",
        {
            "vocab_size": VOCAB,
            "hidden_size": 32,
            "ffn_dim": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "word_embed_proj_dim": 32,
            "max_position_embeddings": 64,
        },
    ),
    "gpt_neox": (
        "GPTNeoXConfig",
        {
            "vocab_size": VOCAB,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 64,
            "rotary_pct": 0.5,
        },
    ),
    "bloom": ("BloomConfig", {"vocab_size": VOCAB, "hidden_size": 32, "n_layer": 2, "n_head": 4}),
    "mixtral": ("MixtralConfig", dict(_DENSE, num_local_experts=4, num_experts_per_tok=2)),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        dict(
            _DENSE,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=32,
            decoder_sparse_step=1,
        ),
    ),
    "deepseek_v3": (
        "DeepseekV3Config",
        dict(
            _DENSE,
            num_key_value_heads=4,
            moe_intermediate_size=16,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            first_k_dense_replace=1,
            n_group=2,
            topk_group=1,
            q_lora_rank=16,
            kv_lora_rank=16,
            qk_rope_head_dim=4,
            qk_nope_head_dim=4,
            v_head_dim=8,
        ),
    ),
}

# Models the no-stack join was never tuned on (issue 15's overfitting check): captured apart
# (``--set holdout``, into tests/fixtures/holdout), split into dev and check models by
# `bench.corpus.holdout`. Each as small as its architecture allows.
_TINY_GPT = {"vocab_size": VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}
HOLDOUT_MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "falcon": ("FalconConfig", {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4}),
    "gptj": ("GPTJConfig", dict(_TINY_GPT, rotary_dim=4)),
    "gpt_bigcode": ("GPTBigCodeConfig", _TINY_GPT),
    "stablelm": ("StableLmConfig", _DENSE),
    "starcoder2": ("Starcoder2Config", _DENSE),
    "cohere": ("CohereConfig", _DENSE),
    "granite": ("GraniteConfig", _DENSE),
    "gemma": ("GemmaConfig", dict(_DENSE, head_dim=8)),
    "phi": ("PhiConfig", _DENSE),
    "qwen3_moe": ("Qwen3MoeConfig", dict(_DENSE, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)),
    "olmo2": ("Olmo2Config", dict(_DENSE, pad_token_id=0)),
    "smollm3": ("SmolLM3Config", dict(_DENSE, pad_token_id=0)),
    "glm": ("GlmConfig", dict(_DENSE, head_dim=8, pad_token_id=0)),
    "nemotron": ("NemotronConfig", dict(_DENSE, head_dim=8)),
    "codegen": ("CodeGenConfig", dict(_TINY_GPT, rotary_dim=4)),
    "mpt": ("MptConfig", {"vocab_size": VOCAB, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 64}),
    "gemma3": ("Gemma3TextConfig", dict(_DENSE, head_dim=8, sliding_window=4)),
    "ernie4_5": ("Ernie4_5Config", dict(_DENSE, head_dim=8)),
    "exaone4": ("Exaone4Config", dict(_DENSE, head_dim=8, sliding_window=4)),
    "helium": ("HeliumConfig", dict(_DENSE, head_dim=8)),
    "granitemoe": ("GraniteMoeConfig", dict(_DENSE, num_local_experts=4, num_experts_per_tok=2)),
    "olmoe": ("OlmoeConfig", dict(_DENSE, num_experts=4, num_experts_per_tok=2, pad_token_id=0)),
}  # fmt: skip
SETS = {"corpus": MODELS, "holdout": HOLDOUT_MODELS}


def model_spec(model: str) -> tuple[str, dict[str, Any]]:
    """(config class name, config keywords) of a corpus or hold-out model."""
    return MODELS.get(model) or HOLDOUT_MODELS[model]


def transformers_source(name: str) -> Path | None:
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))).parent / name
    return path if path.is_file() else None


def source_roots() -> list[str]:
    """The truth files' source root: this transformers version (the bench finds its source)."""
    import transformers

    return [f"package:transformers=={transformers.__version__}"]


def build_model(model: str, device: torch.device, dtype: torch.dtype = torch.bfloat16):
    import transformers

    config_name, options = model_spec(model)
    config = getattr(transformers, config_name)(**options)
    built = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return built.to(device).eval()


def model_workload(model: str, kind: str) -> Workload:
    """`forward`: 2 profiled calls on a (2, 6) prompt; `generate`: 1 call, 3 new tokens, greedy."""

    def build(device: torch.device) -> Callable[[int], Any]:
        net = build_model(model, device)
        ids = torch.randint(1, VOCAB, (BATCH, PROMPT), device=device)
        mask = torch.ones_like(ids)

        def forward(step: int):
            with torch.no_grad():
                return net(input_ids=ids, attention_mask=mask).logits

        def generate(step: int):
            return net.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0
            )

        return forward if kind == "forward" else generate

    import transformers

    return Workload(
        name=f"{model}_{kind}",
        build=build,
        steps=2 if kind == "forward" else 1,
        warmup=1,
        about=f"transformers {transformers.__version__} {model_spec(model)[0]} (tiny, random, bf16): "
        + ("2 x forward of a (2, 6) prompt" if kind == "forward" else "generate(max_new_tokens=3), greedy"),
        extra={
            "family": "transformers",
            "model": model,
            "kind": kind,
            "transformers": transformers.__version__,
        },
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", help="comma-separated (default: all)")
    parser.add_argument("--kinds", default="forward,generate")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--set",
        choices=tuple(SETS),
        default="corpus",
        help="holdout: models the no-stack join was never tuned on",
    )
    args = parser.parse_args(argv)
    import transformers

    transformers.logging.set_verbosity_error()
    device = torch.device(args.device)
    torch.set_num_threads(1)
    out = args.out / torch_tag()
    for model in pick(args.models, SETS[args.set]):
        for kind in args.kinds.split(","):
            workload = model_workload(model, kind)
            rec = record(
                workload,
                out,
                device=device,
                source_roots=source_roots(),
                find_source=transformers_source,
            )
            print_recording(rec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
