"""Site ranges go around exactly the launching statements, and every line and column stays put."""

from __future__ import annotations

import traceback

import pytest
import torch

from tests.instrument.conftest import SAMPLE
from tracer.instrument.patch import iter_codes
from tracer.instrument.rewrite import rewrite_module
from tracer.instrument.runtime import HELPER_NAME, install_helper
from tracer.model.ranges import site_range_name
from tracer.static import scan

POOL = "sglang/srt/mem_cache/memory_pool.py"


def _code_table(code):
    return {(c.co_name, c.co_firstlineno): c for c in iter_codes(code)}


def test_a_real_sglang_module_keeps_every_line_and_column(sglang_root):
    path = sglang_root / POOL
    source = path.read_bytes()
    sites = scan([path], cache_dir=False).sites
    result = rewrite_module(source, sites, str(path))
    assert len(result.placed) + len(result.skipped) == len(sites)
    assert len(result.placed) > 150  # nearly all of the pool's sites are in plain statements
    original = _code_table(compile(source, str(path), "exec", dont_inherit=True))
    ranged = _code_table(result.compile(str(path)))
    assert original.keys() == ranged.keys()  # same functions, same first lines
    for key, code in original.items():
        new = ranged[key]
        assert {line for *_, line in code.co_lines() if line} == {line for *_, line in new.co_lines() if line}
        assert set(code.co_positions()) <= set(new.co_positions())  # columns too
        assert code.co_varnames == new.co_varnames and code.co_freevars == new.co_freevars
    # The KV pool's store-side cast got its range, named by id, path and line.
    store_cast = next(s for s in sites if s.line == 2931 and s.text == "cache_k.to(self.dtype)")
    set_kv = next(
        c
        for (name, _), c in ranged.items()
        if name == "set_kv_buffer" and site_range_name(store_cast) in c.co_consts
    )
    assert HELPER_NAME in set_kv.co_names


def test_tracebacks_name_the_original_lines(sample_sites, sample_package):
    path = sample_package / "sites.py"
    result = rewrite_module(path.read_bytes(), sample_sites, str(path))
    namespace: dict = {"__name__": "ktsample_rewritten"}
    install_helper(namespace)
    exec(result.compile(str(path)), namespace)
    with pytest.raises(ValueError) as raised:  # a statement after the ranged ones (line 8)
        namespace["cast_then_fail"](torch.ones(3), fail=True)
    assert traceback.extract_tb(raised.tb)[-1].lineno == 8
    assert traceback.extract_tb(raised.tb)[-1].line == 'raise ValueError("after the ranged statements")'
    with pytest.raises(AttributeError) as raised:  # inside a ranged statement (line 5): `x.to(...)`
        namespace["cast_then_fail"](object(), fail=False)
    frame = traceback.extract_tb(raised.tb)[-1]
    assert (frame.lineno, frame.line) == (5, "y = x.to(torch.bfloat16)")
    assert (frame.colno, frame.end_colno) == (8, 12)  # the caret still underlines `x.to`


def test_sites_that_no_statement_range_can_bracket_are_skipped_with_a_reason(sample_sites, sample_package):
    path = sample_package / "sites.py"
    result = rewrite_module(path.read_bytes(), sample_sites, str(path))
    reasons = {(s.site.line, s.site.text): s.reason for s in result.skipped}
    assert reasons[(13, "x.float()")].startswith("in the header of a `if` statement")
    assert reasons[(17, "x.contiguous()")].startswith("in the header of a `for` statement")
    assert reasons[(15, "t.float()")].startswith("inside a lambda")
    assert reasons[(23, "x.float()")].startswith("the statement suspends")
    assert reasons[(28, "x.float()")].startswith("inside a torch.compile/JIT function")
    placed = {(s.line, s.text) for s in result.placed}
    assert {(5, "x.to(torch.bfloat16)"), (6, "y.contiguous()")} <= placed
    # Four sites share line 16's statement: one range, named after the riskiest, and the report says so.
    (shared,) = result.shared
    assert {s.line for s in shared} == {16} and len(shared) == 4
    assert shared[0].text == "x.double().float()" and shared[0].risk == max(s.risk for s in shared)


def test_the_rewrite_leaves_the_file_and_its_source_untouched(sample_package, sample_sites):
    path = sample_package / "sites.py"
    before = path.read_text()
    rewrite_module(path.read_bytes(), sample_sites, str(path)).compile(str(path))
    assert path.read_text() == before == SAMPLE
