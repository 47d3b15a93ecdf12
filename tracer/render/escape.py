"""The one place that makes untrusted text (kernel names, source lines, paths) safe to show.

Kernel names are C++ templates (``<>{}|"&\\``) and trace files are user input, so every string a
renderer emits passes through one of these: HTML text, graphviz labels and strings, terminal text.
"""

from __future__ import annotations

import html
import re
from typing import Any

from tracer.output_files import visible

# ANSI/VT sequences first (CSI ... final byte, OSC ... BEL/ST, two-byte ESC x), so their parameter
# bytes go with them instead of surviving as printable junk once the ESC is removed.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]"
)
# C0 and C1 control characters and DEL, plus bidirectional overrides that reorder displayed text.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_LINE_BREAKS = re.compile(r"[\t\n\r]+")
# Noncharacters (U+FFFE, U+FFFF of every plane, U+FDD0..U+FDEF): valid in UTF-8 and JSON, but XML
# (graphviz labels, GraphML) rejects the plane-0 ones; shown as U+FFFD.
_NONCHARACTERS = re.compile(
    "[\ufdd0-\ufdef" + "".join(f"\\U{plane:04x}fffe\\U{plane:04x}ffff" for plane in range(17)) + "]"
)


def strip_control(text: Any, *, keep_newlines: bool = False) -> str:
    """`text` as a string without ANSI escapes or control characters; tabs/newlines become spaces
    unless `keep_newlines` (then only tabs and newlines survive). Bytes that are not UTF-8 show as
    ``\\xNN``, noncharacters as U+FFFD: whatever a name holds, every output can carry it."""
    text = str(text)
    if text.isascii() and text.isprintable():  # most names: nothing to strip (and no tab or newline)
        return text
    out = _ANSI.sub("", visible(text))
    out = _CONTROL.sub("", out)
    out = _NONCHARACTERS.sub("\ufffd", out)
    if keep_newlines:
        return out.replace("\r\n", "\n").replace("\r", "\n")
    return _LINE_BREAKS.sub(" ", out)


def html_text(text: Any, *, keep_newlines: bool = False) -> str:
    """For HTML element content and attribute values (quotes escaped too)."""
    return html.escape(strip_control(text, keep_newlines=keep_newlines), quote=True)


def dot_html(text: Any) -> str:
    """For text inside a graphviz HTML-like label (``<...>``): graphviz parses it as XML."""
    # graphviz's XML parser knows &lt; &gt; &amp; &quot; and numeric references; html.escape's
    # &#x27; is numeric, so the same escaping serves both.
    return html.escape(strip_control(text), quote=True)


def dot_string(text: Any):  # -> graphviz.quoting.NoHtml (a str)
    """For a quoted graphviz attribute (tooltip, plain label): backslashes and quotes escaped, and
    marked so the `graphviz` package never mistakes ``<...>`` text for an HTML label."""
    from graphviz import nohtml

    # In a DOT escString a backslash starts an escape (\N, \G, \n, \"): double every one first;
    # then line breaks become DOT's own \n.
    out = strip_control(text, keep_newlines=True).replace("\\", "\\\\").replace('"', '\\"')
    return nohtml(out.replace("\n", "\\n"))


def terminal(text: Any) -> str:
    """For rich console output: control characters removed and rich markup (``[bold]``) escaped."""
    from rich.markup import escape

    return escape(strip_control(text))
