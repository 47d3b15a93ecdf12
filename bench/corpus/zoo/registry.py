"""`SHAPES`: every zoo shape by name, with what it exercises; shapes register with `@shape`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

Step = Callable[[int], Any]


@dataclass(frozen=True)
class Shape:
    """One code shape: `build(device)` makes fresh state and returns ``step(i)``."""

    name: str
    exercises: str
    build: Callable[[torch.device], Step]
    module: str
    steps: int = 4
    warmup: int = 1


SHAPES: dict[str, Shape] = {}


def shape(name: str, exercises: str, *, steps: int = 4, warmup: int = 1):
    """Register the decorated ``build(device) -> step`` as zoo shape `name`."""

    def register(build: Callable[[torch.device], Step]) -> Callable[[torch.device], Step]:
        if name in SHAPES:
            raise ValueError(f"zoo shape {name!r} registered twice")
        SHAPES[name] = Shape(name, exercises, build, build.__module__, steps, warmup)
        return build

    return register
