"""One list of finding columns: each names the --json field it shows, and every rendering reads it."""

from __future__ import annotations

from tracer.cli.explain import JSON_SHAPE
from tracer.render.columns import FINDING_COLUMNS, finding_columns
from tracer.render.html import render_report
from tracer.render.markdown import render_markdown


def _dig(data, path: str):
    for part in path.split("."):
        data = data[part]
    return data


def test_each_column_shows_its_json_field(glm5_bug, llama):
    for analysis in (glm5_bug, llama):
        for finding in analysis.findings:
            data = finding.to_dict()
            for column in FINDING_COLUMNS:
                assert _dig(data, column.json) == column.value(finding), (column.name, finding.kernel_short)
    for column in FINDING_COLUMNS:
        assert column.json.split(".")[-1] in JSON_SHAPE and f"{column.header} = {column.json}" in " ".join(
            JSON_SHAPE.split()
        )


def test_markdown_and_html_headers_follow_the_list(glm5_bug):
    columns = finding_columns(glm5_bug)
    header = "| # | " + " | ".join(c.title(glm5_bug) for c in columns) + " |"
    assert header in render_markdown(glm5_bug, top=3).splitlines()
    html = render_report(glm5_bug, top=3)
    assert "<tr><th>#</th>" + "".join(f"<th>{c.title(glm5_bug)}</th>" for c in columns) + "</tr>" in html
