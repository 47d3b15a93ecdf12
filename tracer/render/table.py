"""The terminal rendering of an `Analysis`: a rich table of hot kernels and the origin of the top ones.

Every string from the trace (kernel and function names, paths, source text) is untrusted: it is
shown as `rich.text.Text` (never parsed as markup) after control characters are stripped.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from tracer.explain.bandwidth import human_bytes
from tracer.model.finding import Analysis, Finding
from tracer.render.escape import strip_control

DETAILED = 3  # findings whose origin chain is spelled out below the table
CHAIN_FRAMES = 4  # innermost user frames shown in a chain


def safe(text: object) -> Text:
    """Untrusted text as a rich `Text`: no markup parsing, no control characters, one line."""
    return Text(strip_control("" if text is None else text))


def safe_lines(lines: list[str]) -> Text:
    """Several untrusted lines: each made safe on its own (a newline inside one becomes a space)."""
    return Text("\n".join(strip_control(line) for line in lines))


def format_ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def format_us(ns: float) -> str:
    return f"{ns / 1e3:.1f}"


def format_calls_per_step(finding: Finding) -> str:
    if finding.calls_per_step is None:
        return "-"
    value = finding.calls_per_step
    return f"{value:.0f}" if abs(value - round(value)) < 0.005 else f"{value:.2f}"


def format_bandwidth(finding: Finding) -> str:
    if finding.gbps is None:
        return "-"
    text = f"{finding.gbps:,.0f}" if finding.gbps >= 10 else f"{finding.gbps:.2f}"
    if finding.peak_fraction is not None:
        text += f" ({finding.peak_fraction:.0%})"
    return text


def format_bytes(finding: Finding) -> str:
    if finding.bytes_per_call is None:
        return "-"
    prefix = "~" if finding.bytes_basis == "estimate" else ""
    return prefix + human_bytes(finding.bytes_per_call)


def origin_lines(finding: Finding) -> list[str]:
    """``file:line`` (or the best context) and the line's source text."""
    origin = finding.origin
    if origin.file is not None and origin.line is not None:
        head = origin.location
    elif origin.frames:
        caller, innermost = origin.caller_frame, origin.frames[-1]
        head = (caller or innermost).label
        if caller is not None and innermost is not caller and innermost.file.startswith("<"):
            head += f" > {innermost.function}"
    elif origin.replay:
        head = "<CUDA graph replay>"
    elif origin.before_trace:
        head = origin.key
    else:
        head = " > ".join(origin.ops) or "<unknown>"
    lines = [head]
    if origin.source:
        lines.append(origin.source.strip())
    if origin.rule:
        lines.append(f"rule {origin.rule}")
    return lines


def summary_lines(analysis: Analysis) -> list[str]:
    """The lines above the table: what was analysed and how busy the GPU was."""
    basis = "GPU time" if analysis.time_basis == "gpu" else "CPU op time (no GPU activity in the trace)"
    device = analysis.device or ("CPU" if analysis.time_basis == "cpu" else "unknown device")
    peak = f", peak {analysis.peak_gbps:,.0f} GB/s" if analysis.peak_gbps else ""
    lines = [f"{analysis.trace}", f"{device}{peak}; {basis} {format_ms(analysis.total_ns)} ms"]
    if analysis.steps:
        lines[-1] += f" over {analysis.steps} steps ({format_ms(analysis.step_ns or 0)} ms/step)"
    if analysis.layers:
        lines[-1] += f", {analysis.layers} layers"
    if analysis.steps:  # how the steps were found (tracer.explain.steps): method and first evidence
        evidence = f": {analysis.step_evidence[0]}" if analysis.step_evidence else ""
        lines.append(f"steps by {analysis.step_method}{evidence}")
        if not analysis.steps_exact:
            lines.append("calls/step are approximate (~): the step evidence disagrees; see the notes")
    if analysis.gpu_busy_fraction is not None:
        busy = analysis.gpu_busy_fraction
        bound = ": launch-bound" if busy < 0.6 else ""
        lines.append(
            f"GPU busy {busy:.0%} of the {format_ms(analysis.window_ns)} ms window (idle {1 - busy:.0%}){bound}"
        )
    line = f"attributed to a source line: {analysis.attributed_fraction:.0%} of the time"
    if analysis.replay_fraction:
        line += (
            f"; CUDA graph replays {analysis.replay_fraction:.0%}"
            f" ({analysis.replay_attributed_fraction:.0%} of them attributed)"
        )
    lines.append(line)
    return lines


