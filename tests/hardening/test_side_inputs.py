"""Every file given beside a trace is read with the trace's checks: --config, --sites, rule files and
KERNELTRACE_SITES that are FIFOs, /dev/zero, nested 100,000 deep, hold 5,000-digit numbers or fields of
the wrong type end in one line naming the file (exit 2), never a hang or a traceback."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from trace_fuzz import run_cli

from tracer.api import read_sites
from tracer.errors import InputError
from tracer.static import load_rule_set

GOOD_SITE = {"path": "m.py", "line": 209, "col": 4, "kind": "to", "method": "to", "function": "f", "def_line": 200,
             "receiver": "k", "text": "k.to(q.dtype)", "rule": "KT101", "risk": 85.0}  # fmt: skip


def _fifo(directory: Path) -> Path:
    path = directory / "fifo.json"
    os.mkfifo(path)
    return path


def side_inputs(directory: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, the words its one-line error must hold)."""
    cases = {
        "dev_zero": (Path("/dev/zero"), "not a regular file"),
        "fifo": (_fifo(directory), "not a regular file"),
        "directory": (directory, "is a directory"),  # click's own check: one line too
        "deep": ("[" * 100_000 + "]" * 100_000, "depth limit exceeded"),
        "huge_number": ('{"num_hidden_layers": ' + "9" * 5000 + "}", "number"),
        "not_json": ("layers = 3", "not JSON"),
    }
    out = {}
    for name, (content, words) in cases.items():
        if isinstance(content, str):
            path = directory / f"{name}.json"
            path.write_text(content)
            content = path
        out[name] = (content, words)
    return out


@pytest.mark.parametrize("option", ["--config", "--sites"])
def test_bad_side_inputs_are_one_line_errors(own_gpu_traces: Path, tmp_path: Path, option: str) -> None:
    trace = own_gpu_traces / "cudagraph_decode_stack.json.gz"
    for name, (path, words) in side_inputs(tmp_path).items():
        done = run_cli("explain", str(trace), option, str(path), text=True, timeout=60)
        assert done.returncode == 2, (name, done.stderr)
        assert str(path) in done.stderr and done.stderr.count("\n") == 1, name
        assert words in done.stderr, (name, done.stderr)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"line": "209"}, "\"line\" of a site is the string '209', not a whole number"),
        ({"line": 0}, '"line" of a site is 0, out of range'),
        ({"args": "k"}, '"args" of a site is the string'),
        ({"risk": float("inf")}, '"risk" of a site is'),
        ({"in_loop": "yes"}, '"in_loop" of a site is'),
        ({"path": None}, '"path" of a site is null'),
    ],
)
def test_sites_with_fields_of_the_wrong_type(tmp_path: Path, change: dict, words: str) -> None:
    path = tmp_path / "sites.json"
    path.write_text(json.dumps({"sites": [GOOD_SITE, {**GOOD_SITE, **change}]}).replace("Infinity", "1e999"))
    with pytest.raises(InputError) as caught:
        read_sites(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert "\n" not in str(caught.value) and (words in str(caught.value) or "not JSON" in str(caught.value))


def test_a_good_sites_file_reads(tmp_path: Path) -> None:
    path = tmp_path / "sites.json"
    path.write_text(json.dumps([GOOD_SITE]))
    (site,) = read_sites(path)
    assert (site.location, site.risk) == ("m.py:209", 85.0)


def test_config_values_of_the_wrong_type_are_not_layer_counts(own_gpu_traces: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": True, "num_layers": 10**30, "n_layer": "78"}))
    done = run_cli(
        "explain", str(own_gpu_traces / "cudagraph_decode_stack.json.gz"), "--config", str(config), text=True
    )
    assert done.returncode == 2 and "no layer count in the config" in done.stderr


@pytest.mark.parametrize(
    "content, words",
    [
        ('[[factor]]\nid = "x"\non = "text"\nweight = "heavy"\nreason = "r"\n', "not a valid rule file"),
        ('[[factor]]\nid = "x"\non = "text"\nweight = 1\nreason = "r"\npattern = 5\n', "not a string"),
        ("[arg_classes]\ndtype = '('\n", "bad regular expression"),
        ('family = 3\nrule = "x"\n', "not a valid rule file"),
    ],
)
def test_rule_files_of_the_wrong_shape(tmp_path: Path, content: str, words: str) -> None:
    (tmp_path / "bad.toml").write_text(content)
    with pytest.raises(InputError) as caught:
        load_rule_set([tmp_path])
    assert str(caught.value).startswith(str(tmp_path / "bad.toml")) and words in str(caught.value)


def test_a_rule_file_that_is_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.toml")
    with pytest.raises(InputError, match="not a regular file"):
        load_rule_set([tmp_path])


def test_a_catastrophic_user_regex_is_stopped_and_named(tmp_path: Path) -> None:
    """`^(a|aa)+$` takes exponential time on a run of a's that does not end the string."""
    (tmp_path / "slow.toml").write_text(
        '[[factor]]\nid = "slow"\non = "receiver"\nweight = 1\nreason = "r"\npattern = "^(a|aa)+$"\n'
    )
    source = tmp_path / "src"
    source.mkdir()
    (source / "m.py").write_text(f"def f(x):\n    return {'a' * 60}_.float()\n")
    done = run_cli("scan", str(source), "--rules", str(tmp_path), "--no-cache", text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        f"kerneltrace: error: {tmp_path / 'slow.toml'}: regular expression '^(a|aa)+$' ran over"
    )


def test_kerneltrace_sites_fifo_does_not_hold_up_the_plugin(tmp_path: Path, monkeypatch, caplog) -> None:
    from tracer.plugins import sglang

    fifo = _fifo(tmp_path)
    monkeypatch.setenv(sglang.SITES_ENV, str(fifo))
    result: list[str] = []
    worker = threading.Thread(target=lambda: result.append(sglang._install_site_ranges()), daemon=True)
    worker.start()
    worker.join(30)
    assert result == ["site ranges off (bad sites file)"]
    assert any("not a regular file" in r.getMessage() for r in caplog.records)
