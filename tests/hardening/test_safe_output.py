"""Kernel, function and file names are untrusted text: every rendering escapes them.

The names are crafted by editing a REAL trace's JSON (torch.profiler itself writes "unknown" for a
name with control characters, so a profiled program cannot produce them): terminal escapes (CSI
colours, OSC 8 hyperlinks, BEL, backspaces), bidi overrides, and markup of every output format.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest
from trace_fuzz import run_cli, write_trace

from tracer.cli.options import derived_output
from tracer.graph import build_graph
from tracer.render.dot import to_dot
from tracer.render.html import render_report

REPO = Path(__file__).resolve().parents[2]
HOSTILE = (
    "\x1b[31mRED\x1b[0m \x1b]8;;https://evil.example/\x07LINK\x1b]8;;\x07 \x1b]0;title\x1b\\ BEL\x07 BS\x08\x08 "
    "\u202eEVIL\u202c \u2066ISO\u2069 <script>alert(1)</script> <img src=x onerror=alert(1)> "
    "[bold]MARKUP[/bold] | PIPE ` TICK *EM* \\N \\\" QUOTE' &amp; {BRACE}"
)
# What must never reach any rendering: C0/C1 controls (ESC, BEL, BS, CSI) and bidi controls.
FORBIDDEN = [chr(c) for c in range(0x20) if chr(c) not in "\t\n\r"] + [
    "\x7f", "\x9b", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069",
]  # fmt: skip


def _no_controls(text: str, what: str) -> None:
    found = sorted({hex(ord(c)) for c in FORBIDDEN if c in text})
    assert not found, f"{what} passes control characters through: {found}"


@pytest.fixture(scope="module")
def hostile_trace(cudagraph_document: dict, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The real CUDA-graph trace with its hot kernel, the user's frames and files renamed hostile."""
    document = copy.deepcopy(cudagraph_document)
    kernel = f"void evil_kernel<{HOSTILE}>(int)"
    for event in document["traceEvents"]:
        name = event.get("name")
        if event.get("cat") == "kernel" and "direct_copy_kernel_cuda" in str(name):
            event["name"] = kernel
        elif event.get("cat") == "python_function" and str(name).startswith(
            "examples/glm5_kv_cast/model.py("
        ):
            line, _, function = name.removeprefix("examples/glm5_kv_cast/model.py(").partition("): ")
            event["name"] = f"examples/{HOSTILE}/model.py({line}): {function}{HOSTILE}"
    path = write_trace(document, tmp_path_factory.mktemp("hostile") / "hostile.json")
    return path, kernel


@pytest.fixture(scope="module")
def hostile_analysis(hostile_trace):
    from tracer.api import explain_trace

    return explain_trace(hostile_trace[0])


def test_the_crafted_names_reach_the_findings(hostile_analysis, hostile_trace) -> None:
    top = hostile_analysis.findings[0]
    assert top.kernel == hostile_trace[1]
    assert HOSTILE in top.origin.location and any(HOSTILE in f.function for f in top.origin.frames)


def test_terminal_table_has_no_escapes(hostile_trace) -> None:
    done = run_cli("explain", str(hostile_trace[0]), timeout=120)
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode("utf-8")
    _no_controls(text, "the terminal table")
    assert "evil_kernel" in text and "RED" in text  # the text stays readable, only the escapes go
    assert "31m" not in text and "8;;https" not in text  # sequences go whole, not just their ESC


def test_markdown_escapes_markup_and_keeps_the_table_shape(hostile_trace) -> None:
    done = run_cli("explain", str(hostile_trace[0]), "--markdown", timeout=120)
    text = done.stdout.decode("utf-8")
    _no_controls(text, "markdown")
    # Inside a code span (or a fenced block) markup is shown as typed; outside, it must be escaped.
    outside_code = re.sub(r"(`+).*?\1", "", re.sub(r"```text\n.*?```", "", text, flags=re.DOTALL))
    assert "<script" not in outside_code and "<img" not in outside_code
    assert "&lt;script&gt;" in outside_code or "<script>" in text
    rows = [line for line in text.splitlines() if line.startswith("|")]
    columns = {line.replace("\\|", "").count("|") for line in rows}
    # no name added a column: every row has the header's cells (# and tracer.render.columns' list)
    assert len(rows) > 3 and columns == {rows[0].count("|")} and rows[0].startswith("| # | share |")


