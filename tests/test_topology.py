"""The columnar Topology and its builder."""

from __future__ import annotations

import numpy as np
import pytest

from topoplan.layout import Layout
from topoplan.topology import KIND, LINK_TIER, MEDIUM, TopologyBuilder


def _tiny():
    builder = TopologyBuilder("tiny")
    gpus = builder.add_nodes("gpu", 4, "gpu", server=np.array([0, 0, 1, 1]), rail=np.array([0, 1, 0, 1]))
    switch = builder.add_nodes("switch", 1, "leaf", tier=0, model="nvidia-qm9700")
    builder.add_links(gpus, switch[0], 400.0, 10.0, "optical", "leaf")
    builder.add_links(gpus[0], gpus[1], 3600.0, 0.0, "nvlink", "host")
    return builder.build(Layout(family="test"))


def test_arcs_pair_up_with_reverse():
    topology = _tiny()
    assert topology.check() == []
    assert topology.num_nodes == 5 and topology.num_links == 5 and topology.num_arcs == 10
    arcs = np.arange(topology.num_arcs)
    reverse = topology.reverse(arcs)
    assert np.array_equal(topology.src[reverse], topology.dst)
    assert np.array_equal(topology.dst[reverse], topology.src)
    assert np.array_equal(topology.reverse(reverse), arcs)


def test_names_groups_and_models():
    topology = _tiny()
    assert [topology.node_name(i) for i in range(5)] == ["gpu0", "gpu1", "gpu2", "gpu3", "leaf0"]
    assert topology.server.tolist() == [0, 0, 1, 1, -1]
    assert topology.model_of(4) == "nvidia-qm9700" and topology.model_of(0) == ""
    assert topology.links_by_tier() == {"leaf": 4}
    assert topology.switches_by_tier() == {"leaf": 1}
    assert topology.kind[4] == KIND["switch"]
    assert (topology.medium[topology.link_tier == LINK_TIER["host"]] == MEDIUM["nvlink"]).all()


def test_check_reports_broken_arrays():
    topology = _tiny()
    topology.capacity_gbps = topology.capacity_gbps.copy()
    topology.capacity_gbps[1] = 1.0
    topology.dst = topology.dst.copy()
    topology.dst[3] = topology.src[3]
    problems = topology.check()
    assert any("capacity" in p for p in problems)
    assert any("reverse" in p for p in problems)


def test_unknown_group_is_a_bug():
    with pytest.raises(ValueError):
        TopologyBuilder("x").add_nodes("gpu", 1, "gpu", rack=0)


def test_networkx_view_keeps_every_arc():
    graph = _tiny().to_networkx()
    assert graph.number_of_edges() == 10
    assert graph.nodes[4]["kind"] == "switch" and graph.nodes[4]["name"] == "leaf0"
    assert graph.edges[0, 4, 0]["capacity_gbps"] == 400.0
