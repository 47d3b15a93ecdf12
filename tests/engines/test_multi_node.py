"""Placement on a real multi-node Ray cluster (`ray.cluster_utils.Cluster`: a head and a worker node
on this machine, each with its own node id): `--placement` and the file-location affinity pin each
rank's task to its node, and the output is the local engine's, byte for byte."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.engines.conftest import STEPS
from tracer.cli import main

RANKS = STEPS / "ranks_decode_step"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def two_nodes(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[object]:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        pytest.skip("a Ray session already runs in this process")
    monkeypatch_module.setenv("PYTHONPATH", str(REPO))  # the nodes' workers import this checkout
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def ran_on(caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    """Trace file name -> the node id its task ran on (the Ray engine's DEBUG records)."""
    out = {}
    for record in caplog.records:
        if record.name == "tracer.engines.ray" and record.msg == "%s ran on node %s":
            path, node = record.args  # type: ignore[misc]
            out[Path(path).name] = node
    return out


def test_placement_pins_each_rank_to_the_named_node(two_nodes, tmp_path: Path, caplog) -> None:
    from tracer.engines.ray import alive_nodes, cluster

    with cluster(two_nodes.address) as nodes:  # joined here: node ids to name
        assert len(nodes) == 2 and len({n.node_id for n in nodes}) == 2
        names = sorted(p.name for p in RANKS.iterdir())
        wanted = {name: nodes[i % 2].node_id for i, name in enumerate(names)}
        wanted[names[0]], wanted[names[1]] = nodes[1].node_id, nodes[0].node_id  # not the default order
        placement = tmp_path / "hosts.json"
        placement.write_text(json.dumps(wanted))
        local = CliRunner().invoke(main, ["explain", str(RANKS), "--json"])
        caplog.set_level(logging.DEBUG, logger="tracer.engines.ray")
        on_ray = CliRunner().invoke(
            main,
            [
                "explain",
                str(RANKS),
                "--json",
                "--engine",
                "ray",
                "--address",
                "auto",
                "--placement",
                str(placement),
            ],
        )
        assert on_ray.exit_code == 0, on_ray.output
        assert on_ray.stdout_bytes == local.stdout_bytes
        assert ran_on(caplog) == wanted
        assert {n.node_id for n in alive_nodes()} == set(wanted.values())


def test_each_rank_runs_on_the_node_that_holds_its_file(two_nodes, caplog) -> None:
    """Both nodes share this machine's disk, so each node's listing is made to hold only its ranks, as
    if they sat on two hosts; the tasks then run where the files are, pinned by the scheduler."""
    from tracer.engines.ray import cluster, list_on_hosts, place, run_on_ray
    from tracer.explain.ranks import find_rank_traces
    from tracer.ranks import _jobs, explain_rank_job

    with cluster(two_nodes.address) as nodes:
        listings = list_on_hosts(RANKS, nodes)
        assert all(len(files) == 2 for files in listings.values())  # one disk: every node sees both
        names = sorted(listings[nodes[0].node_id])
        mine = {nodes[0].node_id: names[1], nodes[1].node_id: names[0]}  # node -> the one file it holds
        listings = {node: {mine[node]: listings[node][mine[node]]} for node in listings}
        found = find_rank_traces(RANKS, None)
        jobs = place(_jobs(found, {}), RANKS, listings, nodes)
        assert {Path(j.path).name: j.node for j in jobs} == {f: n for n, f in mine.items()}
        caplog.set_level(logging.DEBUG, logger="tracer.engines.ray")
        outcomes = run_on_ray(explain_rank_job, jobs, nodes)
        assert ran_on(caplog) == {f: n for n, f in mine.items()}
        local = [explain_rank_job(job) for job in jobs]
        assert [o.analysis.to_dict() for o in outcomes] == [o.analysis.to_dict() for o in local]
