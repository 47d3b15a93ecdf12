"""Where per-rank work runs: a process pool on this machine (`local`) or tasks on a Ray cluster (`ray`).

An engine takes `RankJob`s and a task (`tracer.ranks.explain_rank_job`) and returns each job's
outcome (its result or its `InputError`) in job order; it knows nothing of what the task computes."""

from tracer.engines.job import ENGINES, Outcome, RankJob, RankTask

__all__ = ["ENGINES", "Outcome", "RankJob", "RankTask"]
