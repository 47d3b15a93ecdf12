"""Where the rendering tests' real traces are, and the lines they name."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GPU = REPO / "tests" / "fixtures" / "gpu"
BUG = GPU / "glm5_cast_whole_stack.json.gz"
FIX = GPU / "glm5_gather_then_cast_stack.json.gz"
NOSTACK = GPU / "glm5_cast_whole_nostack.json.gz"
CPU_ONLY = REPO / "tests" / "fixtures" / "steps" / "profilerstep_6l.json.gz"
CAST_LINE = "examples/glm5_kv_cast/model.py:209"
FIX_LINE = "examples/glm5_kv_cast/model.py:214"
