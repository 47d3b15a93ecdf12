"""Options the trace-reading commands share (--source, --sites, ..., -o, --top) and default output names."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._+-]+")
MAX_STEM = 160

OptionDecorator = Callable[[Callable[..., Any]], Callable[..., Any]]

source_option = click.option(
    "--source",
    "source",
    multiple=True,
    type=click.Path(exists=True, file_okay=True, dir_okay=True),
    help="Root of the code that ran (repeatable): finds source lines and scans for sites.",
)
sites_option = click.option(
    "--sites",
    type=click.Path(exists=True, dir_okay=False),
    help="Sites file from `kerneltrace scan`.",
)
config_option = click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False),
    help="Model config.json: its layer count, and the model its architectures name (traces without stacks).",
)
capture_option = click.option(
    "--capture",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Trace of the profiled CUDA-graph capture, when TRACE holds only the replays (repeatable).",
)


class PositiveNumber(click.ParamType):
    """A finite number above 0 (click's FloatRange lets nan and inf through)."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number) or number <= 0:
            self.fail(f"{value!r} is not a finite number above 0", param, ctx)
        return number


@dataclass(frozen=True)
class TraceOptions:
    """How to analyse a trace: what `trace_options` collected, passed to `tracer.api.explain_trace`."""

    source: tuple[str, ...] = ()
    sites: str | None = None
    layers: int | None = None
    config: str | None = None
    step_range: str | None = None
    peak_gbps: float | None = None
    capture: tuple[str, ...] = ()
    window: str | None = None  # "START_MS:END_MS" (tracer.load.TraceWindow.parse)
    steps: str | None = None  # "N-M": ProfilerStep#N..#M

    def trace_window(self):  # -> tracer.load.TraceWindow | None; InputError for a malformed value
        from tracer.load.window import TraceWindow

        return TraceWindow.parse(self.window, self.steps)

    def explain_arguments(self) -> dict[str, Any]:
        """The keyword arguments of `tracer.api.explain_trace` (and `explain_ranks`) these stand for."""
        return {
            "source": self.source,
            "sites": self.sites,
            "layers": self.layers,
            "config": self.config,
            "step_range": self.step_range,
            "peak_gbps": self.peak_gbps,
            "capture": self.capture or None,
            "window": self.trace_window(),
        }


_OPTION_NAMES = tuple(TraceOptions.__dataclass_fields__)


def trace_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the options every trace-reading command shares; the command gets them as `options`."""

    @functools.wraps(func)
    def collected(*args: Any, **kwargs: Any) -> Any:
        options = TraceOptions(**{name: kwargs.pop(name) for name in _OPTION_NAMES})
        return func(*args, options=options, **kwargs)

    decorators: list[OptionDecorator] = [
        source_option,
        sites_option,
        click.option(
            "--layers", type=click.IntRange(min=1), help="Number of model layers (explains calls/step)."
        ),
        config_option,
        click.option("--step-range", help="Name (or prefix) of the record_function range that is one step."),
        click.option("--peak-gbps", type=PositiveNumber(), help="Device peak bandwidth, GB/s."),
        capture_option,
        *window_options(),
    ]
    command: Callable[..., Any] = collected
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def window_options() -> list[OptionDecorator]:
    """--window and --steps: load only part of a trace (one too big for memory, or one step)."""
    return [
        click.option(
            "--window",
            metavar="START_MS:END_MS",
            help="Load only this time window (ms after the trace's first timestamp): events outside it "
            "are dropped while parsing, so traces bigger than memory can be explained piece by piece.",
        ),
        click.option(
            "--steps",
            metavar="N-M",
            help="Load only ProfilerStep#N..#M (or one step: N), dropped while parsing like --window.",
        ),
    ]


def output_option(help: str) -> OptionDecorator:
    """-o/--output: the one file a command writes; `help` says what goes there and its default name."""
    return click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help=help)


def top_option(default: int | None, help: str, name: str = "--top") -> OptionDecorator:
    """--top N (N >= 1): how many findings or origins a command shows or draws."""
    return click.option(
        name, type=click.IntRange(min=1), default=default, show_default=default is not None, help=help
    )


def min_share_option(help: str) -> OptionDecorator:
    """--min-share PERCENT: findings under it fold into one 'other' node of the drawn graph."""
    return click.option(
        "--min-share", type=click.FloatRange(min=0, max=100), default=0.5, show_default=True, help=help
    )


def analyse(trace: str | Path, options: TraceOptions):  # -> tracer.model.Analysis
    """The `Analysis` of `trace` through the one facade every command uses."""
    from tracer.api import explain_trace
    from tracer.cli.common import progress_line

    protect_inputs(trace, options)
    with progress_line(then="joining and explaining..."):
        return explain_trace(trace, **options.explain_arguments())


def protect_inputs(trace: str | Path, options: TraceOptions) -> None:
    """No output of this command may overwrite what it reads (the trace, a directory's traces, ...)."""
    from tracer.output_files import protect_inputs as protect

    protect([trace, Path(trace) / "graph_capture_profile", options.sites, options.config, *options.capture])


def derived_output(trace: str, suffix: str, directory: str | Path = ".") -> Path:
    """A default output name made from the trace's name: only safe characters, inside `directory`."""
    name = Path(trace).name
    for ending in (".gz", ".json", ".pt.trace"):
        if name.lower().endswith(ending):
            name = name[: -len(ending)]
    # Only [A-Za-z0-9._+-]: no separators, so the name cannot leave `directory`; short enough for
    # any file system's 255-byte limit (a trace named by a generated id can be longer).
    stem = _UNSAFE_NAME.sub("_", name).strip("._-")[:MAX_STEM] or "trace"
    return Path(directory) / f"{stem}{suffix}"
