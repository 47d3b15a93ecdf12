"""Progress for long work: the loader and the scan report their bytes; the terminal line draws only
after 2 s, only on a terminal, at the pace of those bytes, and wipes itself. Time here is a fake
clock: no test waits on the wall clock."""

from __future__ import annotations

import io

from click.testing import CliRunner
from render_traces import BUG, REPO

from tracer.cli import main
from tracer.progress import listening
from tracer.render.progress import ProgressLine


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_loader_reports_the_file_bytes_it_read(tmp_path):
    from tracer.load import load_trace

    reports = []
    with listening(lambda what, done, total: reports.append((what, done, total))):
        load_trace(BUG)
    size = BUG.stat().st_size
    assert reports and all(what == f"reading {BUG.name}" and total == size for what, _, total in reports)
    assert [done for _, done, _ in reports] == sorted(done for _, done, _ in reports)
    assert reports[-1][1] == size


def test_the_scan_reports_bytes_of_source(tmp_path):
    from tracer.static import scan

    files = sorted((REPO / "examples" / "glm5_kv_cast").glob("*.py"))
    reports = []
    with listening(lambda what, done, total: reports.append((what, done, total))):
        scan([REPO / "examples" / "glm5_kv_cast"], cache_dir=False, jobs=1)
    total = sum(f.stat().st_size for f in files)
    assert reports[-1] == ("scanning source", total, total)


def test_the_line_waits_two_seconds_then_moves_with_the_bytes():
    clock, out = Clock(), Terminal()
    line = ProgressLine(out, clock=clock, then="joining and explaining...")
    line("reading t.json", 10, 100)
    clock.now = 1.0
    line("reading t.json", 30, 100)
    assert out.getvalue() == ""  # quick work shows nothing
    clock.now = 2.5
    line("reading t.json", 45, 100)
    assert (
        "reading t.json" in out.getvalue() and "45.0%" in out.getvalue() and "45 B of 100 B" in out.getvalue()
    )
    clock.now = 4.0
    line("reading t.json", 100, 100)
    assert out.getvalue().endswith("reading t.json: 100 B in 4.0 s; joining and explaining...\x1b[K")
    line.close()
    assert out.getvalue().endswith("\r\x1b[K")


def test_no_line_on_a_pipe():
    clock, out = Clock(), io.StringIO()
    line = ProgressLine(out, clock=clock)
    clock.now = 10.0
    line("scanning source", 5, 10)
    line.close()
    assert out.getvalue() == ""


def test_commands_print_no_progress_when_not_on_a_terminal():
    result = CliRunner().invoke(main, ["explain", str(BUG), "--json"])
    assert result.exit_code == 0
    assert "reading" not in result.output and "\x1b[K" not in result.output
