"""How many files import each module (`tracer/join/importers.py`): the order among copies that tie."""

from __future__ import annotations

from pathlib import Path

from tracer.join.importers import importer_counts, module_name


def test_relative_absolute_and_submodule_imports_are_counted_once_per_importer() -> None:
    files = [
        ("pkg/__init__.py", ""),
        ("pkg/layers/act.py", "def silu(x): ...\n"),
        ("pkg/models/a.py", "from ..layers.act import silu\nfrom ..layers import act\n"),
        ("pkg/models/b.py", "import pkg.layers.act as act\n"),
        ("pkg/models/c.py", "from pkg.layers.act import (\n    silu,\n)\nfrom . import a\n"),
    ]
    counts = importer_counts(files)
    assert counts["pkg/layers/act.py"] == 3  # a.py twice, b.py, c.py: three files
    assert counts["pkg/models/a.py"] == 1  # ``from . import a`` in c.py
    assert module_name("pkg/__init__.py") == "pkg"


def test_transformers_llama_is_the_model_file_others_import(transformers_src: Path) -> None:
    root = transformers_src
    files = [(str(p.relative_to(root)), p.read_text()) for p in (root / "transformers/models").rglob("*.py")]
    counts = importer_counts(files)
    llama = counts["transformers/models/llama/modeling_llama.py"]
    assert llama > 50  # the modular files of the models made from it
    assert llama > 5 * counts["transformers/models/qwen2/modeling_qwen2.py"]
