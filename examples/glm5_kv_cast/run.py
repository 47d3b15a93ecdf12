"""Run (and optionally profile) decode steps of the GLM-5-shaped KV-cast example.

    python -m examples.glm5_kv_cast.run --preset cpu-small --variant cast_whole --steps 4 \
        [--device cpu|cuda] [--profile OUT.json.gz] [--with-stack] [--warmup 1]
    python -m examples.glm5_kv_cast.run --preset gpu-full --variant cast_whole --device cuda --cuda-graph
    python -m examples.glm5_kv_cast.run --write-configs examples/glm5_kv_cast/configs
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from examples.glm5_kv_cast.model import PRESETS, VARIANTS, DecodeModel, Preset
from examples.glm5_kv_cast.profiling import profile_decode_steps, time_decode_steps

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"


def write_hf_config(preset: Preset, path: str | Path) -> Path:
    """Writes the preset's HuggingFace-style config.json (num_hidden_layers etc.) to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(preset.hf_config(), indent=2) + "\n")
    return path


def write_all_configs(directory: str | Path = CONFIGS_DIR) -> list[Path]:
    """One `<preset>/config.json` per preset under `directory`."""
    return [
        write_hf_config(preset, Path(directory) / name / "config.json") for name, preset in PRESETS.items()
    ]


def time_graph_replays(
    model: DecodeModel, token_hidden: torch.Tensor, steps: int, first_step: int
) -> list[float]:
    """Captures one decode step in a CUDA graph (as serving engines decode) and times `steps` replays.

    Each replay's time comes from CUDA events around it, so it is GPU time without host launch cost.
    """
    out_loc, kv_indices = model.positions(first_step)
    static_out_loc, static_kv_indices = out_loc.clone(), kv_indices.clone()
    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(token_hidden, static_out_loc, static_kv_indices)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model(token_hidden, static_out_loc, static_kv_indices)
        times_ms = []
        for step in range(first_step, first_step + steps):
            new_out_loc, new_kv_indices = model.positions(step)
            static_out_loc.copy_(new_out_loc)
            static_kv_indices.copy_(new_kv_indices)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times_ms.append(start.elapsed_time(end))
    return times_ms


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m examples.glm5_kv_cast.run", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu-small")
    parser.add_argument("--variant", choices=VARIANTS, default="cast_whole")
    parser.add_argument("--steps", type=int, default=4, help="measured (and profiled) decode steps")
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="unmeasured decode steps before the measured ones"
    )
    parser.add_argument("--profile", metavar="OUT.json[.gz]", help="write a torch.profiler Chrome trace here")
    parser.add_argument("--with-stack", action="store_true", help="record Python stacks in the trace")
    parser.add_argument(
        "--cuda-graph",
        action="store_true",
        help="time CUDA-graph replays of the step (cuda only; no profile)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--write-configs", metavar="DIR", help="write <preset>/config.json for every preset and exit"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.write_configs:
        for path in write_all_configs(args.write_configs):
            print(path)
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda given but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    if args.cuda_graph and (args.device != "cuda" or args.profile):
        print("error: --cuda-graph needs --device cuda and no --profile", file=sys.stderr)
        return 2
    preset = PRESETS[args.preset]
    model = DecodeModel(preset, args.variant, device=args.device, seed=args.seed)
    token_hidden = model.example_input()
    time_decode_steps(model, token_hidden, args.warmup)
    if args.cuda_graph:
        times_ms = time_graph_replays(model, token_hidden, args.steps, first_step=args.warmup)
        how = "CUDA-graph replays, CUDA-event timing"
    elif args.profile:
        times_ms = profile_decode_steps(
            model, token_hidden, args.steps, args.profile, args.with_stack, first_step=args.warmup
        )
        how = f"profiled, with_stack={args.with_stack}; trace: {args.profile}"
    else:
        times_ms = time_decode_steps(model, token_hidden, args.steps, first_step=args.warmup)
        how = "not profiled"
    print(
        f"{preset.name} {args.variant} on {args.device}: {preset.num_hidden_layers} layers, "
        f"mean decode step {statistics.mean(times_ms):.2f} ms over {len(times_ms)} steps ({how})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
