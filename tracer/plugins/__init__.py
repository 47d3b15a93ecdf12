"""Plugins that put kerneltrace's ranges into other programs without editing them (SGLang first)."""
