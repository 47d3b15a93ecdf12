"""SARIF 2.1.0 (GitHub code scanning) from a static scan: one result per site, rules from rules/."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from tracer.model.site import Site
from tracer.render.escape import strip_control
from tracer.static.rules import Rule
from tracer.version import __version__

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
MAX_RESULTS = 25_000  # GitHub code scanning accepts at most this many results per run
WARNING_RISK = 60.0  # at or above: "warning"; below: "note"


def sarif_log(sites: Sequence[Site], rules: Sequence[Rule], *, skipped: Sequence[Any] = ()) -> dict[str, Any]:
    """A SARIF log object (JSON-ready) for `sites`, highest risk first, at most `MAX_RESULTS`."""
    used = {s.rule for s in sites}
    driver_rules = [r for r in rules if r.code in used] or list(rules)
    index = {r.code: i for i, r in enumerate(driver_rules)}
    ordered = sorted(sites, key=lambda s: (-s.risk, s.path, s.line, s.col))
    results = [_result(s, index) for s in ordered[:MAX_RESULTS] if s.rule in index]
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "kerneltrace",
                "version": __version__,
                "semanticVersion": __version__,
                "rules": [_descriptor(r) for r in driver_rules],
            }
        },
        "columnKind": "unicodeCodePoints",
        "results": results,
        "properties": {"sites": len(sites), "truncated": len(sites) > MAX_RESULTS},
    }
    if skipped:
        run["invocations"] = [
            {
                "executionSuccessful": True,
                "toolExecutionNotifications": [
                    {
                        "level": "note",
                        "message": {"text": f"skipped: {strip_control(s.reason)}"},
                        "locations": [{"physicalLocation": {"artifactLocation": {"uri": file_uri(s.path)}}}],
                    }
                    for s in skipped
                ],
            }
        ]
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def _descriptor(rule: Rule) -> dict[str, Any]:
    explain = rule.explain
    markdown = "\n\n".join(
        part
        for part in (
            f"**{rule.code} {rule.name}**: {rule.summary}",
            f"## What it does\n{explain.get('what', '')}",
            f"## Why it matters\n{explain.get('why', '')}",
            f"## Example\n```python\n{explain.get('example', '').strip()}\n```"
            if explain.get("example")
            else "",
            f"## Fix\n```python\n{explain.get('fix', '').strip()}\n```" if explain.get("fix") else "",
            "Lowers to: " + " -> ".join(rule.aten_ops) if rule.aten_ops else "",
        )
        if part
    )
    return {
        "id": rule.code,
        "name": "".join(word.capitalize() for word in rule.name.split("-")),
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": explain.get("what", rule.summary)},
        "help": {
            "text": f"{explain.get('why', '')} Fix: {explain.get('fix', '').strip()}",
            "markdown": markdown,
        },
        "defaultConfiguration": {"level": "note"},
        "properties": {
            "tags": ["performance", rule.family],
            "precision": "medium",
            "aten_ops": list(rule.aten_ops),
            "kernel_families": list(rule.kernel_families),
        },
    }


def _result(site: Site, index: dict[str, int]) -> dict[str, Any]:
    region: dict[str, Any] = {"startLine": site.line, "startColumn": site.col + 1}
    if site.end_line and site.end_line >= site.line:
        region["endLine"] = site.end_line
    reasons = "; ".join(site.reasons)
    return {
        "ruleId": site.rule,
        "ruleIndex": index[site.rule],
        "level": "warning" if site.risk >= WARNING_RISK else "note",
        "rank": round(site.risk, 1),
        "message": {
            "text": f"{site.kind} `{_one_line(site.text)}` in {strip_control(site.function)} "
            f"(risk {site.risk:g}): {reasons}"
        },
        "locations": [
            {
                "physicalLocation": {"artifactLocation": {"uri": file_uri(site.path)}, "region": region},
                "logicalLocations": [{"fullyQualifiedName": site.function, "kind": "function"}],
            }
        ],
        "partialFingerprints": {"kerneltraceSiteId/v1": site.id},
        "properties": {
            "risk": site.risk,
            "reasons": list(site.reasons),
            "aten_ops": list(site.aten_ops),
            "kernel_families": list(site.kernel_families),
            "launches_kernel": site.launches_kernel,
            "def_line": site.def_line,
            "in_loop": site.in_loop,
        },
    }


def file_uri(path: str) -> str:
    """A site's path as a SARIF relative URI reference: ``#``, ``%``, ``?``, spaces and control
    characters in a file name are percent-encoded instead of read as a fragment or query."""
    return quote(path.encode("utf-8", "surrogateescape"), safe="/")  # bytes that are not UTF-8: %XX


def _one_line(text: str, limit: int = 120) -> str:
    # Code is untrusted text (string literals may hold ESC or bidi overrides: "Trojan Source").
    flat = " ".join(strip_control(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
