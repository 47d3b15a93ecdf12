"""The fast path (regex + ast + libcst on snippets) finds exactly the sites of a whole-file libcst visit."""

from __future__ import annotations

import pytest

from tracer.static import scan_source
from tracer.static.fastscan import alias_pattern, hit_lines, prefilter_pattern


@pytest.mark.slow
def test_same_sites_with_and_without_prefilter(sglang_root, rules):
    directory = sglang_root / "sglang" / "srt" / "mem_cache"
    pattern, aliases = prefilter_pattern(rules), alias_pattern(rules)
    total = files_without_hits = 0
    for path in sorted(directory.rglob("*.py")):
        relative = path.relative_to(sglang_root).as_posix()
        source = path.read_bytes()
        fast = scan_source(source, relative, rules)
        reference = scan_source(source, relative, rules, prefilter=False)
        assert fast.skipped is None and not fast.notes, relative
        assert fast.sites == reference.sites, relative  # every field: lines, columns, text, context, risk
        total += len(fast.sites)
        files_without_hits += not hit_lines(source, pattern, aliases)
    assert total > 1000
    assert files_without_hits > 0  # the pre-filter did skip whole files


def test_aliased_torch_functions():
    source = "from torch import cat as join, stack\nimport torch as th\ndef f(a, b):\n    return join([a]), stack([b]), th.cat([a])\n"
    from tracer.static import load_rule_set

    rules = load_rule_set()
    fast = scan_source(source, "m.py", rules).sites
    assert fast == scan_source(source, "m.py", rules, prefilter=False).sites
    assert [(s.rule, s.method, s.text) for s in fast] == [
        ("KT301", "cat", "join([a])"),
        ("KT302", "stack", "stack([b])"),
        ("KT301", "cat", "th.cat([a])"),
    ]
