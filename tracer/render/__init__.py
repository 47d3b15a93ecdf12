"""Renderings of an analysis and its graph: DOT/SVG/PNG, HTML report, annotated trace."""
