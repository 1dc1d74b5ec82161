"""``clos-failed`` (ECMP by destination classes under failures) held equal to the generic ``ecmp`` engine,
and a failed spine held to the closed form of a two-tier fat-tree."""

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from topoplan.flow import EngineRefused, degraded, ecmp, route, select_engine
from topoplan.flow.engine import RouteRequest
from topoplan.flow.traffic import Demand
from topoplan.failures import arc_mask, link_down_mask
from topoplan.generators import generate
from topoplan.spec import design_from_data
from topoplan.topology import KIND, LINK_TIER

from conftest import spec_data
from test_engine_invariants import FABRICS, TREES, _catalog, _hidden_structure

MULTI_PLANE = {
    # twin-port NICs on two fat-tree planes, and on two rail planes; HPN-like dual-ToR hosts
    "twin-plane": dict(cluster={"server": "hgx-b300", "gpus": None, "servers": 8},
                       fabric={"topology": "fat-tree", "switch": "generic-48x400g", "planes": 2, "tiers": 2}),
    "twin-rail": dict(cluster={"server": "hgx-b300", "gpus": None, "servers": 8},
                      fabric={"topology": "rail-optimized", "switch": "generic-48x400g", "planes": 2,
                              "scalable_unit": 4}),
    "dual-tor": dict(cluster={"server": "hpn-h800-dual-port", "gpus": None, "servers": 8},
                     fabric={"topology": "rail-optimized", "switch": "generic-48x400g", "planes": 2,
                             "scalable_unit": 4}),
}
ALL = {**{name: FABRICS[name] for name in TREES}, **MULTI_PLANE}


@functools.lru_cache(maxsize=None)
def _topology(name):
    catalog = _catalog()
    return generate(design_from_data(spec_data(**ALL[name]), catalog), catalog)


def _random_case(topology, rng, links, nic_links, switches):
    gpus = topology.gpus
    network = np.flatnonzero(topology.link_tier[0::2] != LINK_TIER["host"])
    ports = np.flatnonzero(topology.link_tier[0::2] == LINK_TIER["leaf"])
    failed = np.concatenate([rng.choice(network, links, replace=False), rng.choice(ports, nic_links, replace=False)])
    nodes = rng.choice(topology.nodes_of("switch"), switches, replace=False)
    groups = (gpus.size // 4) * 4
    demand = Demand(gpus, rng.permutation(gpus), rng.uniform(1, 2, gpus.size) * 1e6,
                    a2a_members=rng.permutation(gpus)[:groups].reshape(-1, 4), a2a_bytes=3e5)
    return demand, arc_mask(link_down_mask(topology, failed, nodes))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(ALL)), seed=st.integers(0, 2**31), links=st.integers(0, 4),
       nic_links=st.integers(0, 4), switches=st.integers(0, 2))
def test_equals_generic_ecmp_under_random_failures(name, seed, links, nic_links, switches):
    topology = _topology(name)
    demand, mask = _random_case(topology, np.random.default_rng(seed), links, nic_links, switches)
    oracle = ecmp.route(_hidden_structure(topology), demand, mask)
    fast = degraded.route(topology, demand, mask)
    np.testing.assert_allclose(fast.load, oracle.load, rtol=1e-9, atol=1e-6 * oracle.load.max(initial=1.0))
    assert (fast.unreachable_pairs, fast.unreachable_bytes) == pytest.approx(
        (oracle.unreachable_pairs, oracle.unreachable_bytes))


def test_bridges_through_twin_port_nics_are_routed_as_ecmp_routes_them():
    """A source that lost its plane-1 port sending to a destination that lost its plane-0 port: the only
    path crosses planes through another host's NIC, which ``ecmp`` lets relay."""
    topology = _topology("twin-plane")
    nic_links = np.flatnonzero(topology.link_tier[0::2] == LINK_TIER["leaf"])
    plane = topology.plane[np.maximum(topology.src[2 * nic_links], topology.dst[2 * nic_links])]
    gpus = topology.gpus
    src_gpu, dst_gpu = gpus[0], gpus[-1]

    def port(gpu, in_plane):
        nic = topology.dst[(topology.src == gpu) & (topology.kind[topology.dst] == KIND["nic"])][0]
        ends = (topology.src[2 * nic_links] == nic) | (topology.dst[2 * nic_links] == nic)
        return nic_links[ends & (plane == in_plane)][0]

    mask = arc_mask(link_down_mask(topology, [port(src_gpu, 1), port(dst_gpu, 0)]))
    demand = Demand([src_gpu], [dst_gpu], 1e6)
    oracle = ecmp.route(_hidden_structure(topology), demand, mask)
    fast = degraded.route(topology, demand, mask)
    assert oracle.unreachable_pairs == 0 and fast.unreachable_pairs == 0
    nic_relay = (topology.kind[topology.src] == KIND["nic"]) & (topology.kind[topology.dst] == KIND["switch"])
    assert oracle.load[nic_relay].sum() > 1e6  # more NIC uplinks carry it than the source's own
    np.testing.assert_allclose(fast.load, oracle.load, rtol=1e-9, atol=1e-3)


