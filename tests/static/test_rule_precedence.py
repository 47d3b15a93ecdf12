"""Which rule wins a site (`tracer/static/precedence.py`), and rule files refused when loaded: a rule
that can never fire, or a match that contradicts itself, is one line naming the file and the rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracer.errors import InputError
from tracer.static import load_rule_set, scan_source
from tracer.static.matching import glob_matches, last_part
from tracer.static.precedence import contains

RULES = load_rule_set()
CASTS = Path(RULES.by_code("KT101").source)

RULE_HEAD = """
family = "mine"
[[rule]]
code = "KTX01"
name = "mine"
kind = "cast_method"
summary = "mine"
"""


def write_rule(directory: Path, body: str) -> Path:
    path = directory / "mine.toml"
    path.write_text(RULE_HEAD + body)
    return path


def test_the_match_order_is_explicit():
    # KT105 tests its receiver: before every rule that does not; the rest have disjoint matches: by code
    assert [r.code for r in RULES.order] == [
        "KT105", "KT101", "KT102", "KT103", "KT104", "KT201", "KT202", "KT203", "KT204", "KT205",
        "KT301", "KT302", "KT303", "KT304", "KT305", "KT306", "KT307", "KT401",
    ]  # fmt: skip
    assert [r.code for r in RULES.rules] == sorted(r.code for r in RULES.rules)  # listings stay by code
    kv, cast = RULES.by_code("KT105"), RULES.by_code("KT102")
    assert contains(cast, kv, 3) and not contains(kv, cast, 3)


@pytest.mark.parametrize("prefilter", [True, False], ids=["fast", "reference"])
def test_kt102_no_longer_swallows_a_kv_cache_cast(prefilter):
    source = (
        "def forward_decode(self, q, layer_id):\n"
        "    k = self.token_to_kv_pool.get_key_buffer(layer_id).float()\n"
        "    return q.float() @ k.t()\n"
    )
    kv, q = scan_source(source, "backend.py", RULES, prefilter=prefilter).sites
    assert (kv.rule, kv.kind, kv.method, kv.target_dtype, kv.line, kv.col) == (
        "KT105", "cast_method", "float", "torch.float32", 2, 8,
    )  # fmt: skip
    assert (q.rule, q.line, q.col) == ("KT102", 3, 11)
    # the same site kind and score KT102 gave it: only the code and the first reason's words change
    assert kv.risk == 80 and kv.reasons == (
        (
            "+25 KT105 kv-cache-cast-method: `.float()` / `.half()` / `.bfloat16()` on a KV cache or pool "
            "casts the whole buffer"
        ),
        "+35 receiver is a whole KV buffer (pool / cache), sized by the model and context",
        "+20 in a per-step/per-layer function",
    )


def test_globs_and_last_parts():
    assert (
        last_part("self.token_to_kv_pool.get_key_buffer(layer.layer_id)") == "get_key_buffer(layer.layer_id)"
    )
    assert last_part('self.k_buffer[self.names["a.b"]]') == 'k_buffer[self.names["a.b"]]'
    assert last_part("kv_cache") == "kv_cache"
    assert glob_matches("*kv*", "self.kv_indices") and glob_matches("k_buffer[*]", "k_buffer[layer_id]")
    assert glob_matches("get_?ey_buffer(*)", "get_key_buffer(0)") and not glob_matches("k_cache", "kv_cache")
    assert glob_matches("*a*b*c", "xxaxxbxxc") and not glob_matches("*a*b*c", "xxbxxaxxc")
    assert not glob_matches("*" * 40 + "b", "a" * 10_000)  # a hostile glob stays linear
    assert not glob_matches("*?" * 20 + "b", "a" * 10_000)  # and polynomial with `?`


def test_a_receiver_rule_on_real_sglang_code(tmp_path, sglang_root):
    """A user's rule for the KV writers' `cache_k.to(self.dtype)` (sglang's memory_pool.py:2931) takes the
    site from KT101 without a priority: it asks for a receiver, KT101 does not."""
    write_rule(
        tmp_path,
        """base = 40
[rule.match]
form = "method"
names = ["to"]
arg_class = ["dtype"]
receiver = ["cache_k", "cache_v"]
text = ["*.to(self.dtype)"]
[rule.lowers]
aten_ops = ["aten::to", "aten::_to_copy", "aten::copy_"]
""",
    )
    rules = load_rule_set([tmp_path])
    assert [r.code for r in rules.order[:2]] == ["KTX01", "KT105"]  # two pattern keys before one
    relative = "sglang/srt/mem_cache/memory_pool.py"
    sites = scan_source((sglang_root / relative).read_bytes(), relative, rules).sites
    mine = [(s.line, s.col, s.text) for s in sites if s.rule == "KTX01"]
    assert (2931, 22, "cache_k.to(self.dtype)") in mine and (2932, 22, "cache_v.to(self.dtype)") in mine
    assert all(text.startswith(("cache_k.", "cache_v.")) for _, _, text in mine)
    before = {
        (s.line, s.col): s.rule
        for s in scan_source((sglang_root / relative).read_bytes(), relative, RULES).sites
    }
    assert {before[(line, col)] for line, col, _ in mine} == {"KT101"}


def test_the_rule_of_issue_19_is_refused_when_loaded(tmp_path):
    """A `.float()` rule for KV buffers that comes after KT102 (here by a lower priority) never fires;
    before, the only sign was its INVALID example failing."""
    path = write_rule(
        tmp_path,
        """priority = -1
[rule.match]
form = "method"
names = ["float"]
max_args = 0
receiver = ["*_pool"]
""",
    )
    with pytest.raises(InputError) as caught:
        load_rule_set([tmp_path])
    assert str(caught.value) == (
        f"{path}: rule KTX01 can never fire: every call it matches is matched first by KT102 (casts.toml); "
        "make it more specific or give it a higher priority"
    )


@pytest.mark.parametrize(
    ("match", "words"),
    [
        # the same match as KT102: by code, KT102 comes first
        (
            (
                'names = ["float", "half", "bfloat16", "double", "int", "long", "bool", "short", "byte", "char"]\n'
                "max_args = 0"
            ),
            "matched first by KT102 (casts.toml);",
        ),
        # no single rule covers it, but KT101, KT104 and KT204 together do
        (
            'names = ["to"]\narg_class = ["dtype", "device", "other"]',
            "matched first by KT101 (casts.toml), KT104 (casts.toml), KT204 (copies.toml);",
        ),
        (
            'form = "store"\nindex_class = ["slice"]\npriority_is_not_a_match_key = 1',
            "unknown match key 'priority_is_not_a_match_key'",
        ),
        ('names = ["float"]\nmin_args = 2\nmax_args = 1', "can never fire: min_args = 2 > max_args = 1"),
        (
            'names = ["to"]\narg_class = ["dtype+device"]\nmax_args = 1',
            "can never fire: arg_class ['dtype+device'] needs at least 2 argument(s) but max_args = 1",
        ),
        ('names = ["float"]\nreceiver = []', "can never fire: match.receiver holds no pattern"),
        ('names = ["float"]\nreciever = ["*kv*"]', "unknown match key 'reciever'"),
        (
            'form = "method"\nnames = ["torch.cat"]',
            "form = \"method\" but names holds the function 'torch.cat'",
        ),
        ('form = "function"\nnames = ["cat"]', "form = \"function\" but names holds the method 'cat'"),
        ('form = "methods"\nnames = ["cat"]', "match.form must be one of"),
        ('names = ["float"]\nindex_class = ["index"]', "match.index_class applies only to a store rule"),
        ('form = "store"\nnames = ["float"]', "match.names does not apply to a store rule"),
        ('names = ["float"]\narg_class = []', "can never fire: match.arg_class is empty"),
        ('names = ["float"]\nmax_args = -1', "match.max_args must be a whole number >= 0"),
        ('names = ["float"]\ntext = ["*x*", 3]', "match.text must be a list of strings"),
    ],
)
def test_rules_that_cannot_fire_or_contradict_themselves(tmp_path, match, words):
    path = write_rule(tmp_path, f"[rule.match]\n{match}\n")
    with pytest.raises(InputError) as caught:
        load_rule_set([tmp_path])
    message = str(caught.value)
    assert message.startswith(f"{path}: rule KTX01") and "\n" not in message
    assert words in message


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ('priority = "high"\n[rule.match]\nnames = ["float"]\n', "priority must be a whole number"),
        (
            '[rule.match]\nnames = ["permute"]\n[rule.examples]\ninvalid = [{ expect = ["2 KTX01"], code = "x" }]\n',
            "expected finding '2 KTX01' is not `line:col CODE`",
        ),
        (
            '[rule.match]\nnames = ["permute"]\n[rule.examples]\ninvalid = [{ expect = ["2:4 KT101"], code = "x" }]\n',
            "an invalid example must expect KTX01 itself",
        ),
        (
            '[rule.match]\nnames = ["permute"]\n[rule.examples]\ninvalid = [{ at = "2:4", code = "x" }]\n',
            "an invalid example is a string or",
        ),
    ],
)
def test_rule_keys_of_the_wrong_shape(tmp_path, body, words):
    path = write_rule(tmp_path, body)
    with pytest.raises(InputError) as caught:
        load_rule_set([tmp_path])
    assert str(caught.value).startswith(f"{path}: rule KTX01") and words in str(caught.value)


def test_a_builtin_rule_shadowed_by_a_users_rule_is_named(tmp_path):
    """A user's rule with a higher priority that takes every `.type(...)` leaves KT103 nothing."""
    write_rule(tmp_path, 'priority = 1\n[rule.match]\nnames = ["type"]\n')
    with pytest.raises(InputError) as caught:
        load_rule_set([tmp_path])
    assert str(caught.value).startswith(
        f"{CASTS}: rule KT103 can never fire: every call it matches is matched first by KTX01 (mine.toml);"
    )


@pytest.mark.parametrize("command", ["rules", "scan"])
def test_the_cli_prints_one_line_and_exits_2(tmp_path, repo_root, command):
    path = write_rule(
        tmp_path, 'priority = -1\n[rule.match]\nnames = ["float"]\nmax_args = 0\nreceiver = ["*_pool"]\n'
    )
    args = (
        ["rules", "--rules", str(tmp_path)]
        if command == "rules"
        else ["scan", str(path), "--rules", str(tmp_path)]
    )
    done = subprocess.run(
        [sys.executable, "-m", "tracer", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=repo_root,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"kerneltrace: error: {path}: rule KTX01 can never fire: ")
    assert done.stderr.count("\n") == 1
