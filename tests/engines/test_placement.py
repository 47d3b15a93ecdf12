"""Where each rank's task runs: on the one host that holds its file, anywhere when all hold it, on
the host a placement file names (no Ray needed: the placement is plain data)."""

from __future__ import annotations

import pytest

from tracer.engines import RankJob
from tracer.engines.ray import Node, place
from tracer.errors import InputError

NODES = [Node("a" * 8, "10.0.0.1", "host-a", 64 << 30), Node("b" * 8, "10.0.0.2", "host-b", 64 << 30)]
JOBS = [RankJob(f"/runs/tp/r-TP-{rank}.trace.json.gz") for rank in range(3)]
LISTINGS = {
    "a" * 8: {"r-TP-0.trace.json.gz": 100, "r-TP-2.trace.json.gz": 300},
    "b" * 8: {"r-TP-1.trace.json.gz": 200, "r-TP-2.trace.json.gz": 300},
}


def test_each_rank_runs_on_the_host_that_holds_it() -> None:
    placed = place(JOBS, "/runs/tp", LISTINGS, NODES)
    assert [(j.node, j.json_bytes) for j in placed] == [("a" * 8, 100), ("b" * 8, 200), (None, 300)]


def test_a_placement_file_names_hosts_by_address_name_or_id() -> None:
    manifest = {"r-TP-2.trace.json.gz": "host-b", "r-TP-0.trace.json.gz": "10.0.0.1"}
    placed = place(JOBS, "/runs/tp", LISTINGS, NODES, manifest)
    assert [j.node for j in placed] == ["a" * 8, "b" * 8, "b" * 8]
    with pytest.raises(
        InputError, match=r"r-TP-0\.trace\.json\.gz: no alive node of the Ray cluster is 'host-z'"
    ):
        place(JOBS, "/runs/tp", LISTINGS, NODES, {"r-TP-0.trace.json.gz": "host-z"})
