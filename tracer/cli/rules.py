"""`kerneltrace rules`: list the rules, or explain one (what, why, example, fix)."""

from __future__ import annotations

from pathlib import Path

import click

from tracer.cli.common import print_json, reports_input_errors, wide_option
from tracer.errors import InputError
from tracer.render.console import stdout_console, table_console

# --rules DIR: extra rule files, for `rules` and `scan` alike.
rules_dirs_option = click.option(
    "--rules",
    "rules_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Add the *.toml rule files in DIR (repeatable).",
)


@click.command(name="rules")
@click.option("--explain", "code", metavar="CODE", help="Explain one rule, e.g. KT101.")
@rules_dirs_option
@click.option("--json", "as_json", is_flag=True, help="Machine output on stdout.")
@wide_option
@reports_input_errors
def command(code: str | None, rules_dirs: tuple[Path, ...], as_json: bool, wide: bool) -> None:
    """List the static-scan rules, or explain one with --explain CODE."""
    from tracer.static.rules import load_rule_set

    rule_set = load_rule_set(rules_dirs)
    rules = list(rule_set.rules)
    if code is not None:
        matches = [r for r in rules if r.code.upper() == code.upper() or r.name == code]
        if not matches:
            raise InputError(code, f"no such rule; known: {', '.join(r.code for r in rules)}")
        rules = matches
    if as_json:
        data = [_rule_dict(r, rule_set) for r in rules]
        print_json(data[0] if code is not None else data)
    elif code is not None:
        _explain(rules[0], rule_set)
    else:
        from tracer.render.scan_table import print_rules_table

        print_rules_table(table_console(), rules, wide=wide)


def _rule_dict(rule, rule_set) -> dict:
    return {
        "code": rule.code,
        "name": rule.name,
        "family": rule.family,
        "kind": rule.kind,
        "summary": rule.summary,
        "form": rule.form,
        "methods": sorted(rule.methods),
        "functions": sorted(rule.functions),
        "arg_class": sorted(rule.arg_class) if rule.arg_class is not None else None,
        "index_class": sorted(rule.index_class) if rule.index_class is not None else None,
        "min_args": rule.min_args,
        "max_args": rule.max_args,
        "receiver": list(rule.receiver) if rule.receiver is not None else None,
        "text": list(rule.text) if rule.text is not None else None,
        "priority": rule.priority,
        "match_order": rule_set.order.index(rule) + 1,
        "aten_ops": list(rule.aten_ops),
        "kernel_families": list(rule.kernel_families),
        "launches_kernel": rule.launches_kernel,
        "base": rule.base,
        "factors": [
            {"id": f.id, "on": f.on, "weight": rule.weights.get(f.id, f.weight), "reason": f.reason}
            for f in (*rule_set.factors, *rule.factors)
        ],
        "explain": rule.explain,
        "examples": {
            "valid": list(rule.valid),
            "invalid": [
                {"code": e.code, "expect": list(e.expect) if e.expect else None} for e in rule.invalid
            ],
        },
        "source": rule.source,
    }


def _explain(rule, rule_set) -> None:
    from rich.markdown import Markdown

    from tracer.static.precedence import match_words

    explain = rule.explain
    factors = "\n".join(
        f"- `{rule.weights.get(f.id, f.weight):+g}` {f.reason} (`{f.id}`, on {f.on})"
        for f in (*rule_set.factors, *rule.factors)
    )
    text = f"""# {rule.code} {rule.name}

{rule.summary}

Matches {match_words(rule)}; tried {rule_set.order.index(rule) + 1} of {len(rule_set.order)} (the first that matches wins).

## What it does
{explain.get("what", "")}

## Why it matters
{explain.get("why", "")}

## Example
```python
{explain.get("example", "").strip()}
```

## Fix
```python
{explain.get("fix", "").strip()}
```

## Lowers to
{" -> ".join(f"`{op}`" for op in rule.aten_ops) or "nothing"}; kernels: {", ".join(f"`{k}`" for k in rule.kernel_families) or "none (launches no kernel)"}

## Risk
Base {rule.base:g}, plus:
{factors}
"""
    stdout_console().print(Markdown(text))
