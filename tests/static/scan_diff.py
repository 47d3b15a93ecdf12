"""Compare two `kerneltrace scan --json` outputs: the same sites, codes and scores, or what changed.

    python3 tests/static/scan_diff.py BEFORE.json AFTER.json [--allow KT102:KT105 ...]

Sites are matched by id and position (path, line, column). Prints sites found only before or only
after, code changes (`KT102 -> KT105: n`, each listed), score changes and any other field that
changed. Exits 1 when something differs that no `--allow OLD:NEW` code change explains (a site whose
code changed as allowed may change its first reason line, which names the rule, and nothing else).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

IGNORED = {"reasons"}  # compared on their own: the first line names the rule


def load_sites(path: Path) -> dict[tuple, dict]:
    data = json.loads(path.read_text())
    if data.get("sites_total", len(data["sites"])) != len(data["sites"]):
        raise SystemExit(f"{path}: not every site is in the output (use --json without --top)")
    return {(s["id"], s["path"], s["line"], s["col"]): s for s in data["sites"]}


def compare(before: dict[tuple, dict], after: dict[tuple, dict], allowed: set[tuple[str, str]]) -> int:
    only_before = sorted(set(before) - set(after))
    only_after = sorted(set(after) - set(before))
    code_changes: dict[tuple[str, str], list[dict]] = defaultdict(list)
    unexplained: list[str] = []
    for key in sorted(set(before) & set(after)):
        old, new = before[key], after[key]
        where = f"{new['path']}:{new['line']}:{new['col']} {new['text'][:70]!r}"
        if old["rule"] != new["rule"]:
            code_changes[(old["rule"], new["rule"])].append(new)
        fields = sorted(f for f in old if f not in IGNORED and f != "rule" and old[f] != new.get(f))
        if old["reasons"][1:] != new["reasons"][1:] or (
            old["rule"] == new["rule"] and old["reasons"] != new["reasons"]
        ):
            fields.append("reasons")
        for field in fields:
            unexplained.append(f"{where}: {field} {old[field]!r} -> {new.get(field)!r}")
    print(f"sites before {len(before)}, after {len(after)}, in both {len(set(before) & set(after))}")
    for label, keys, side in (("only before", only_before, before), ("only after", only_after, after)):
        for key in keys:
            site = side[key]
            unexplained.append(f"{label}: {site['path']}:{site['line']}:{site['col']} {site['rule']}")
    for (old_code, new_code), sites in sorted(code_changes.items()):
        mark = "" if (old_code, new_code) in allowed else "  (not allowed)"
        print(f"{old_code} -> {new_code}: {len(sites)} site(s){mark}")
        for site in sites:
            print(
                f"    {site['path']}:{site['line']}:{site['col']} risk {site['risk']:g} {site['text'][:70]!r}"
            )
        if mark:
            unexplained.append(f"{old_code} -> {new_code}: {len(sites)} site(s)")
    for line in unexplained:
        print(line)
    print("no other difference" if not unexplained else f"{len(unexplained)} unexplained difference(s)")
    return 1 if unexplained else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--allow", action="append", default=[], metavar="OLD:NEW")
    args = parser.parse_args(argv)
    allowed = {tuple(pair.split(":", 1)) for pair in args.allow}
    return compare(load_sites(args.before), load_sites(args.after), allowed)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
