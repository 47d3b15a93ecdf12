"""Names of any bytes or code points survive every output: a trace file or source file named with bytes
that are not UTF-8, kernel names with U+FFFF, ESC, BEL, NUL and backspaces, through DOT (laid out by the
real `dot`), SVG, GraphML (parsed as XML), node-link JSON, HTML, the JSON of explain, SARIF, annotate."""

from __future__ import annotations

import copy
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from trace_fuzz import run_cli, write_trace

ODD_KERNEL = "void k<\uffff\ufffe\x1b\x07\x08\x00\U0010ffff>(int)"


@pytest.fixture(scope="module")
def odd_trace(cudagraph_document: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real CUDA-graph trace, its hot kernel renamed, in a file whose name is not UTF-8."""
    document = copy.deepcopy(cudagraph_document)
    for event in document["traceEvents"]:
        if event.get("cat") == "kernel" and "direct_copy_kernel_cuda" in str(event.get("name")):
            event["name"] = ODD_KERNEL
    directory = tmp_path_factory.mktemp("odd")
    return write_trace(document, Path(os.fsdecode(os.fsencode(str(directory)) + b"/n\xffame.json")))


@pytest.mark.parametrize("suffix", [".svg", ".dot", ".graphml", ".json", ".png"])
def test_graph_outputs_carry_the_names(odd_trace: Path, tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"g{suffix}"
    done = run_cli("graph", str(odd_trace), "-o", str(out), text=True)
    assert done.returncode == 0, done.stderr
    if suffix == ".graphml":
        root = ET.parse(out).getroot()  # well-formed XML
        texts = " ".join(data.text or "" for data in root.iter("{http://graphml.graphdrawing.org/xmlns}data"))
        assert "void k<\\uffff\\ufffe\\x1b\\x07\\x08\\x00" in texts
    elif suffix == ".json":
        nodes = json.loads(out.read_bytes())["nodes"]
        assert any(node.get("label") == ODD_KERNEL or node.get("kernel") == ODD_KERNEL for node in nodes)
    elif suffix == ".dot":
        import subprocess

        assert subprocess.run(["dot", "-Tsvg", str(out)], capture_output=True, check=False).returncode == 0
    elif suffix == ".svg":
        ET.parse(out)


def test_report_json_and_annotate_carry_them(odd_trace: Path, tmp_path: Path) -> None:
    done = run_cli("report", str(odd_trace), "-o", str(tmp_path / "r.html"), text=True)
    assert done.returncode == 0, done.stderr
    assert "n\\xffame.json" in (tmp_path / "r.html").read_text(encoding="utf-8")
    done = run_cli("explain", str(odd_trace), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["trace"].endswith("n\\xffame.json")
    assert any(f["kernel"] == ODD_KERNEL for f in data["findings"])
    done = run_cli("annotate", str(odd_trace), "-o", str(tmp_path / "a.json"), text=True)
    assert done.returncode == 0, done.stderr


def test_a_source_file_named_with_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    package = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/pkg\xff"))
    package.mkdir()
    (package / "m\xe9od.py").write_text("import torch\n\n\ndef f(x):\n    return x.to(torch.float16)\n")
    bad_name = Path(os.fsdecode(os.fsencode(str(package)) + b"/bad\xfe.py"))
    bad_name.write_text("def g(y):\n    return y.float()\n")
    cache = tmp_path / "cache"
    for _ in range(2):  # written to the cache, then read back from it
        done = run_cli("scan", str(tmp_path), "--json", env={"XDG_CACHE_HOME": str(cache)})
        assert done.returncode == 0, done.stderr
        paths = sorted(site["path"] for site in json.loads(done.stdout)["sites"])
        assert paths == ["pkg\\xff/bad\\xfe.py", "pkg\\xff/m\u00e9od.py"]
    sarif = tmp_path / "s.sarif"
    assert run_cli("scan", str(tmp_path), "--sarif", str(sarif), "--no-cache").returncode == 0
    uris = {
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for r in json.loads(sarif.read_bytes())["runs"][0]["results"]
    }
    # the shown path (a backslash, then xff) percent-encoded: a valid URI reference
    assert uris == {"pkg%5Cxff/bad%5Cxfe.py", "pkg%5Cxff/m%C3%A9od.py"}
