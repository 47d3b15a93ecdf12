"""Fixtures of the instrumentation tests: small real modules with sites, written to disk and scanned."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tracer.static import scan

# Line numbers below are asserted by the tests: keep the text as it is.
SAMPLE = textwrap.dedent(
    """\
    import torch


    def cast_then_fail(x, fail):
        y = x.to(torch.bfloat16)
        z = y.contiguous()
        if fail:
            raise ValueError("after the ranged statements")
        return z


    def headers(x, xs):
        if x.float().sum() > 0:
            x = x + 1
        scale = lambda t: t.float()  # noqa: E731
        both = torch.cat([x.float(), x.double().float()])
        for part in x.contiguous():
            pass
        return scale, both


    def generator(x):
        yield x.float()


    @torch.compile
    def compiled(x):
        return x.float()
    """
)


@pytest.fixture
def sample_package(tmp_path, monkeypatch):
    """A package `ktsample` with module `sites` (SAMPLE) on sys.path; removed from sys.modules after."""
    package = tmp_path / "ktsample"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sites.py").write_text(SAMPLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    for name in [n for n in sys.modules if n == "ktsample" or n.startswith("ktsample.")]:
        del sys.modules[name]


@pytest.fixture
def sample_sites(sample_package):
    return scan([sample_package / "sites.py"], cache_dir=False).sites


def user_ranges(path: Path) -> list[str]:
    from tracer.load import load_trace
    from tracer.model.events import Cat

    table = load_trace(path).events
    return [table.name[r] for r in range(len(table)) if table.cat[r] == Cat.USER_ANNOTATION]
