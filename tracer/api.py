"""The facade every consumer calls: one trace in, one `Analysis` out (load -> sites -> join -> explain)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tracer.errors import InputError
from tracer.load.window import TraceWindow
from tracer.model.events import Trace
from tracer.model.finding import Analysis
from tracer.model.origin import Attributions
from tracer.model.site import Site


def explain_trace(
    trace: str | Path | Trace,
    *,
    source: Sequence[str | Path] = (),
    sites: str | Path | Sequence[Site] | None = None,
    layers: int | None = None,
    config: str | Path | None = None,
    step_range: str | None = None,
    peak_gbps: float | None = None,
    capture: str | Path | Sequence[str | Path] | None = None,
    window: TraceWindow | None = None,
    step_methods: tuple[str, ...] | None = None,
) -> Analysis:
    """Analyse the profiler trace at ``trace`` (a path, or a `Trace` already loaded by `load_trace`).

    ``sites``: a ``kerneltrace scan --json`` file or the sites themselves; without them, the files the
    trace names are scanned under the ``source`` roots (exact lines for traces without CallFrom), or,
    for a trace recorded without stacks, every file under them (a ranking of candidate lines).
    ``source`` also lets origins carry the text of their line. ``capture``: trace(s) of a profiled
    CUDA-graph capture, when the trace's graph replays were captured outside it. The other arguments
    go to `tracer.explain.analyse`. ``window``: analyse only that part of the trace (a time span
    or ProfilerStep#N..M, `tracer.load.TraceWindow`), dropped while parsing. ``config`` also names
    the model's classes (``architectures``): without Python frames, of code that fits alike, the
    files defining them answer first. ``step_methods``: find
    the steps only these ways (`tracer.explain.steps.method_key`). Raises `InputError` for
    any bad input, including a trace too big for the memory available (the error says how to proceed).
    """
    from tracer.explain import analyse

    attributions = attribute_trace(
        trace, source=source, sites=sites, capture=capture, window=window, config=config
    )
    return analyse(
        attributions,
        layers=layers,
        config=Path(config) if config is not None else None,
        step_range=step_range,
        peak_gbps=peak_gbps,
        step_methods=step_methods,
    )


def attribute_trace(
    trace: str | Path | Trace,
    *,
    source: Sequence[str | Path] = (),
    sites: str | Path | Sequence[Site] | None = None,
    capture: str | Path | Sequence[str | Path] | None = None,
    window: TraceWindow | None = None,
    config: str | Path | None = None,
) -> Attributions:
    """The join's answer for every GPU event of ``trace`` (what `annotate` writes back): sites (given,
    or scanned from ``source``) -> join -> CUDA-graph replays. ``trace``: a path or a loaded `Trace`.
    ``config``: the model's config.json, whose ``architectures`` name the model for traces without
    Python frames."""
    from tracer.explain.structure import config_architectures
    from tracer.join import attribute, has_python_frames, sites_for_trace
    from tracer.join.replay.attribute import attribute_replays
    from tracer.join.replay.compiled import attribute_compiled_replays
    from tracer.load import load_trace

    roots = _check_roots(source)  # before loading: a mistyped root should not wait for a big trace
    architectures = config_architectures(Path(config)) if config is not None else ()  # a bad one too
    if isinstance(trace, Trace):
        if window is not None:
            raise ValueError("window applies while loading: pass a path, or load_trace(path, window)")
    else:
        trace = load_trace(trace, window)
    if capture is None:
        capture_paths: list[Path] = []
    elif isinstance(capture, (str, Path)):
        capture_paths = [Path(capture)]
    else:
        capture_paths = [Path(p) for p in capture]
    captures = [load_trace(p) for p in capture_paths]
    if isinstance(sites, (str, Path)):
        site_list: Sequence[Site] | None = read_sites(Path(sites))
    elif sites is not None:
        site_list = list(sites)
    elif roots:
        traces = (trace, *captures)
        if any(has_python_frames(t) for t in traces):
            found = {s.id: s for t in traces for s in sites_for_trace(t, roots)}
            site_list = list(found.values())
        else:
            # No frames name the files: without stacks, every file under the roots is a candidate.
            from tracer.static import scan

            site_list = list(scan(roots).sites)
    else:
        site_list = None
    attributions = attribute(trace, site_list, source_roots=roots, architectures=architectures)
    # Graph replays (if any) take their capture-time lines; a no-op for traces without replays.
    attribute_replays(trace, attributions, captures, sites=site_list, source_roots=roots)
    attribute_compiled_replays(trace, attributions, source_roots=roots)  # replays of compiled code
    return attributions


def _check_roots(source: Sequence[str | Path]) -> list[Path]:
    """The --source roots, each an existing directory or file, resolved (symlinks followed once, here):
    what is read under them is judged against where they really are."""
    roots = []
    for raw in source:
        root = Path(raw)
        try:
            exists = root.exists()
        except (OSError, ValueError):
            exists = False
        if not exists:
            raise InputError(root, "no such source directory or file (--source)")
        roots.append(root.resolve())
    return roots


def read_sites(path: Path) -> list[Site]:
    """Sites from a ``kerneltrace scan --json`` file: a list of sites, or an object with a "sites" list.

    Read like a trace (a regular file, bounded in size and depth) and every field checked: a bad file
    is one line naming it and the site that is wrong."""
    from tracer.input_files import MAX_SITES_BYTES, read_json_side_input
    from tracer.static.sites_json import BadSite, site_from_json

    data = read_json_side_input(path, "--sites", MAX_SITES_BYTES)
    items = data.get("sites") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise InputError(path, 'not a sites file: expected a list of sites or an object with a "sites" list')
    sites = []
    for number, item in enumerate(items, 1):
        try:
            sites.append(site_from_json(item))
        except BadSite as err:
            raise InputError(path, f"not a sites file: site {number}: {err}") from None
    return sites
