"""The static site map: every copy/cast/layout site in a code base, ranked by risk (`scan()`)."""

from tracer.static.files import PRESETS, preset_paths, resolve_package
from tracer.static.rules import Rule, RuleSet, load_rule_set, load_rules
from tracer.static.scanner import FileScan, ScanResult, SkippedFile, scan, scan_source

__all__ = [
    "PRESETS",
    "FileScan",
    "Rule",
    "RuleSet",
    "ScanResult",
    "SkippedFile",
    "load_rule_set",
    "load_rules",
    "preset_paths",
    "resolve_package",
    "scan",
    "scan_source",
]