def findings_table(analysis: Analysis, top: int) -> Table:
    title = "hot kernels" if analysis.time_basis == "gpu" else "hot CPU ops"
    table = Table(title=title, title_justify="left", show_lines=False, expand=False)
    for header, justify in (
        ("#", "right"),
        ("share", "right"),
        ("total ms", "right"),
        ("calls", "right"),
        ("calls/step", "right"),
        ("per call us", "right"),
        ("bytes/call", "right"),
        ("GB/s (% peak)", "right"),
        ("kernel" if analysis.time_basis == "gpu" else "op", "left"),
        ("origin", "left"),
    ):
        table.add_column(header, justify=justify, overflow="fold")
    for rank, finding in enumerate(analysis.findings[:top], start=1):
        table.add_row(
            str(rank),
            f"{finding.share:.1%}",
            format_ms(finding.total_ns),
            str(finding.calls),
            format_calls_per_step(finding),
            format_us(finding.per_call_ns),
            format_bytes(finding),
            format_bandwidth(finding),
            safe(finding.kernel_short),
            safe_lines(origin_lines(finding)),
        )
    return table


FUSED_SHOWN = 8


def detail_lines(finding: Finding, rank: int) -> list[str]:
    """The origin chain and evidence of one finding, as plain lines (the caller makes them safe)."""
    origin = finding.origin
    # The innermost few frames outside torch's own module plumbing say where; the rest is the caller stack.
    frames = [f.label for f in origin.frames if not f.file.startswith(("torch/", "<built-in"))]
    shown = frames[-CHAIN_FRAMES:]
    chain = [*(f"range {r}" for r in origin.ranges), *(["..."] if len(frames) > len(shown) else []), *shown]
    chain += [*origin.ops] + ([finding.kernel_short] if finding.kernel_short not in origin.ops[-1:] else [])
    lines = [f"#{rank} {finding.kernel_short}  [{finding.category}]  {finding.share:.1%}"]
    lines.append("  origin: " + origin_lines(finding)[0])
    if origin.source:
        lines.append(f"    {origin.source.strip()}")
    lines.append("  chain: " + " > ".join(chain))
    for fused in origin.fused[:FUSED_SHOWN]:  # the user lines an Inductor kernel fused, with their ops
        lines.append(f"  fused: {fused.label}" + (f"  {fused.source.strip()}" if fused.source else ""))
    if len(origin.fused) > FUSED_SHOWN:
        lines.append(f"  fused: +{len(origin.fused) - FUSED_SHOWN} more lines")
    if finding.invariant:
        lines.append(f"  invariant: {finding.invariant}")
    if finding.bytes_per_call is not None:
        basis = {"estimate": "estimated", "shapes": "from shapes", "device": "from the copy's byte count"}
        speed = f"{finding.gbps:,.1f} GB/s" if finding.gbps is not None else ""
        if finding.peak_fraction is not None:
            speed += f" = {finding.peak_fraction:.0%} of peak"
        lines.append(
            f"  bytes: {human_bytes(finding.bytes_per_call)}/call ({basis.get(finding.bytes_basis or '', '')}), {speed}"
        )
    if finding.shapes:
        lines.append("  shapes: " + "; ".join(finding.shapes))
    if finding.waste:
        lines.append(f"  WASTE: {finding.waste}")
    evidence = "; ".join(origin.evidence) if origin.evidence else "none"
    lines.append(f"  confidence {origin.confidence:.2f}; evidence: {evidence}")
    if origin.candidates:
        lines.append("  candidates: " + ", ".join(origin.candidates[:5]))
    return lines


def render_table(analysis: Analysis, top: int = 15, details: int = DETAILED) -> Group:
    """Everything `kerneltrace explain` prints for people, as one rich renderable."""
    parts: list = [safe_lines(summary_lines(analysis))]
    parts.append(findings_table(analysis, top))
    for rank, finding in enumerate(analysis.findings[:details], start=1):
        parts.append(safe_lines(["", *detail_lines(finding, rank)]))
    if analysis.notes:
        parts.append(safe_lines(["", "notes:", *(f"- {note}" for note in analysis.notes)]))
    return Group(*parts)


def print_table(analysis: Analysis, console: Console, top: int = 15) -> None:
    console.print(render_table(analysis, top))