def test_stands_in_for_ecmp_under_failures_and_refuses_host_link_failures():
    topology = _topology("fat-tree-2tier-dgx")
    spine = topology.nodes_of("switch")[topology.tier[topology.nodes_of("switch")] == 1][0]
    mask = arc_mask(link_down_mask(topology, [], [spine]))
    assert select_engine(topology, RouteRequest("ecmp", arc_mask=mask)).name == "clos-failed"
    assert select_engine(topology, RouteRequest("ecmp")).name == "clos"
    host = np.flatnonzero(topology.link_tier[0::2] == LINK_TIER["host"])[0]
    inside = arc_mask(link_down_mask(topology, [host]))
    assert "inside a server" in degraded.refusal(topology, inside).reason
    assert select_engine(topology, RouteRequest("ecmp", arc_mask=inside)).name == "ecmp"
    with pytest.raises(EngineRefused):
        degraded.route(topology, Demand([0], [1], 1.0), inside)


def test_one_of_s_spines_down_on_a_two_tier_fat_tree_matches_the_closed_form():
    """Non-blocking two-tier fat-tree, one GPU per server: 4 leaves of 24 GPUs, S = 2 spines with 12 links
    from each leaf. A permutation sending every GPU to a GPU of another leaf puts 24 flows on each leaf's
    uplinks: healthy 24 / (2 * 12) = 1 flow per link, one spine down 24 / 12 = 2, so the phase takes
    S / (S - 1) = 2x as long."""
    topology = _topology("fat-tree-2tier")
    switches = topology.nodes_of("switch")
    spines = switches[topology.tier[switches] == 1]
    s = spines.size
    mask = arc_mask(link_down_mask(topology, [], [spines[0]]))
    gpus = topology.gpus
    shifted = np.roll(gpus, 24)  # every GPU to the GPU one leaf over
    size = 1e9
    per_arc = topology.capacity_gbps * 1e9 / 8

    def phase(demand, mask=None):
        return float((route(topology, demand, "ecmp", arc_mask=mask).load / per_arc).max())

    ring = Demand(gpus, shifted, size)
    spine_link = np.flatnonzero(topology.link_tier == LINK_TIER["spine"])[0]
    link_seconds = size / per_arc[spine_link]
    assert phase(ring) == pytest.approx(link_seconds)
    assert phase(ring, mask) == pytest.approx(link_seconds * s / (s - 1))
    # all-to-all over all 96 GPUs: healthy, each NIC link carries its GPU's 95 flows and binds (the 24
    # uplinks of a leaf carry 72 x 24 / 24 = 72 each); with S - 1 spines they carry 72 x 24 / 12 = 144
    a2a = Demand(a2a_members=gpus[None, :], a2a_bytes=size)
    uplinks = topology.links_by_tier()["spine"] // 4
    assert uplinks == 24
    assert phase(a2a) == pytest.approx((gpus.size - 1) * link_seconds)
    assert phase(a2a, mask) == pytest.approx(72 * 24 / (uplinks * (s - 1) / s) * link_seconds)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(ALL)), seed=st.integers(0, 2**31), links=st.integers(1, 3),
       switches=st.integers(0, 1))
def test_flows_clear_of_the_failure_keep_their_healthy_spread(name, seed, links, switches):
    """The flows ``clos-failed`` leaves to the healthy closed form are routed by ECMP under the failure
    exactly as on the healthy fabric: their ECMP paths do not change."""
    from topoplan.flow import clos
    topology = _topology(name)
    demand, mask = _random_case(topology, np.random.default_rng(seed), links, 0, switches)
    ix = clos.index_of(topology)
    src, dst, size = demand.pairs()
    clear = ~degraded._FailedArcs(topology, ix, mask).crossed_by(ix.nic_of_gpu[src], ix.nic_of_gpu[dst])
    subset = Demand(src[clear], dst[clear], size[clear])
    healthy = clos.route(topology, subset)
    under_failure = ecmp.route(_hidden_structure(topology), subset, mask)
    np.testing.assert_allclose(healthy.load, under_failure.load, rtol=1e-9,
                               atol=1e-6 * under_failure.load.max(initial=1.0))
    assert not healthy.load[~mask].any()


def test_a_failed_leaf_uplink_leaves_most_flows_to_the_closed_form():
    from topoplan.flow import clos
    topology = _topology("twin-plane")
    ix = clos.index_of(topology)
    uplink = ix.arcs_of[clos.LEAF_UP][0]
    mask = np.ones(topology.num_arcs, dtype=bool)
    mask[uplink] = False
    gpus = topology.gpus
    nic_a, nic_b = np.meshgrid(ix.nic_of_gpu[gpus], ix.nic_of_gpu[gpus], indexing="ij")
    failed = degraded._FailedArcs(topology, ix, mask)
    hit = failed.crossed_by(nic_a.ravel(), nic_b.ravel())
    leaf = topology.src[uplink]
    plane = topology.plane[leaf]
    expected = (ix.leaf_of_nic[plane, nic_a.ravel()] == leaf) & (ix.leaf_of_nic[plane, nic_b.ravel()] != leaf)
    np.testing.assert_array_equal(hit, expected)
    assert 0 < hit.mean() < 0.5
    # an all-to-all group is expanded into pairs when a member is near the failure: every hit pair has one
    assert (failed.near(nic_a.ravel()) | failed.near(nic_b.ravel()))[hit].all()