def test_json_keeps_the_names_exactly(hostile_trace) -> None:
    done = run_cli("explain", str(hostile_trace[0]), "--json", timeout=120)
    data = json.loads(done.stdout)
    assert data["findings"][0]["kernel"] == hostile_trace[1]  # data, not display: JSON escapes it
    assert b"\x1b" not in done.stdout  # JSON writes control characters as \u001b


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attributes.update(f"{name}={value}" for name, value in attrs)

    def handle_data(self, data):
        self.text.append(data)


def test_html_report_has_no_injected_elements(hostile_analysis, tmp_path: Path) -> None:
    html = render_report(hostile_analysis, build_graph(hostile_analysis, top=6))
    _no_controls(html, "the HTML report")
    parsed = _Tags()
    parsed.feed(html)
    assert not {"script", "img", "iframe", "object", "embed", "foreignobject"} & parsed.tags
    names = {a.split("=", 1)[0] for a in parsed.attributes}
    assert not [n for n in names if n.startswith("on")] and "src" not in names
    links = [a.split("=", 1)[1] for a in parsed.attributes if a.split("=", 1)[0] in ("href", "xlink:href")]
    assert links and all(re.fullmatch(r"#finding-\d+", link) for link in links)  # only the page's own anchors
    assert "<script>alert(1)</script>" in "".join(parsed.text)  # shown as text, escaped in the source
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_dot_source_and_svg_from_the_real_dot(hostile_analysis, tmp_path: Path) -> None:
    source = to_dot(build_graph(hostile_analysis, top=6)).source
    _no_controls(source, "the DOT source")
    (tmp_path / "g.dot").write_text(source)
    done = subprocess.run(
        ["dot", "-Tsvg", str(tmp_path / "g.dot")], capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    svg = done.stdout.decode("utf-8")
    _no_controls(svg, "the SVG")
    root = ET.fromstring(svg)  # well-formed XML despite <>&" in every label
    tags = {element.tag.rsplit("}", 1)[-1] for element in root.iter()}
    assert not {"script", "foreignObject", "image"} & tags
    for element in root.iter():  # graphviz's <a> carry tooltips (xlink:title), never a link or handler
        for attribute in element.attrib:
            name = attribute.rsplit("}", 1)[-1]
            assert not name.startswith("on") and name != "href", (element.tag, attribute)
    assert "evil_kernel" in "".join(root.itertext())


def test_sarif_and_the_scan_table_escape_code_and_file_names(tmp_path: Path) -> None:
    import jsonschema

    tree = tmp_path / "src"
    tree.mkdir()
    # Code may hold any character inside a string literal ("Trojan Source"), and a file name any
    # byte but / and NUL.
    (tree / "evil.py").write_text(f"def forward(x):\n    return x.to({HOSTILE!r})\n")
    weird = "we#ird %41 ?q \x1b[31mname.py"
    (tree / weird).write_text("def forward(x):\n    return x.float()\n")
    (tree / "broken \x1b]8;;x\x07.py").write_text("def forward(x:\n")
    sarif_path = tmp_path / "out.sarif"
    done = run_cli("scan", str(tree), "--no-cache", "--sarif", str(sarif_path), timeout=120)
    assert done.returncode == 0, done.stderr
    _no_controls(done.stdout.decode("utf-8"), "the scan table")
    _no_controls(done.stderr.decode("utf-8"), "the scan's skipped list")
    log = json.loads(sarif_path.read_text())
    schema = json.loads((REPO / "tests" / "static" / "sarif-schema-2.1.0.json").read_text())
    jsonschema.validate(log, schema)
    results = log["runs"][0]["results"]
    for result in results:
        _no_controls(result["message"]["text"], "a SARIF message")
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results}
    assert "we%23ird%20%2541%20%3Fq%20%1B%5B31mname.py" in uris  # #, %, ?, space, ESC encoded
    assert {unquote(u) for u in uris} == {"evil.py", weird}


