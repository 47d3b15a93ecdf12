"""One rank trace to explain, and where: what an engine schedules and a task receives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tracer.errors import InputError

ENGINES = ("local", "ray")


@dataclass(frozen=True)
class RankJob:
    """One rank's trace (and its capture traces) with the arguments of `tracer.api.explain_trace`.

    `node`: the Ray node that holds the file (None: any node can read it, or the local engine);
    `json_bytes`: the trace's JSON size as its host measured it (None: measured where it runs)."""

    path: str
    captures: tuple[str, ...] = ()
    explain_kwargs: dict[str, Any] = field(default_factory=dict)
    node: str | None = None
    json_bytes: int | None = None


Outcome = Any  # the task's result (a `RankResult`), or the `InputError` saying why there is none
RankTask = Callable[[RankJob, "int | None"], Outcome]  # (job, memory budget in bytes) -> outcome


def failed(job: RankJob, problem: str) -> InputError:
    return InputError(job.path, problem)
