"""CUDA-graph replays: each replayed kernel -> the capture-time launch, and so the line, behind it.

`attribute` joins replays with their captures, `capture` reads the captured launches, `align` places
replay kernels on capture launches when Kineto wrote no graph node ids, `report` says how it went;
`compiled` gives replays of torch.compile'd code their fused lines by kernel name.
"""

from tracer.join.replay.attribute import attribute_replays

__all__ = ["attribute_replays"]
