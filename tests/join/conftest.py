"""The join's tests: static sites of tests/trace_models.py, whose CPU runs the shared fixtures profile."""

from __future__ import annotations

from pathlib import Path

import pytest

TRACE_MODELS = Path(__file__).resolve().parents[1] / "trace_models.py"


def scan_sites(paths):
    """Static sites of `paths` from the project's scanner."""
    from tracer.static import scan

    return list(scan([Path(p) for p in paths]).sites)


@pytest.fixture(scope="session")
def model_sites() -> list:
    return scan_sites([TRACE_MODELS])


@pytest.fixture(scope="session")
def import_from_package():
    """A function that imports module `name` (``pkg.mod``) of a package written under `root`'s parent."""

    def load(root: Path, name: str):
        import importlib
        import sys

        sys.path.insert(0, str(root.parent))
        try:
            return importlib.import_module(name)
        finally:
            sys.path.remove(str(root.parent))

    return load


@pytest.fixture(scope="session")
def write_package(tmp_path_factory):
    """A function that writes package `name` (an ``__init__.py`` and each ``{module: source}``, dedented)
    under a new temporary folder and returns its root."""

    def write(name: str, modules: dict[str, str]) -> Path:
        import textwrap

        root = tmp_path_factory.mktemp(name) / name
        root.mkdir()
        (root / "__init__.py").write_text("")
        for module, source in modules.items():
            (root / f"{module}.py").write_text(textwrap.dedent(source))
        return root

    return write


@pytest.fixture(scope="session")
def nostack_scores():
    """A function that scores corpus trace `name` (``family/torch/trace``) with every Python frame
    stripped (`bench/corpus/scoring.py`), the test skipped when the corpus lacks it; `mode` ``named``:
    the model named too, as ``--config`` names it; `corpus`: another corpus's folder (the hold-out's)."""
    from bench.corpus.scoring import CORPUS, find_corpus, score_trace

    def score(name: str, mode: str = "nostack", corpus: Path = CORPUS):
        family = name.split("/", 1)[0]
        trace = next((t for t in find_corpus(corpus, [family]) if t.name == name), None)
        if trace is None:
            pytest.skip(f"the corpus's {name} trace is missing")
        return score_trace(trace, (mode,)).scores[mode]

    return score
