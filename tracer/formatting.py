"""How every output words a number or a place: durations, bytes, shares, counts, bandwidth,
confidences, locations and the kind of answer an origin is.

One module, so that a figure reads the same in the terminal, Markdown, HTML, the graph and the diff
(``--json`` carries the raw numbers these are made from). The explain stage words its sentences
with it as the graph and the renderers do, so it depends on nothing but the data model.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from tracer.model.origin import AMBIGUOUS, EXACT, NO_LINE, RANKED, RESOLVED

ELLIPSIS = "…"
ANSWER_WORDS = {
    EXACT: "exact",
    RESOLVED: "best fit",
    AMBIGUOUS: "ambiguous",
    RANKED: "ranked guess",
    NO_LINE: "no line",
}


# ---- numbers ----------------------------------------------------------------------------------


def format_duration(ns: float | None) -> str:
    """``1.57 s``, ``66.58 ms``, ``854 µs``, ``14.6 µs``, ``512 ns``; None is ``?``."""
    if ns is None:
        return "?"
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.0f} µs" if ns >= 1e5 else f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def format_bytes(count: float | None) -> str:
    """``1.1 GB``, ``33.6 MB``, ``855 MB``, ``786 KB``, ``512 B``: decimal units, as bandwidth is quoted."""
    if count is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if count >= scale:
            value = count / scale
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{int(count)} B"


def format_share(share: float | None) -> str:
    """A fraction as a percent: ``85.6%``, ``0.05%``. Never ``100%`` for less than all, nor ``0%``
    for more than nothing: 0.995 is ``99.5%``, 0.99996 ``>99.99%``, 0.00001 ``<0.01%``."""
    if share is None:
        return "?"
    percent = share * 100
    if percent <= 0:
        return "0%"
    if percent >= 100:
        return "100%"
    decimals = 1 if percent >= 0.1 else 2
    text = f"{percent:.{decimals}f}"
    while float(text) >= 100 and decimals < 2:
        decimals += 1
        text = f"{percent:.{decimals}f}"
    if float(text) >= 100:
        return ">99.99%"
    if float(text) <= 0:
        return "<0.01%"
    return text + "%"


def format_change(ratio: float) -> str:
    """after/before as a signed percent: ``-99%``, ``+12%``, ``±0%``."""
    percent = (ratio - 1) * 100
    return "±0%" if abs(percent) < 0.5 else f"{percent:+.0f}%"


def format_count(value: float | None, approximate: bool = False) -> str:
    """Calls (per step): ``78``, ``14.67``, ``2.5``; ``~78`` when the steps are uncertain."""
    if value is None:
        return "-"
    if abs(value - round(value)) < 0.005:
        text = f"{round(value):,}"
    else:
        text = f"{value:,.2f}".rstrip("0").rstrip(".")
    return ("~" if approximate else "") + text


def format_rate(gbps: float | None) -> str:
    """Bandwidth in GB/s without the unit: ``1,002``, ``33.6``, ``0.46``, ``<0.01``."""
    if gbps is None:
        return "-"
    if gbps >= 100:
        return f"{gbps:,.0f}"
    if gbps >= 10:
        return f"{gbps:.1f}"
    if gbps > 0 and gbps < 0.005:
        return "<0.01"
    return f"{gbps:.2f}"


def format_gbps(gbps: float | None) -> str:
    """``1,002 GB/s``, ``0.46 GB/s``."""
    return "?" if gbps is None else f"{format_rate(gbps)} GB/s"


def format_bandwidth(gbps: float | None, peak_fraction: float | None, *, unit: bool = True) -> str:
    """``1,002 GB/s (20.9% of peak)``; without `unit`: ``1,002 (20.9%)`` (a column says the rest)."""
    if gbps is None:
        return "-"
    text = format_gbps(gbps) if unit else format_rate(gbps)
    if peak_fraction is not None:
        text += f" ({format_share(peak_fraction)}{' of peak' if unit else ''})"
    return text


def format_confidence(confidence: float | None) -> str:
    """``1``, ``0.8``, ``0.25``: how far a line is trusted, 0..1, as the JSON holds it."""
    if confidence is None:
        return "?"
    return f"{confidence:.2f}".rstrip("0").rstrip(".") or "0"


# ---- text and places --------------------------------------------------------------------------


def cut_middle(text: str, width: int) -> str:
    """`text` cut in the middle to at most `width` characters (both ends of a name say the most)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = (width - 1) * 2 // 3
    return text[:head] + ELLIPSIS + text[len(text) - (width - 1 - head) :]


def cut_end(text: str, width: int) -> str:
    """`text` cut at the end to at most `width` characters."""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + ELLIPSIS if width > 0 else ""


def shorten_path(path: str, width: int | None) -> str:
    """A path (or ``path:line``) in at most `width` characters, cut from the left at a directory:
    ``…/glm5_kv_cast/model.py:209``. The file name and line are never cut (they may exceed `width`)."""
    if width is None or len(path) <= width:
        return path
    parts = path.split("/")
    kept = parts[-1]
    for part in reversed(parts[:-1]):
        candidate = f"{part}/{kept}"
        if len(candidate) + 2 > width:
            break
        kept = candidate
    return f"{ELLIPSIS}/{kept}" if len(kept) + 2 <= width else kept


def _candidate_text(candidate: str, file: str | None) -> str:
    """Another candidate line: just ``214`` in the same file, else ``file.py:214``."""
    where, _, line = candidate.rpartition(":")
    if file is not None and where == file and line:
        return line
    return posixpath.basename(where) + (f":{line}" if line else "") if where else candidate


def format_origin(
    answer: str,
    location: str,
    *,
    file: str | None = None,
    confidence: float | None = None,
    candidates: Sequence[str] = (),
    shown: str | None = None,
    width: int | None = None,
) -> str:
    """The origin cell: ``file:line`` marked by the kind of answer it is, the same in every rendering.

    exact ``model.py:209``; resolved ``model.py:209 (0.8)``; ambiguous ``model.py:209 | 214 ?``;
    ranked ``~model.py:209? (ranked 1 of 5)``; none: the location as given. `location` is the full
    ``file:line`` (what candidates name); `shown` how to print it (a shorter form), else it is
    shortened from the left to fit `width` with its marks.
    """
    if answer == RESOLVED:
        before, after = "", f" ({format_confidence(confidence)})"
    elif answer == AMBIGUOUS:
        others = [_candidate_text(c, file) for c in candidates if c != location]
        before, after = "", "".join(f" | {other}" for other in others[:2])
        after += " +more ?" if len(others) > 2 else " ?"
    elif answer == RANKED:
        rank = list(candidates).index(location) + 1 if location in candidates else 1
        of = f" of {len(candidates)}" if candidates else ""
        before, after = "~", f"? (ranked {rank}{of})"
    else:
        before, after = "", ""
    text = shown if shown is not None else location
    if width is not None and shown is None:
        text = shorten_path(text, max(1, width - len(before) - len(after)))
    return before + text + after
