"""The origin cell says what kind of answer it is, the same in the table, Markdown, HTML, the graph
and JSON, on real traces: exact lines, a best fit with its confidence, ambiguous lines, rankings."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from render_traces import CAST_LINE

from tracer.formatting import format_origin
from tracer.graph import build_graph
from tracer.model.origin import AMBIGUOUS, EXACT, RANKED, RESOLVED
from tracer.render.columns import origin_head
from tracer.render.dot import render_graph
from tracer.render.html import render_report
from tracer.render.markdown import render_markdown
from tracer.render.table import detail_lines, render_table


def _first(analysis, answer):
    return next(f for f in analysis.findings if f.origin.answer == answer)


def test_each_kind_of_answer_is_marked(glm5_bug, glm5_ranked, llama):
    exact = glm5_bug.findings[0].origin
    assert exact.answer == EXACT and origin_head(exact) == CAST_LINE

    ranked = glm5_ranked.findings[0].origin
    assert ranked.answer == RANKED and ranked.location == CAST_LINE
    assert origin_head(ranked) == f"~{CAST_LINE}? (ranked 1 of {len(ranked.candidates)})"

    resolved = _first(llama, RESOLVED).origin
    assert origin_head(resolved) == f"{resolved.location} (0.8)" and resolved.confidence == 0.8

    ambiguous = _first(llama, AMBIGUOUS).origin
    others = [c.rsplit(":", 1)[1] for c in ambiguous.candidates if c != ambiguous.location]
    assert origin_head(ambiguous).startswith(f"{ambiguous.location} | {others[0]}")
    assert origin_head(ambiguous).endswith("?")


def test_format_origin_shortens_the_path_not_the_marks():
    location = "examples/glm5_kv_cast/model.py:209"
    candidates = (location, "examples/glm5_kv_cast/model.py:214")
    assert (
        format_origin(RANKED, location, candidates=candidates, width=30) == "~model.py:209? (ranked 1 of 2)"
    )
    assert format_origin(AMBIGUOUS, location, file=location[:-4], candidates=candidates) == (
        "examples/glm5_kv_cast/model.py:209 | 214 ?"
    )
    assert format_origin(RESOLVED, location, confidence=0.75, width=24) == "…/model.py:209 (0.75)"


def test_a_ranking_reads_as_one_in_every_rendering(glm5_ranked, tmp_path):
    finding = glm5_ranked.findings[0]
    head = origin_head(finding.origin)
    graph = build_graph(glm5_ranked, top=4)
    svg = " ".join(ET.parse(render_graph(graph, tmp_path / "ranked.svg")).getroot().itertext())
    html = render_report(glm5_ranked, graph, top=4)
    markdown = render_markdown(glm5_ranked, top=4)

    assert "~glm5_kv_cast/model.py:209? (ranked 1 of" in svg  # the graph's own shorter path, same marks
    assert f"`{head}`" in markdown
    assert head in html
    from io import StringIO

    from rich.console import Console

    console = Console(file=StringIO(), width=200)
    console.print(render_table(glm5_ranked, top=4, width=200))
    printed = console.file.getvalue()
    assert head in printed
    # The header says how much of the time is a ranked guess (every op of this trace fits a function now).
    assert re.search(r"\(ranked guess \d+(\.\d)?%\)", printed) and "not a match" in printed
    # The detail block's evidence reads as a sentence: no stray ":;".
    details = "\n".join(detail_lines(finding, 1))
    assert ":;" not in details and "a ranking, not a match: " in details


def test_json_names_the_answer_the_cell_shows(glm5_ranked):
    data = glm5_ranked.to_dict()
    assert data["findings"][0]["origin"]["answer"] == "ranked"
    assert data["findings"][0]["origin"]["location"] == CAST_LINE
