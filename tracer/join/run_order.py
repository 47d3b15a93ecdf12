"""The order in which source text runs its calls and operators, read from text alone.

For picking files by the *order* of a window's ops, not only their names (`FunctionSpellings`): a
decoder file whose attention normalises the heads (``self.q_norm(self.q_proj(x).view(s))``) spells the
same names as one that does not, but only it runs ``linear`` right before ``to``, ``pow``, ``mean``.
Parsing every file of a code base to know this costs too much (libcst reads ~1 MB/s), so the order is
read off the text with one regular expression: a call runs when its parenthesis closes (its receiver
and its arguments before it), a binary operator when its right operand ends. ``a * rsqrt(v + e)``
runs ``+``, ``rsqrt``, ``*``. Python's own callables and math's (``range(n)``, ``math.sqrt(d)``) run
no op and are left out. Precedence is not modelled (``a + b * c`` reads ``+`` first): the order only
ranks files for the alignment, which is exact.
"""

from __future__ import annotations

import keyword
import re

from tracer.join.program import NO_OP_BUILTINS, TYPE_NAMES

STORE = "]="  # what text spells when it stores into a subscript (``x[i] = v``)

_KEYWORDS = frozenset(keyword.kwlist) | {"print"}
# strings and comments (skipped), numbers (operands), names, operators, brackets, separators
_TOKEN = re.compile(
    r"(?P<skip>[rbuRBUfF]{0,2}(?:'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\")|\#[^\n]*)"
    r"|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<num>(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?j?)"
    r"|(?P<op>\*\*=?|//=?|->|[-+*/@]=?|==|!=|<=|>=|[<>=,:;.~%&|^])"
    r"|(?P<open>[(\[{])"
    r"|(?P<close>[)\]}])"
    r"|(?P<nl>\n)"
)
# binary operators and the word each runs as (``x ** 2``: ``pow``; ``a @ b``: ``@``)
_BINARY = {"*": "*", "+": "+", "-": "-", "/": "/", "@": "@", "**": "pow"}
_BINARY.update({f"{op}=": word for op, word in list(_BINARY.items())})  # ``x += y``
_CONSTANTS = frozenset({"True", "False", "None"})
# what ends the right operand of the operators before it: separators, assignments, comparisons
_ENDS_OPERATORS = frozenset({",", ":", ";", "=", "==", "!=", "<=", ">=", "<", ">"})
# Python's own callables that take and give Python values (the ones a tensor overrides, ``abs``,
# ``sum``, ``round``, ``pow``, are not among them)
_PYTHON_CALLS = TYPE_NAMES | NO_OP_BUILTINS | {"min", "max", "sorted", "iter", "next"}


def run_order(text: str) -> list[str]:
    """The names `text` calls and the binary operators it uses, in the order they run."""
    out: list[str] = []
    stack: list[str | None] = []  # per open bracket, the name it calls (None: not a call)
    pending: list[list[str]] = [[]]  # per depth, binary operators waiting for their right operand
    operand = False  # the token before ends an operand (so ``-`` is binary)
    callable_ = False  # the token before is a name a ``(`` calls (not a keyword, not one defined)
    previous = earlier = ""  # the token before, and the one before it (``math.sqrt``: on numbers)
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        value = match.group()
        if kind == "name":
            callable_ = value not in _KEYWORDS and previous not in ("def", "class")
            operand = callable_ or value in _CONSTANTS  # ``return -x``: after a keyword, unary
            if (previous == "." and earlier == "math") or (previous != "." and value in _PYTHON_CALLS):
                callable_ = False  # ``math.sqrt(d)``, ``range(n)``: Python at work, no op
        elif kind == "op":
            if operand and value in _BINARY:
                waiting = pending[-1]
                kept = 1 if waiting[:1] == [STORE] else 0  # ``x[i] = a * b + c``: the store runs last
                out.extend(reversed(waiting[kept:]))  # ``a * b + c``: ``*`` ran before ``+``
                del waiting[kept:]
                waiting.append(_BINARY[value])
            elif value in _ENDS_OPERATORS:
                out.extend(reversed(pending[-1]))
                pending[-1].clear()
                if value == "=" and previous == "]":
                    pending[-1].append(STORE)  # ``x[i] = v`` stores once ``v`` has run
            operand = callable_ = False
        elif kind == "open":
            stack.append(previous if callable_ and value == "(" else None)
            pending.append([])
            operand = callable_ = False
        elif kind == "close":
            if stack:
                out.extend(reversed(pending.pop()))
                called = stack.pop()
                if called:
                    out.append(called)
            operand, callable_ = True, False
        elif kind == "nl":
            if not stack:
                out.extend(reversed(pending[-1]))
                pending[-1].clear()
            operand = callable_ = False
        elif kind == "skip":
            if value[0] == "#":
                continue  # a comment: the token before is still the one before
            operand, callable_ = True, False  # a string
        else:  # a number
            operand, callable_ = True, False
        earlier, previous = previous, value
    for waiting in pending:
        out.extend(reversed(waiting))
    return out


__all__ = ["STORE", "run_order"]
