"""The facade every consumer calls: one trace in, one `Analysis` out (load -> sites -> join -> explain)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import orjson

from tracer.errors import InputError
from tracer.model.finding import Analysis
from tracer.model.site import Site


def explain_trace(
    path: str | Path,
    *,
    source: Sequence[str | Path] = (),
    sites: str | Path | Sequence[Site] | None = None,
    layers: int | None = None,
    config: str | Path | None = None,
    step_range: str | None = None,
    peak_gbps: float | None = None,
) -> Analysis:
    """Analyse the profiler trace at ``path``.

    ``sites``: a ``kerneltrace scan --json`` file or the sites themselves; without them, the files the
    trace names are scanned under the ``source`` roots (exact lines for traces without CallFrom).
    ``source`` also lets origins carry the text of their line. The other arguments go to
    `tracer.explain.analyse`. Raises `InputError` for any bad input.
    """
    from tracer.explain import analyse
    from tracer.join import attribute, sites_for_trace
    from tracer.load import load_trace

    roots = [Path(p) for p in source]
    for root in roots:
        if not root.exists():
            raise InputError(root, "no such source directory or file (--source)")
    trace = load_trace(path)
    if isinstance(sites, (str, Path)):
        site_list: Sequence[Site] | None = read_sites(Path(sites))
    elif sites is not None:
        site_list = list(sites)
    elif roots:
        site_list = sites_for_trace(trace, roots)
    else:
        site_list = None
    attributions = attribute(trace, site_list, source_roots=roots)
    return analyse(
        attributions,
        layers=layers,
        config=Path(config) if config is not None else None,
        step_range=step_range,
        peak_gbps=peak_gbps,
    )


def read_sites(path: Path) -> list[Site]:
    """Sites from a ``kerneltrace scan --json`` file: a list of sites, or an object with a "sites" list."""
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise InputError(path, "no such sites file (--sites)") from None
    except (OSError, orjson.JSONDecodeError) as err:
        raise InputError(path, f"not a JSON sites file ({err})") from None
    items = data.get("sites") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise InputError(path, 'not a sites file: expected a list of sites or an object with a "sites" list')
    try:
        return [Site.from_dict(item) for item in items]
    except (TypeError, AttributeError) as err:
        raise InputError(path, f"not a sites file: a site could not be read ({err})") from None
