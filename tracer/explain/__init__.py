"""The explain stage: origins -> findings (steps, invariants, bytes and bandwidth, waste)."""

from tracer.explain.analyse import analyse

__all__ = ["analyse"]
