"""Without stacks, a class is looked up by name in the files that define it: the index of definitions
reads text, so a docstring's line that reads like one (``class property and while you ...``, in
libcst's `_codemod.py`) made that file the class's only holder, whose parsed classes lack it; reading
its attributes then raised ``KeyError`` (found by expanding every function of a site-packages folder:
`_attribute_bindings` on a class whose base was named so)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tracer.join.sites import SiteIndex
from tracer.join.source_lines import SourceLines
from tracer.join.stackless import StacklessRanker

BASE = """
from torch import nn

Base = nn.Module  # a class by assignment: no ``class Base`` in any file
"""

HELPERS = '''
def make():
    """Builds the model.

    class Base and its subclasses are made elsewhere: this line only reads like a class.
    """
    return None
'''

MODEL = """
from torch import nn

from .base import Base


class Model(Base):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.norm(self.proj(x)).sum()  # `norm`: no attribute of its own class
"""


def test_a_docstring_that_reads_like_a_class_defines_none(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in (("base", BASE), ("helpers", HELPERS), ("model", MODEL)):
        (package / f"{name}.py").write_text(textwrap.dedent(text))
    ranker = StacklessRanker(SiteIndex(), SourceLines([tmp_path]))
    model = next(f for f in ranker._all_files() if f.name.endswith("model.py"))
    ranker._parse_file(model)
    assert ranker._class("Base", model) is None  # not helpers.py's docstring
    forward = next(f for f in model.functions if f.owner == "Model" and f.name == "forward")
    expanded = ranker._expand(forward)  # raised KeyError: 'Base'
    assert expanded is not None
    assert {"proj", "norm", "sum"} <= {p.name for p in expanded.program.points}
