"""The call graph built from real traces: the hot path, conserved weights, folding, export."""

from __future__ import annotations

import itertools

import networkx as nx
import pytest
from kv_cast_model import WHOLE_CAST_MARK, marked_line

from tracer.graph import KERNEL, OTHER, ROOT_ID, SCOPE, SITE, build_graph, write_graph


def _location_ends(attrs: dict, suffix: str) -> bool:
    return str(attrs.get("location", "")).endswith(suffix)


def test_hot_path_runs_from_root_through_the_whole_cast_line_to_its_kernel(kv_analyses):
    before, _ = kv_analyses
    graph = build_graph(before)
    hot = graph.graph["hot_path"]
    line = marked_line(WHOLE_CAST_MARK)

    assert hot[0] == ROOT_ID
    assert graph.nodes[hot[-1]]["kind"] == KERNEL
    sites = [node for node in hot if graph.nodes[node]["kind"] == SITE]
    assert len(sites) == 1
    assert _location_ends(graph.nodes[sites[0]], f"kv_cast_model.py:{line}")
    assert ".to(q.dtype)[kv_indices]" in graph.nodes[sites[0]]["source"]
    top = before.findings[0]
    assert graph.nodes[hot[-1]]["kernel"] == top.kernel
    # once per layer (4 layers) per step
    assert graph.edges[hot[-2], hot[-1]]["calls_per_step"] == pytest.approx(4)
    assert all(graph.edges[u, v]["hot"] for u, v in itertools.pairwise(hot))


def test_per_layer_ranges_collapse_into_one_scope(kv_analyses):
    before, _ = kv_analyses
    assert any(f.origin.ranges for f in before.findings)  # record_function("layer.N") in the model
    graph = build_graph(before)
    scopes = [attrs for _, attrs in graph.nodes(data=True) if attrs["kind"] == SCOPE]

    assert [attrs["label"] for attrs in scopes] == ["layer.*"]
    assert graph.nodes[graph.graph["hot_path"][1]]["label"] == "layer.*"


@pytest.mark.parametrize("which", ["kv", "llama"])
def test_kernel_in_edges_sum_to_the_kernel_totals(which, kv_analyses, llama_analysis):
    analysis = kv_analyses[0] if which == "kv" else llama_analysis
    graph = build_graph(analysis)
    kernel_totals: dict[str, int] = {}
    for finding in analysis.findings:
        kernel_totals[finding.kernel] = kernel_totals.get(finding.kernel, 0) + finding.total_ns
    kernels = {attrs["kernel"]: node for node, attrs in graph.nodes(data=True) if attrs["kind"] == KERNEL}

    assert set(kernels) == set(kernel_totals)
    for kernel, node in kernels.items():
        into = sum(graph.edges[u, node]["time_ns"] for u in graph.predecessors(node))
        assert into == graph.nodes[node]["time_ns"] == kernel_totals[kernel]
    # Every context node passes on exactly the time it receives.
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] != KERNEL and graph.out_degree(node):
            assert sum(graph.edges[node, v]["time_ns"] for v in graph.successors(node)) == attrs["time_ns"]
    assert graph.nodes[ROOT_ID]["time_ns"] == sum(f.total_ns for f in analysis.findings)


def test_top_and_min_share_fold_the_rest_into_other_nodes(llama_analysis):
    full = build_graph(llama_analysis)
    small = build_graph(llama_analysis, top=3, min_share=0.01)
    shown = [attrs for _, attrs in small.nodes(data=True) if attrs["kind"] == KERNEL]
    others = [attrs for _, attrs in small.nodes(data=True) if attrs["kind"] == OTHER]

    assert 1 <= len(shown) <= 3
    assert others, "the findings left out must still be there, as 'other'"
    assert small.nodes[ROOT_ID]["time_ns"] == full.nodes[ROOT_ID]["time_ns"]
    assert small.number_of_nodes() < full.number_of_nodes()
    assert nx.is_directed_acyclic_graph(small)
    # The heaviest finding survives the folding with its whole chain.
    assert small.nodes[small.graph["hot_path"][-1]]["kernel"] == llama_analysis.findings[0].kernel


def test_a_deep_python_stack_collapses_into_few_readable_nodes(llama_analysis):
    graph = build_graph(llama_analysis, top=10)
    hot = graph.graph["hot_path"]
    # generate() -> _sample -> LlamaForCausalLM ... -> line: plumbing dropped, linear runs merged
    assert len(hot) <= 12
    labels = " ".join(str(graph.nodes[n]["label"]) for n in hot)
    assert "_call_impl" not in labels
    assert graph.number_of_nodes() < 60


def test_graphml_and_node_link_json_round_trip(llama_analysis, tmp_path):
    graph = build_graph(llama_analysis, top=8)
    graphml = write_graph(graph, tmp_path / "g.graphml")
    as_json = write_graph(graph, tmp_path / "g.json")

    again = nx.read_graphml(graphml)
    assert again.number_of_nodes() == graph.number_of_nodes()
    assert again.number_of_edges() == graph.number_of_edges()
    assert again.nodes[ROOT_ID]["time_ns"] == graph.nodes[ROOT_ID]["time_ns"]
    import orjson

    data = orjson.loads(as_json.read_bytes())
    linked = nx.node_link_graph(data, edges="edges")
    assert set(linked.nodes) == set(graph.nodes)
    assert data["graph"]["hot_path"] == graph.graph["hot_path"]


def test_one_kernel_replayed_from_a_cuda_graph_is_split_between_its_two_lines(own_gpu_traces, repo_root):
    from tracer.api import explain_trace

    analysis = explain_trace(own_gpu_traces / "cudagraph_decode_stack.json.gz", source=(repo_root,))
    graph = build_graph(analysis, top=12)
    cast = next(
        node
        for node, attrs in graph.nodes(data=True)
        if attrs["kind"] == KERNEL
        and attrs["label"] == "unrolled_elementwise_kernel<direct_copy_kernel_cuda>"
    )
    lines = {}
    for parent in graph.predecessors(cast):
        # the op chain's parent is the site (drawn as one box)
        site = next(graph.predecessors(parent)) if graph.nodes[parent]["kind"] == "ops" else parent
        lines[graph.nodes[site]["location"]] = graph.edges[parent, cast]["time_ns"]

    assert set(lines) == {"examples/glm5_kv_cast/model.py:209", "examples/glm5_kv_cast/model.py:260"}
    assert lines["examples/glm5_kv_cast/model.py:209"] > 3 * lines["examples/glm5_kv_cast/model.py:260"]
    assert sum(lines.values()) == graph.nodes[cast]["time_ns"]
