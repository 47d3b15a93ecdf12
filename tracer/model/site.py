"""`Site`: one place in source code that can launch a copy, cast or layout kernel."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Site:
    """A call or store found by the static scan, with what it lowers to and how risky it is.

    ``path`` is relative to the scan root's parent for packages (``sglang/srt/...``) so that it
    matches the file names profiler Python frames carry (``sglang/srt/...py(123): forward``).
    """

    path: str
    line: int
    col: int
    kind: str  # a rule's site kind: "to", "cast_method", "copy_", "contiguous", "cat", ...
    method: str  # the name the profiler shows for the call: "to", "float", "copy_", "cat", "__setitem__"
    function: str  # enclosing qualified name: "Class.method", "func", "<module>"
    def_line: int | None  # line of the enclosing function's `def` (profiler frames name it)
    receiver: str  # source text of the receiver (``self.pool.get_key_buffer(layer_id)``)
    args: tuple[str, ...] = ()  # source text of each argument, keywords as ``name=value``
    text: str = ""  # source text of the whole call / store
    end_line: int | None = None
    target_dtype: str | None = None  # "torch.bfloat16", or an expression kept as text: "q.dtype"
    target_device: str | None = None
    in_loop: bool = False
    aten_ops: tuple[str, ...] = ()  # outermost first: ("aten::to", "aten::_to_copy", "aten::copy_")
    kernel_families: tuple[str, ...] = ()  # ("unrolled_elementwise_kernel", ...)
    launches_kernel: bool = True  # False for zero-copy sites such as ``.view(dtype)``
    rule: str = ""  # rule code, e.g. "KT101"
    risk: float = 0.0  # 0..100, higher = more likely hot and wasteful
    reasons: tuple[str, ...] = field(default_factory=tuple)  # the risk score in words
    nth: int = 0  # index among sites with the same text in the same function (keeps ids unique)

    @property
    def id(self) -> str:
        """Stable id: survives edits elsewhere in the file (no line number in it)."""
        return site_id(self.path, self.function, self.kind, self.text, self.nth)

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["id"] = self.id
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Site:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for name in ("args", "aten_ops", "kernel_families", "reasons"):
            if name in fields and fields[name] is not None:
                fields[name] = tuple(fields[name])
        return cls(**fields)


def site_id(path: str, function: str, kind: str, text: str, nth: int = 0) -> str:
    digest = hashlib.blake2b(f"{path}\0{function}\0{kind}\0{text}\0{nth}".encode(), digest_size=5)
    return digest.hexdigest()
