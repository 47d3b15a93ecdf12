"""Tables fit the terminal from 80 columns up: no line wider than the terminal, `file:line` never
broken, low-value columns dropped first; --wide shows everything; piped output without COLUMNS is
200 wide. The tables are those of real traces and the real sglang package."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from render_traces import BUG, CAST_LINE, FIX, NOSTACK, REPO

from tracer.cli import main
from tracer.render.console import WIDTH_WHEN_PIPED

WIDTHS = (80, 100, 120, 160, 200)
# A file:line the table shows: a path (maybe shortened from the left with "…/") ending in ".py:NNN".
LOCATION = re.compile(r"(?:…/)?[\w./-]*\.py:\d+")


def run(width: int | None, *args: object) -> str:
    env = {"COLUMNS": str(width)} if width else {"COLUMNS": ""}
    result = CliRunner().invoke(main, [str(a) for a in args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def table_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line[:1] in "┏┃┡│└"]


@pytest.mark.parametrize("width", WIDTHS)
def test_explain_fits_and_keeps_the_line_whole(width):
    out = run(width, "explain", BUG, "--source", REPO, "--top", "6")
    rows = table_lines(out)
    assert rows and all(len(line) <= width for line in rows), max(map(len, rows))
    # The hot line is whole on one row: the full path or the path cut from the left, never its end.
    first = next(line for line in rows if re.match(r"│\s+1 │", line))
    cell = LOCATION.findall(first)
    assert cell and CAST_LINE.endswith(cell[0].removeprefix("…/")), first
    assert cell[0].endswith("model.py:209")
    headers = table_lines(out)[1]
    assert "share" in headers and "origin" in headers and "kernel" in headers
    if width <= 100:  # the low-value columns go first
        assert "calls " not in headers and "per call" not in headers
    if width >= 200:
        assert all(name in headers for name in ("calls/step", "per call", "bytes/call", "GB/s (% peak)"))


def test_narrow_tables_keep_share_calls_per_step_kernel_and_origin():
    headers = [
        h.strip() for h in table_lines(run(80, "explain", BUG, "--source", REPO))[1].split("┃") if h.strip()
    ]
    assert headers[:3] == ["#", "share", "/step"] and headers[-2:] == ["kernel", "origin"]


def test_a_ranked_origin_keeps_its_marks_at_80_columns():
    rows = table_lines(run(80, "explain", NOSTACK, "--source", REPO / "examples", "--top", "3"))
    first = next(line for line in rows if re.match(r"│\s+1 │", line))
    assert re.search(r"~(?:…/)?[\w/]*model\.py:209\? \(ranked 1 of \d+\)", first), first


def test_wide_shows_every_column_whole():
    out = run(80, "explain", BUG, "--source", REPO, "--top", "3", "--wide")
    rows = table_lines(out)
    assert max(map(len, rows)) > 80
    assert "unrolled_elementwise_kernel<direct_copy_kernel_cuda>" in out
    assert "k = self.pool.get_key_buffer(layer_id).to(q.dtype)" in out
    assert all(name in rows[1] for name in ("calls", "per call", "category"))


def test_piped_output_without_columns_is_200_wide():
    rows = table_lines(run(None, "explain", BUG, "--source", REPO, "--top", "3"))
    assert max(map(len, rows)) <= WIDTH_WHEN_PIPED and CAST_LINE in "\n".join(rows)


@pytest.mark.parametrize("width", (80, 120, 200))
def test_diff_fits(width):
    out = run(width, "diff", BUG, FIX, "--source", REPO, "--top", "5")
    rows = table_lines(out)
    assert rows and all(len(line) <= width for line in rows)
    vanished = next(line for line in rows if "vanished" in line)
    assert LOCATION.search(vanished).group(0).endswith("model.py:209")


@pytest.mark.parametrize("width", (80, 120, 200))
def test_scan_keeps_file_line_whole(sglang_root, width):
    out = run(
        width,
        "scan",
        sglang_root / "sglang" / "srt" / "layers" / "attention",
        "--top",
        "8",
        "--platform",
        "any",
    )
    rows = table_lines(out)
    assert all(len(line) <= width for line in rows)
    body = [line for line in rows if line.startswith("│") and re.match(r"│\s+\d+ ", line)]
    assert len(body) == 8
    for line in body:  # every ranked row shows its whole `name.py:line` on its own line
        assert LOCATION.search(line), line
    if width >= 200:
        assert "why" in rows[1] and "function" in rows[1]


def test_rules_fit_at_80_and_keep_bracketed_text():
    out = run(80, "rules")
    assert all(len(line) <= 80 for line in table_lines(out))
    assert "buf[idx] = value" in out and "buf[a:b] = value" in out
