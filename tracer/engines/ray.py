"""The Ray engine: one task per rank trace, on the node that holds the file, each asking Ray for the
memory its load needs; only each rank's result travels back. Ray is optional (`kerneltrace[ray]`)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tracer.engines.job import Outcome, RankJob, RankTask, failed
from tracer.errors import InputError

WHERE = "--engine ray"
CONNECT_TIMEOUT_S = 5.0
log = logging.getLogger(__name__)  # DEBUG: the node each rank's task ran on


@dataclass(frozen=True)
class Node:
    """One alive node of the cluster: its id, address, host name and the memory Ray may give tasks."""

    node_id: str
    address: str
    hostname: str
    memory: int

    def is_named(self, name: str) -> bool:
        return name in (self.node_id, self.address, self.hostname)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError(WHERE, "Ray is not installed here: pip install 'kerneltrace[ray]'") from None
    return ray


@contextmanager
def cluster(address: str | None = None, num_cpus: int | None = None) -> Iterator[list[Node]]:
    """Connected to the Ray cluster at `address` (else the one this process already joined, else a new
    local one of `num_cpus`), its alive nodes inside the block; a cluster started here stops after it."""
    ray = _ray()
    started = False
    if address:
        _check_reachable(address)
    if not ray.is_initialized():
        quiet = logging.getLogger("ray")
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # Ray's start-up notices (auth tokens, ports) are not our output
        try:
            ray.init(
                address=address,
                num_cpus=None if address else num_cpus,
                include_dashboard=False if not address else None,
                log_to_driver=False,
                configure_logging=False,
                runtime_env=None if address else {"env_vars": {"PYTHONPATH": _import_path()}},
            )
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as err:
            raise InputError(address or WHERE, f"could not join a Ray cluster: {_one_line(err)}") from None
        finally:
            quiet.setLevel(level)
        started = True
    try:
        yield alive_nodes()
    finally:
        if started:
            ray.shutdown()


def alive_nodes() -> list[Node]:
    ray = _ray()
    nodes = [
        Node(
            n["NodeID"],
            n["NodeManagerAddress"],
            n.get("NodeManagerHostname", ""),
            int(n["Resources"].get("memory", 0)),
        )
        for n in ray.nodes()
        if n.get("Alive")
    ]
    return sorted(nodes, key=lambda n: n.node_id)


def list_on_hosts(directory: str | Path, nodes: Sequence[Node]) -> dict[str, dict[str, int]]:
    """Per node id, the trace files under `directory` on that host (relative name -> JSON bytes):
    the same path on every host holds that host's ranks (one small task per node)."""
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    lister = ray.remote(_list_here)
    refs = {
        node.node_id: lister.options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False)
        ).remote(str(directory))
        for node in nodes
    }
    return {node_id: ray.get(ref) for node_id, ref in refs.items()}


def _list_here(directory: str) -> dict[str, int]:
    from tracer.explain.ranks.files import list_trace_files
    from tracer.load.memory import json_size_of

    folder = Path(directory)
    if not folder.is_dir():
        return {}
    return {name: json_size_of(folder / name) for name in list_trace_files(folder)}


def place(
    jobs: Sequence[RankJob],
    directory: str | Path,
    listings: dict[str, dict[str, int]],
    nodes: Sequence[Node],
    manifest: dict[str, str] | None = None,
) -> list[RankJob]:
    """Each job pinned to the node that holds its file (the manifest's host when it names one; no
    pin when every node holds it, as on a shared file system), with the JSON size measured there."""
    placed = []
    for job in jobs:
        name = os.path.relpath(job.path, directory)
        holders = [node_id for node_id in sorted(listings) if name in listings[node_id]]
        if manifest and name in manifest:
            named = [n.node_id for n in nodes if n.is_named(manifest[name])]
            if not named:
                raise InputError(
                    "--placement", f"{name}: no alive node of the Ray cluster is {manifest[name]!r}"
                )
            holders = [h for h in holders if h in named] or named[:1]
        node = holders[0] if holders and len(holders) < len(nodes) else None
        size = listings.get(holders[0], {}).get(name) if holders else None
        placed.append(replace(job, node=node, json_bytes=size))
    return placed


def run_on_ray(task: RankTask, jobs: Sequence[RankJob], nodes: Sequence[Node]) -> list[Outcome]:
    """Each job's outcome in job order: one Ray task per job, pinned to its node, asking for the memory
    its load needs (at most what a task may have on that node: a bigger rank runs in a window)."""
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from tracer.load.memory import estimated_peak

    by_id = {n.node_id: n for n in nodes}
    smallest = min((n.memory for n in nodes if n.memory), default=0)
    remote = ray.remote(max_retries=0)(_on_node)
    refs = []
    for job in jobs:
        room = by_id[job.node].memory if job.node in by_id else smallest
        need = estimated_peak(job.json_bytes) if job.json_bytes is not None else None
        budget = min(need, room) if need is not None and room else (room or None)
        options: dict[str, Any] = {"num_cpus": 1}
        if budget:
            options["memory"] = budget
        if job.node is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(job.node, soft=False)
        refs.append(remote.options(**options).remote(task, job, budget))
    outcomes = []
    for job, ref in zip(jobs, refs):
        try:
            outcome, node_id = ray.get(ref)
            log.debug("%s ran on node %s", job.path, node_id)
            outcomes.append(outcome)
        except ray.exceptions.RayTaskError:
            raise  # a bug in the task, not in the input
        except ray.exceptions.RayError as err:
            outcomes.append(failed(job, f"the Ray task explaining this trace failed: {_one_line(err)}"))
    return outcomes


def _on_node(task: RankTask, job: RankJob, budget: int | None) -> tuple[Outcome, str]:
    """The task's outcome and the id of the node it ran on."""
    return task(job, budget), _ray().get_runtime_context().get_node_id()


def read_manifest(path: str | Path) -> dict[str, str]:
    """``--placement FILE``: a JSON object, trace file name (relative to the directory) -> host (node
    IP, host name or Ray node id)."""
    import orjson

    try:
        data = orjson.loads(Path(path).read_bytes())
    except OSError as err:
        raise InputError(path, err.strerror or str(err)) from None
    except orjson.JSONDecodeError as err:
        raise InputError(path, f"not JSON: {err}") from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise InputError(path, 'not a placement file: expected {"<trace file name>": "<host>", ...}')
    return data


def _check_reachable(address: str) -> None:
    """A host:port address must answer before Ray is asked (Ray itself retries for a long while)."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(address, "not a Ray address: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        raise InputError(address, f"no Ray cluster answers there ({err.strerror or err})") from None


def _import_path() -> str:
    """The driver's kerneltrace first on the workers' path, so the tasks run this very code."""
    import tracer

    root = str(Path(tracer.__file__).resolve().parents[1])
    rest = os.environ.get("PYTHONPATH", "")
    return root + (os.pathsep + rest if rest else "")


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:300]
