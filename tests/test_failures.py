"""Blast radius of failed links and switches, against the HPN and single-homed facts and networkx."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from topoplan import pipeline
from topoplan.failures import arc_mask, blast_radius, component_counts, link_down_mask
from topoplan.reliability import hpn_network_rates, interruptions, llama3_rates
from topoplan.spec import design_from_data, load_design
from topoplan.topology import KIND, LINK_TIER

from conftest import ROOT, spec_data


def _build(catalog, make_design=None, name=None, **sections):
    design = load_design(ROOT / "designs" / f"{name}.yaml", catalog) if name else make_design(**sections)
    return pipeline.build(design, catalog)[0]


def _nic_links(topology):
    return np.flatnonzero(topology.link_tier[0::2] == LINK_TIER["leaf"])


def _switches(topology, tier):
    return np.flatnonzero((topology.kind == KIND["switch"]) & (topology.tier == tier))


def test_hpn_dual_tor_host_loses_one_sixteenth(catalog):
    topology = _build(catalog, name="hpn-pod-15k")
    one_port = blast_radius(topology, failed_links=[_nic_links(topology)[0]])
    assert not one_port.job_stops
    assert one_port.degraded_servers == 1
    assert one_port.worst_server_fraction == pytest.approx(15 / 16)  # 6.25% drop
    # A whole ToR: every host under it keeps the other plane's ports, nobody stops.
    tor = blast_radius(topology, failed_nodes=[_switches(topology, 0)[0]])
    assert not tor.job_stops and tor.degraded_servers > 1
    assert tor.worst_server_fraction == pytest.approx(15 / 16)


def test_single_homed_nic_link_stops_the_job(catalog, make_design):
    topology = _build(catalog, make_design, cluster={"gpus": 256})
    link = _nic_links(topology)[0]
    result = blast_radius(topology, failed_links=[link])
    assert result.job_stops and result.stopped_gpus.size == 1
    # The stopped GPU is the one behind that NIC.
    nic = topology.src[2 * link] if topology.kind[topology.src[2 * link]] == KIND["nic"] else topology.dst[2 * link]
    host = (topology.link_tier == LINK_TIER["host"]) & (topology.dst == nic)
    assert result.stopped_gpus.tolist() == sorted(set(topology.src[host]) & set(topology.gpus.tolist()))
    assert result.worst_server_fraction == pytest.approx(7 / 8)


def test_spine_loss_stops_nothing_and_costs_no_host_bandwidth(catalog, make_design):
    topology = _build(catalog, make_design, cluster={"gpus": 1024})
    result = blast_radius(topology, failed_nodes=[_switches(topology, 1)[0]])
    assert not result.job_stops and result.degraded_servers == 0 and result.worst_server_fraction == 1


def test_leaf_loss_in_single_plane_stops_every_gpu_under_it(catalog, make_design):
    topology = _build(catalog, make_design, cluster={"gpus": 1024})
    leaf = _switches(topology, 0)[0]
    under = np.unique(np.concatenate([topology.dst[topology.src == leaf], topology.src[topology.dst == leaf]]))
    nics_under = under[topology.kind[under] == KIND["nic"]]
    result = blast_radius(topology, failed_nodes=[leaf])
    assert result.stopped_gpus.size == nics_under.size  # one GPU per NIC on a DGX H100


def test_masks_take_both_arcs_and_refuse_out_of_range(catalog, make_design):
    topology = _build(catalog, make_design, cluster={"gpus": 128})
    down = link_down_mask(topology, failed_links=[3])
    mask = arc_mask(down)
    assert mask.size == topology.num_arcs and not mask[6] and not mask[7] and mask.sum() == topology.num_arcs - 2
    with pytest.raises(ValueError):
        link_down_mask(topology, failed_links=[topology.num_links])
    with pytest.raises(ValueError):
        link_down_mask(topology, failed_nodes=[-1])


def _networkx_stopped(topology, failed_links, failed_nodes):
    """The contract again, node by node in networkx: an independent oracle."""
    graph = nx.Graph()
    graph.add_nodes_from(range(topology.num_nodes))
    dead = set(int(x) for x in failed_nodes)
    failed = set(int(x) for x in failed_links)
    uplinks = {}
    for link in range(topology.num_links):
        a, b = int(topology.src[2 * link]), int(topology.dst[2 * link])
        up = link not in failed and a not in dead and b not in dead
        if up:
            graph.add_edge(a, b)
        if topology.link_tier[2 * link] != LINK_TIER["host"]:
            for end in (a, b):
                if topology.kind[end] == KIND["nic"]:
                    uplinks.setdefault(end, []).append(up)
    gpus = [int(g) for g in topology.gpus]
    live = [g for g in gpus if g not in dead]
    pieces = list(nx.connected_components(graph))
    main = max(pieces, key=lambda piece: sum(1 for g in live if g in piece))
    stopped = {g for g in gpus if g in dead or g not in main}
    for nic, ups in uplinks.items():
        if not any(ups):
            stopped |= {g for g in topology.gpus.tolist() if topology.kind[g] == KIND["gpu"] and
                        any(int(topology.dst[2 * k]) == nic or int(topology.src[2 * k]) == nic
                            for k in np.flatnonzero((topology.src[0::2] == g) | (topology.dst[0::2] == g))
                            if topology.link_tier[2 * k] == LINK_TIER["host"])}
    return sorted(stopped)


@pytest.fixture(scope="module")
def small_rail(catalog):
    data = spec_data(cluster={"server": "hgx-b300", "gpus": 128},
                     fabric={"topology": "rail-optimized", "switch": "nvidia-qm9700", "planes": 2})
    return pipeline.build(design_from_data(data, catalog), catalog)[0]


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_stopped_gpus_match_networkx(small_rail, data):
    topology = small_rail
    links = data.draw(st.lists(st.integers(0, topology.num_links - 1), max_size=40, unique=True))
    nodes = data.draw(st.lists(st.integers(0, topology.num_nodes - 1), max_size=3, unique=True))
    result = blast_radius(topology, links, nodes)
    assert result.stopped_gpus.tolist() == _networkx_stopped(topology, links, nodes)
    assert ((result.server_injection_fraction >= 0) & (result.server_injection_fraction <= 1)).all()


def test_dual_port_nic_stops_only_when_both_ports_are_down(small_rail):
    topology = small_rail
    nic = topology.nodes_of("nic")[0]
    ports = [k for k in _nic_links(topology) if nic in (topology.src[2 * k], topology.dst[2 * k])]
    assert len(ports) == 2
    one = blast_radius(topology, ports[:1])
    both = blast_radius(topology, ports)
    assert not one.job_stops and one.worst_server_fraction == pytest.approx(15 / 16)
    assert both.stopped_gpus.tolist() == _networkx_stopped(topology, ports, []) and both.stopped_gpus.size == 1


def test_component_counts_follow_the_bom(catalog):
    design = load_design(ROOT / "designs" / "fat-tree-16k.yaml", catalog)
    topology, bom = pipeline.build(design, catalog)
    counts = component_counts(topology)
    assert counts["gpu"] == 16_384 and counts["host"] == 2_048 and counts["nic"] == 16_384
    assert counts["nic_link"] == 16_384  # one 400G port per ConnectX-7
    assert counts["switch"] == sum(topology.switches_by_tier().values())
    assert counts["link"] == sum(topology.links_by_tier().values())
    # Llama 3's rates on Llama 3's cluster size give Llama 3's 7.76 a day; HPN's network rates add
    # 16,384 x 0.057%/month of NIC links and the ToRs.
    assert interruptions(llama3_rates(), counts).per_day == pytest.approx(419 / 54)
    network = interruptions(hpn_network_rates(), counts)
    expected = (16_384 * 0.00057 + counts["leaf_switch"] * 0.00051) / (365.25 / 12)
    assert network.per_day == pytest.approx(expected)