@pytest.mark.parametrize(
    "name",
    [
        "../../etc/passwd.json",
        "/etc/cron.d/x.json.gz",
        "a/../../../b.pt.trace.json",
        "..",
        ".",
        "",
        "-rf.json",
        "x" * 1000 + ".json",
        "nul\0byte.json",
        "\x1b[31mred.json",
        "..\\..\\windows.json",
        "~/.bashrc",
        "$(rm -rf ~).json",
    ],
)
def test_derived_output_paths_stay_in_the_output_directory(name: str, tmp_path: Path) -> None:
    out = derived_output(name, ".report.html", tmp_path)
    assert out.parent == tmp_path
    assert len(out.name.encode()) <= 255
    assert out.name[0] not in "-." and set(out.name) <= set(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-"
    )


def test_a_hostile_trace_file_name_writes_inside_the_working_directory(hostile_trace, tmp_path: Path) -> None:
    named = tmp_path / "in" / "$(touch pwned) ; x\x1b[31m.json"
    named.parent.mkdir()
    named.write_bytes(hostile_trace[0].read_bytes())
    out = tmp_path / "out"
    out.mkdir()
    done = run_cli("report", str(named), timeout=180, cwd=out)
    assert done.returncode == 0, done.stderr
    _no_controls(done.stdout.decode("utf-8"), "the report command's output")
    assert [p.name for p in out.iterdir()] == ["touch_pwned_x_31m.report.html"]
    assert sorted(p.name for p in (tmp_path / "in").iterdir()) == [named.name]


# Modules that read inputs (traces, sources, sites, configs) and render outputs. tracer/instrument
# runs the user's own program by request (`kerneltrace profile script.py`), and the SGLang plugin
# imports SGLang's classes by name: they execute code on purpose and are checked for nothing else.
INPUT_PACKAGES = ("load", "join", "explain", "graph", "render", "static", "model", "cli")


def test_no_eval_exec_or_pickle_of_any_input() -> None:
    findings = []
    files = [REPO / "tracer" / "api.py", REPO / "tracer" / "errors.py"]
    for package in INPUT_PACKAGES:
        files += sorted((REPO / "tracer" / package).rglob("*.py"))
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(REPO)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + (
                    [node.module] if isinstance(node, ast.ImportFrom) else []
                )
                for name in names:
                    if name and name.split(".")[0] in (
                        "pickle",
                        "cPickle",
                        "marshal",
                        "shelve",
                        "dill",
                        "cloudpickle",
                    ):
                        findings.append(f"{where}:{node.lineno}: imports {name}")
            if isinstance(node, ast.Call):
                func = node.func
                called = (
                    func.id
                    if isinstance(func, ast.Name)
                    else func.attr
                    if isinstance(func, ast.Attribute)
                    else ""
                )
                if called in ("eval", "exec", "__import__", "execfile", "runpy"):
                    findings.append(f"{where}:{node.lineno}: calls {called}")
                if called == "compile" and isinstance(func, ast.Name):
                    # Allowed only to parse: flags=ast.PyCF_ONLY_AST returns a tree, never code.
                    flags = {k.arg: ast.unparse(k.value) for k in node.keywords}
                    if "PyCF_ONLY_AST" not in flags.get("flags", ""):
                        findings.append(f"{where}:{node.lineno}: compiles code")
                if called == "load" and isinstance(func, ast.Attribute) and ast.unparse(func.value) == "yaml":
                    findings.append(f"{where}:{node.lineno}: yaml.load")
                if called == "import_module" and not isinstance(node.args[0], ast.JoinedStr):
                    findings.append(f"{where}:{node.lineno}: imports a module named by data")
    assert findings == []
    assert len(files) > 60  # the walk saw the code base, not an empty directory
