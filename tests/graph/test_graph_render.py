"""Drawings and the HTML report from real traces, through the real graphviz `dot`."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from tracer.graph import build_graph
from tracer.render.dot import render_graph, to_dot
from tracer.render.html import render_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CONTROL = [chr(c) for c in range(0x20) if chr(c) not in "\t\n\r"] + ["\x7f", "\x9b"]


def _svg_text(path) -> str:
    root = ET.parse(path).getroot()  # raises on anything that is not well-formed XML
    assert root.tag.endswith("svg")
    return " ".join(root.itertext())


def test_llama_graph_renders_to_svg_and_png_naming_the_hot_site(llama_analysis, tmp_path):
    graph = build_graph(llama_analysis, top=10, min_share=0.005)
    svg = render_graph(graph, tmp_path / "llama.svg")
    png = render_graph(graph, tmp_path / "llama.png")
    dot = render_graph(graph, tmp_path / "llama.dot")
    # the hottest cast with a source line: RMSNorm's upcast, `hidden_states.to(torch.float32)`
    hot_site = next(f.origin for f in llama_analysis.findings if f.category == "cast/copy" and f.origin.line)
    text = _svg_text(svg)

    assert hot_site.location == "transformers/models/llama/modeling_llama.py:64"
    assert "modeling_llama.py:64" in text
    assert "hidden_states = hidden_states.to(torch.float32)" in text
    assert llama_analysis.findings[0].kernel_short in text  # the hottest kernel, on the red path
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000
    assert dot.read_text().startswith("digraph")


def test_special_characters_in_kernel_names_render_escaped(nasty_trace, tmp_path):
    from tracer.api import explain_trace

    path, nasty = nasty_trace
    analysis = explain_trace(path)
    assert any(f.kernel == nasty for f in analysis.findings)
    graph = build_graph(analysis, top=6)
    svg = render_graph(graph, tmp_path / "nasty.svg")
    png = render_graph(graph, tmp_path / "nasty.png")
    source = to_dot(graph).source
    html = render_report(analysis, graph)

    text = _svg_text(svg)  # well-formed XML despite <>&" in the names
    assert "hot_kernel" in text
    assert png.read_bytes()[:8] == PNG_MAGIC
    for char in CONTROL:
        assert char not in source and char not in html and char not in svg.read_text()
    assert "[31m" not in html  # the ANSI sequence goes as a whole, not just its ESC
    # The full name (tooltip, detail) appears in each format's own escaping, never raw.
    assert "void hot_kernel&lt;float, {lambda()#1}&gt;|&quot;&amp;\\&#x27;!" in html
    assert nasty not in html
    assert "hot_kernel<float, {lambda()#1}>|\\\"&\\\\'!" in source  # DOT: \ doubled, " escaped


def test_html_report_is_self_contained_with_source_around_the_hot_line(kv_analyses, model_dir, tmp_path):
    before, _ = kv_analyses
    graph = build_graph(before)
    html = render_report(before, graph, source_roots=[model_dir])
    top = before.findings[0]

    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', ""
    )
    assert "https://" not in html and "<script" not in html.lower()
    # the origin's line, highlighted, with the lines around it
    assert f"<i>{top.origin.line}</i>" in html
    assert "get_key_buffer(self.layer_id).to(q.dtype)[kv_indices]" in html
    assert f"<i>{top.origin.line - 1}</i>" in html


def test_glm5_graph_says_why_the_hot_cast_is_there(glm5_analyses, tmp_path):
    before, _ = glm5_analyses
    graph = build_graph(before, top=8, min_share=0.005)
    text = _svg_text(render_graph(graph, tmp_path / "glm5.svg"))

    assert "glm5_kv_cast/model.py:209" in text
    assert "k = self.pool.get_key_buffer(layer_id).to(q.dtype)" in text
    assert "78 calls/step = once per layer (78 layers)" in text
    assert "cast 855 MB whole buffer fp8e4m3[495000,1,576]" in text
    assert "85.6% · 66.58 ms/step · 78 calls/step" in text
