"""Every rule's VALID and INVALID examples, run through the real scanner (both paths), Fixit style:
an INVALID example states every finding expected in it (`line:col CODE`), a VALID one is not flagged."""

from __future__ import annotations

import pytest

from tracer.static import load_rule_set, scan_source

RULES = load_rule_set()
CASES = [
    (rule.code, "invalid", i, e.code, e.expect) for rule in RULES.rules for i, e in enumerate(rule.invalid)
] + [(rule.code, "valid", i, code, None) for rule in RULES.rules for i, code in enumerate(rule.valid)]


def test_every_rule_has_examples_and_docs():
    for rule in RULES.rules:
        assert rule.invalid and rule.valid, rule.code
        assert all(example.expect for example in rule.invalid), (
            f"{rule.code}: an INVALID example without expect"
        )
        assert {"what", "why", "example", "fix"} <= set(rule.explain), rule.code
        assert rule.aten_ops, rule.code


@pytest.mark.parametrize(
    ("code", "expect", "index", "source", "findings"), CASES, ids=[f"{c}-{e}{i}" for c, e, i, _, _ in CASES]
)
@pytest.mark.parametrize("prefilter", [True, False], ids=["fast", "reference"])
def test_example(code, expect, index, source, findings, prefilter):
    result = scan_source(source, "example.py", RULES, prefilter=prefilter)
    assert result.skipped is None
    found = [s.rule for s in result.sites]
    if expect == "invalid":
        assert code in found, f"{code} should flag:\n{source}"
        assert [f"{s.line}:{s.col} {s.rule}" for s in result.sites] == list(findings), source
    else:
        assert code not in found, f"{code} should not flag:\n{source}"


def test_example_site_fields():
    source = "def forward(self, q):\n    return self.pool.get_key_buffer(0).to(q.dtype)\n"
    (site,) = scan_source(source, "example.py", RULES).sites
    assert (site.rule, site.kind, site.method, site.line, site.col) == ("KT101", "to", "to", 2, 11)
    assert (site.function, site.def_line, site.receiver) == ("forward", 1, "self.pool.get_key_buffer(0)")
    assert site.target_dtype == "q.dtype" and site.args == ("q.dtype",)
    assert site.risk == 85
    assert site.reasons == (
        "+30 KT101 cast-to-dtype: `.to(dtype)` casts the receiver: one full read and one full write",
        "+35 receiver is a whole KV buffer (pool / cache), sized by the model and context",
        "+20 in a per-step/per-layer function",
    )


def test_user_rule_directory(tmp_path):
    (tmp_path / "mine.toml").write_text(
        """
family = "mine"
[[rule]]
code = "KTX01"
name = "permute-copy"
kind = "permute"
summary = "`.permute(...)` then a copy"
base = 5
[rule.match]
form = "method"
names = ["permute"]
[rule.lowers]
aten_ops = ["aten::permute"]
[rule.examples]
invalid = ["def f(x):\\n    return x.permute(1, 0)\\n"]
valid = ["def f(x):\\n    return x\\n"]
"""
    )
    rules = load_rule_set([tmp_path])
    assert rules.digest != RULES.digest and "permute" in rules.method_names
    (site,) = scan_source("def forward(x):\n    return x.permute(1, 0)\n", "m.py", rules).sites
    assert (site.rule, site.method, site.risk) == ("KTX01", "permute", 15)  # 5 + 20 hot - 10 activation `x`
    assert site.reasons[1:] == (
        "+20 in a per-step/per-layer function",
        "-10 receiver looks like a per-token activation (batch-sized)",
    )


@pytest.mark.parametrize("prefilter", [True, False], ids=["fast", "reference"])
def test_loops_and_scopes(prefilter):
    source = """import torch
class Pool:
    buf = torch.zeros(4).float()

    @staticmethod
    def f(xs, ys):
        a = [x.float() for x in ys.cpu()]
        for x in xs:
            x.half()
        else:
            xs.clone()
        while xs.cuda().sum():
            pass
        g = lambda t: t.contiguous()

        def inner(t):
            return t.long()

@triton.jit
def kernel(p):
    tl.load(p).to(tl.float32)
"""
    sites = {s.text: s for s in scan_source(source, "m.py", RULES, prefilter=prefilter).sites}
    assert set(sites) == {
        "torch.zeros(4).float()",
        "x.float()",
        "ys.cpu()",
        "x.half()",
        "xs.clone()",
        "xs.cuda()",
        "t.contiguous()",
        "t.long()",
    }
    assert (sites["torch.zeros(4).float()"].function, sites["torch.zeros(4).float()"].def_line) == ("Pool", 2)
    loops = {text for text, s in sites.items() if s.in_loop}
    assert loops == {"x.float()", "x.half()", "xs.cuda()"}
    assert {sites[t].function for t in ("x.float()", "ys.cpu()", "t.contiguous()")} == {"Pool.f"}
    assert sites["x.float()"].def_line == 5  # the decorator's line
    assert (sites["t.long()"].function, sites["t.long()"].def_line) == ("Pool.f.<locals>.inner", 16)


def test_copy_and_cat_rank_by_their_inputs():
    source = """import torch
def forward(self, x, k_new):
    self.out.copy_(self.pool.get_key_buffer(3))
    result.copy_(wrapper.run(q, k_cache))
    torch.cat([self.k_cache, k_new], dim=0)
    torch.cat([f(a, k_cache), x])
"""
    risks = {s.text: s.risk for s in scan_source(source, "m.py", RULES).sites}
    assert risks == {
        "self.out.copy_(self.pool.get_key_buffer(3))": 75,  # 20 + 20 hot + 35 source is a KV buffer
        "result.copy_(wrapper.run(q, k_cache))": 40,  # the buffer only feeds a call
        "torch.cat([self.k_cache, k_new], dim=0)": 70,
        "torch.cat([f(a, k_cache), x])": 35,
    }
