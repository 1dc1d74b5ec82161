"""The Clos generator held to its closed forms, to published tables, and to networkx as an oracle."""

from __future__ import annotations

import re

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topoplan.errors import InfeasibleDesign
from topoplan.generators import generate
from topoplan.generators.clos import plan_clos, split_ports
from topoplan.topology import KIND, LINK_TIER


# --- closed forms of the sizing ---------------------------------------------------------------------

@given(half=st.integers(min_value=2, max_value=64))
def test_k_ary_fat_tree_closed_forms(half):
    """Al-Fares: k^3/4 hosts on 5k^2/4 switches, k pods of k/2 edge + k/2 aggregation, (k/2)^2 core."""
    k = 2 * half
    plan = plan_clos(k**3 // 4, (k, k, k), (1, 1), None)
    assert plan.tiers == 3
    assert plan.max_endpoints == k**3 // 4
    assert (plan.leaves, plan.spines, plan.cores) == (k * k // 2, k * k // 2, k * k // 4)
    assert plan.switches == 5 * k * k // 4
    assert plan.pods == k


@given(half=st.integers(min_value=2, max_value=128), tiers=st.integers(min_value=1, max_value=3))
def test_folded_clos_full_build(half, tiers):
    """Non-blocking folded Clos of radix R and t tiers: 2(R/2)^t hosts on (2t-1)(R/2)^(t-1) switches."""
    radix = 2 * half
    hosts = 2 * half**tiers
    plan = plan_clos(hosts, (radix,) * 3, (1, 1), tiers)
    assert plan.max_endpoints == hosts
    assert plan.switches == (2 * tiers - 1) * half ** (tiers - 1)
    with pytest.raises(ValueError):
        plan_clos(hosts + 1, (radix,) * 3, (1, 1), tiers)


@pytest.mark.parametrize("radix,two,three", [(64, 2048, 65536), (128, 8192, 524288), (144, 10368, 746496),
                                             (48, 1152, 27648)])
def test_published_maximum_sizes(radix, two, three):
    """topologies.md B2/1.3: 2,048 (Quantum-2 two-tier), 10,368 (Q3400 two-tier), 524,288 (k=128)."""
    assert plan_clos(two, (radix,) * 3, (1, 1), 2).max_endpoints == two
    assert plan_clos(three, (radix,) * 3, (1, 1), 3).max_endpoints == three


@pytest.mark.parametrize("units,spines", [(1, 4), (2, 8), (3, 16), (4, 16)])
def test_superpod_spine_divisor_rule(units, spines):
    """NVIDIA DGX SuperPOD H100 compute fabric: 8 leaves per SU; 4, 8, 16, 16 spines for 1-4 SU
    (the 3-SU row has 16, not 12: every leaf keeps a whole number of links to every spine)."""
    plan = plan_clos(256 * units, (64, 64, 64), (1, 1), 2)
    assert plan.leaves == 8 * units
    assert plan.spines == spines
    assert plan.leaf_spine_links * plan.spines == 32
    assert plan.leaves * 32 == 256 * units  # leaf-spine cables: 8 leaves x 32 uplinks per SU


@pytest.mark.parametrize("pods", [1, 2, 4, 8, 16, 32, 64])
def test_partial_three_tier_build(pods):
    """Partial build of N endpoints: N/(R/2) leaves, N/(R/2) spines and N/R cores (each core takes R/pods
    links from every pod: the fewest that carry the pods' uplinks)."""
    radix, half = 64, 32
    n = pods * half * half
    plan = plan_clos(n, (radix,) * 3, (1, 1), 3)
    assert plan.leaves == n // half
    assert plan.spines == n // half
    assert plan.cores == n // radix


@pytest.mark.parametrize("ratio,down,up", [(1, 32, 32), (3, 48, 16), (7, 56, 8), (1.5, 38, 26)])
def test_oversubscribed_split(ratio, down, up):
    assert split_ports(64, ratio) == (down, up)
    assert down / up <= ratio + 1e-12


# --- the generated topology -----------------------------------------------------------------------

def _switch_counts(topology):
    return topology.switches_by_tier()


@pytest.mark.parametrize("gpus,tiers", [(64, None), (512, None), (1024, None), (4096, 3)])
def test_generated_counts_follow_plan(make_design, catalog, gpus, tiers):
    design = make_design(cluster={"gpus": gpus}, fabric={"tiers": tiers})
    topology = generate(design, catalog)
    assert topology.check() == []
    plan = topology.layout.tree.plan
    counts = _switch_counts(topology)
    assert counts.get("leaf") == plan.leaves
    assert counts.get("spine", 0) == plan.spines
    assert counts.get("core", 0) == plan.cores
    links = topology.links_by_tier()
    assert links["leaf"] == gpus  # one 400G NIC per GPU on DGX H100
    for tier in ("spine", "core")[: plan.tiers - 1]:
        assert links[tier] == plan.leaves * plan.up[0] if tier == "spine" else plan.spines * plan.up[1]
    # no switch uses more logical ports than it has
    degree = np.bincount(topology.src, minlength=topology.num_nodes)
    switches = topology.kind == KIND["switch"]
    assert degree[switches].max() <= 64


def test_every_leaf_has_equal_parallel_links_to_every_spine(make_design, catalog):
    design = make_design(cluster={"gpus": 768}, fabric={"tiers": 2})  # 3 SU-like: 24 leaves
    topology = generate(design, catalog)
    arcs = np.flatnonzero(topology.link_tier == LINK_TIER["spine"])
    up = arcs[topology.tier[topology.src[arcs]] == 0]
    pairs, counts = np.unique(np.stack([topology.src[up], topology.dst[up]]), axis=1, return_counts=True)
    leaves = np.unique(pairs[0])
    spines = np.unique(pairs[1])
    assert pairs.shape[1] == leaves.size * spines.size  # every leaf reaches every spine
    assert set(counts.tolist()) == {32 // spines.size}


def _gpu_graph(topology):
    """Undirected simple graph for hop counting, with host links contracted (they are not network hops)."""
    graph = nx.Graph()
    host = topology.link_tier == LINK_TIER["host"]
    for a, b, h in zip(topology.src[0::2], topology.dst[0::2], host[0::2]):
        graph.add_edge(int(a), int(b), weight=0 if h else 1)
    return graph


@pytest.mark.parametrize("gpus,tiers,expected", [(16, None, 2), (256, None, 4), (2048, 3, 6)])
def test_diameter_matches_networkx(make_design, catalog, gpus, tiers, expected):
    design = make_design(cluster={"server": "generic-1gpu", "gpus": gpus},
                         fabric={"tiers": tiers, "switch": "generic-48x400g" if gpus <= 16 else "nvidia-qm9700"})
    topology = generate(design, catalog)
    assert topology.layout.diameter_hops == expected
    graph = _gpu_graph(topology)
    gpus_ids = topology.gpus
    # eccentricity of a few GPUs over weighted (network-link) hops; the fabric is symmetric per leaf
    worst = 0
    for source in gpus_ids[:: max(1, gpus_ids.size // 8)]:
        lengths = nx.single_source_dijkstra_path_length(graph, int(source))
        worst = max(worst, max(lengths[int(g)] for g in gpus_ids))
    assert worst == expected


@pytest.mark.parametrize("topology", ["fat-tree", "rail-optimized"])
def test_a_third_tier_over_one_pod_is_refused(make_design, catalog, topology):
    """512 GPUs fill 16 leaves of one pod: a core would carry nothing, so tiers: 3 is refused, not priced."""
    server = {"server": "generic-1gpu", "gpus": 512} if topology == "fat-tree" else {"gpus": 512}
    design = make_design(cluster=server, fabric={"topology": topology, "tiers": 3})
    with pytest.raises(InfeasibleDesign, match=r"fabric.tiers: .* one pod, so the \d+ core switches of a third "
                                               r"tier would carry no traffic \(hint: remove tiers"):
        generate(design, catalog)
    assert generate(make_design(cluster=server, fabric={"topology": topology, "tiers": 2}), catalog).layout.tiers == 2


@pytest.mark.parametrize("ratio,tiers,gpus", [(1, 2, 512), (3, 2, 8 * 48), (1, 3, 2048), (7, 2, 8 * 56),
                                              (3, 3, 4 * 32 * 48)])
def test_bisection_matches_max_flow_between_halves(make_design, catalog, ratio, tiers, gpus):
    """The analytic bisection equals networkx's max flow between the first and second half of the GPUs
    (halves of whole leaves and pods, where the min balanced cut is the leaf or spine uplinks)."""
    design = make_design(cluster={"server": "generic-1gpu", "gpus": gpus},
                         fabric={"tiers": tiers, "oversubscription": ratio})
    topology = generate(design, catalog)
    graph = nx.DiGraph()
    for a, b, cap in zip(topology.src, topology.dst, topology.capacity_gbps):
        if graph.has_edge(int(a), int(b)):
            graph[int(a)][int(b)]["capacity"] += float(cap)
        else:
            graph.add_edge(int(a), int(b), capacity=float(cap))
    gpus = topology.gpus
    half = gpus.size // 2
    for g in gpus[:half]:
        graph.add_edge("s", int(g), capacity=1e12)
    for g in gpus[half:]:
        graph.add_edge(int(g), "t", capacity=1e12)
    flow = nx.maximum_flow_value(graph, "s", "t")
    assert flow == pytest.approx(topology.layout.bisection_gbps, rel=1e-9)
    assert topology.layout.bisection_gbps == pytest.approx(gpus.size * 400 / 2 / ratio, rel=0.05)


def test_two_tier_64_port_tops_out_at_2048(make_design, catalog):
    assert generate(make_design(cluster={"gpus": 2048}, fabric={"tiers": 2}), catalog).layout.tiers == 2
    with pytest.raises(InfeasibleDesign) as err:
        generate(make_design(cluster={"gpus": 2056}, fabric={"tiers": 2}), catalog)
    assert "tops out at 2,048" in err.value.reason


def test_fewest_tiers_that_fit(make_design, catalog):
    assert generate(make_design(cluster={"gpus": 64}), catalog).layout.tiers == 1
    assert generate(make_design(cluster={"gpus": 2048}), catalog).layout.tiers == 2
    assert generate(make_design(cluster={"gpus": 2056}), catalog).layout.tiers == 3


def test_breakout_doubles_the_radix(make_design, catalog):
    """A 64x800G Tomahawk-5 box runs 128x400G ports for 400G NICs: two tiers reach 8,192 GPUs."""
    design = make_design(cluster={"gpus": 8192}, fabric={"switch": "broadcom-th5-64x800g"})
    topology = generate(design, catalog)
    assert topology.layout.tiers == 2
    assert topology.layout.tree.plan.radix[0] == 128


def test_planes_build_independent_fabrics(make_design, catalog):
    design = make_design(cluster={"server": "hgx-b300", "gpus": 2048}, fabric={"planes": 2})
    topology = generate(design, catalog)
    plan = topology.layout.tree.plan
    assert plan.endpoints == 2048 and plan.tiers == 2
    switches = topology.kind == KIND["switch"]
    assert np.bincount(topology.plane[switches]).tolist() == [plan.leaves + plan.spines] * 2
    # no link joins two planes
    network = topology.link_tier != LINK_TIER["host"]
    both = (topology.kind[topology.src] == KIND["switch"]) & (topology.kind[topology.dst] == KIND["switch"]) & network
    assert (topology.plane[topology.src[both]] == topology.plane[topology.dst[both]]).all()
    assert topology.layout.injection_gbps_per_gpu == 800


def test_to_networkx_matches_arrays(make_design, catalog):
    topology = generate(make_design(cluster={"gpus": 256}), catalog)
    graph = topology.to_networkx()
    assert graph.number_of_nodes() == topology.num_nodes
    assert graph.number_of_edges() == topology.num_arcs
    assert sum(1 for _, d in graph.nodes(data=True) if d["kind"] == "gpu") == 256
    assert nx.is_strongly_connected(graph)


@settings(max_examples=25, deadline=None)
@given(servers=st.integers(min_value=1, max_value=300), ratio=st.sampled_from([1, 2, 3]),
       tiers=st.sampled_from([None, 3]))
def test_partial_builds_are_well_formed(catalog, servers, ratio, tiers):
    """Any server count builds a fabric whose arcs pair up and whose switches keep within their ports."""
    from topoplan.spec import design_from_data
    from conftest import spec_data

    design = design_from_data(spec_data(cluster={"gpus": None, "servers": servers},
                                        fabric={"oversubscription": ratio, "tiers": tiers}), catalog)
    try:
        topology = generate(design, catalog)
    except InfeasibleDesign as err:
        # only oversubscription rules, or a third tier over a single pod, can refuse small builds
        assert ratio != 1 or (tiers == 3 and "would carry no traffic" in str(err))
        return
    assert topology.check() == []
    degree = np.bincount(topology.src, minlength=topology.num_nodes)
    assert degree[topology.kind == KIND["switch"]].max() <= 64
    assert topology.links_by_tier()["leaf"] == servers * 8


@pytest.mark.slow
def test_131k_twin_plane_counts(in_root, catalog):
    """Per plane N = 131,072 ports on R = 128: N/(R/2) leaves, N/(R/2) spines, N/R cores; 3N links."""
    from topoplan.spec import load_design

    design = load_design("designs/fat-tree-131k-twin-plane.yaml", catalog)
    topology = generate(design, catalog)
    n, half = 131072, 64
    assert topology.switches_by_tier() == {"leaf": 2 * n // half, "spine": 2 * n // half, "core": 2 * n // 128}
    assert topology.links_by_tier() == {"leaf": 2 * n, "spine": 2 * n, "core": 2 * n}
    assert topology.check() == []


# --- exact tier sizing (issue 14, item 1) ------------------------------------------------------------

def _links_between(topology, lower_unit: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """(units, upper switches) matrix: links from each lower unit to each switch of ``upper``."""
    column = np.full(topology.num_nodes, -1)
    column[upper] = np.arange(upper.size)
    up = (lower_unit[topology.src] >= 0) & (column[topology.dst] >= 0)
    counts = np.zeros((lower_unit.max() + 1, upper.size), dtype=np.int64)
    np.add.at(counts, (lower_unit[topology.src[up]], column[topology.dst[up]]), 1)
    return counts


@settings(max_examples=60, deadline=None)
@given(switch=st.sampled_from(["generic-48x400g", "nvidia-qm8700", "nvidia-qm9700"]),
       gpus=st.integers(min_value=2, max_value=6000), tiers=st.sampled_from([2, 3]),
       leaf_ratio=st.sampled_from([1, 1.5, 3, 5.86]), spine_ratio=st.sampled_from([1, 2, 4, 5.86]))
def test_every_tier_is_the_fewest_switches_that_carry_its_links(catalog, switch, gpus, tiers, leaf_ratio, spine_ratio):
    """On random builds: no switch has more links than ports; every spine (core) takes the same number of
    links from every leaf (pod), so ECMP balances; and one switch fewer in any tier could not carry the
    links that way (for leaves: could not hold the NIC ports)."""
    from conftest import spec_data
    from topoplan.spec import design_from_data

    over = {"leaf": leaf_ratio, "spine": spine_ratio if tiers == 3 else 1}
    data = spec_data(cluster={"server": "generic-1gpu", "gpus": gpus},
                     fabric={"switch": switch, "tiers": tiers, "oversubscription": over})
    try:
        topology = generate(design_from_data(data, catalog), catalog)
    except InfeasibleDesign:
        return
    plan = topology.layout.tree.plan
    radix = plan.radix
    switches = topology.kind == KIND["switch"]
    degree = np.bincount(topology.src, minlength=topology.num_nodes)
    for tier in range(plan.tiers):
        assert degree[switches & (topology.tier == tier)].max() <= radix[tier]
    assert (plan.leaves - 1) * plan.down[0] < plan.endpoints <= plan.leaves * plan.down[0]

    leaves = np.flatnonzero(switches & (topology.tier == 0))
    spines = np.flatnonzero(switches & (topology.tier == 1))
    unit = np.full(topology.num_nodes, -1)
    if plan.tiers == 2:
        unit[leaves] = np.arange(leaves.size)
        per_unit = _links_between(topology, unit, spines)
        cap = radix[1] // plan.leaves
        assert (per_unit == per_unit[:1]).all()               # the same from every leaf
        assert per_unit.max() <= cap and per_unit.sum(axis=1).tolist() == [plan.up[0]] * plan.leaves
        assert (plan.spines - 1) * cap < plan.up[0]           # one spine fewer cannot take a leaf's uplinks
        return
    cores = np.flatnonzero(switches & (topology.tier == 2))
    unit[spines] = topology.pod[spines]
    per_pod = _links_between(topology, unit, cores)
    cap = radix[2] // plan.pods
    assert (per_pod == per_pod[:1]).all() and per_pod.max() <= cap
    assert (plan.cores - 1) * cap < plan.spines_per_pod * plan.up[1]


def test_the_oversubscribed_core_of_the_issue_builds_the_cores_its_links_need(catalog):
    """8,192 B200 GPUs on QM9700, three tiers, spines at 4:1: 13 uplinks per spine (a prime) built 416
    cores for 2,496 spine-core links under the divisor rule. Six pods, so a core takes at most
    floor(64 / 6) = 10 links from each: ceil(2,496 / 6 / 10) = 42 cores."""
    from conftest import spec_data
    from topoplan.spec import design_from_data

    data = spec_data(cluster={"server": "dgx-b200", "gpus": 8192},
                     fabric={"switch": "nvidia-qm9700", "tiers": 3, "oversubscription": {"spine": 4}})
    topology = generate(design_from_data(data, catalog), catalog)
    plan = topology.layout.tree.plan
    assert (plan.pods, plan.spines, plan.up[1]) == (6, 192, 13)
    assert plan.spines * plan.up[1] == 2496 and plan.cores == 42
    core_links = int((topology.link_tier == LINK_TIER["core"]).sum()) // 2
    assert core_links == 2496


# --- pod size (issue 14, item 2) -----------------------------------------------------------------------

@pytest.mark.parametrize("topology", ["fat-tree", "rail-optimized"])
def test_pods_of_a_given_size_and_their_cross_pod_cut(make_design, catalog, topology):
    """512 DGX H100 at 15:1 from spine to core, pods of 128 servers: 4 pods of 32 leaves per plane; a spine
    uses 32 of its 60 down ports, so it gets ceil(4 x 32 / 60) = 3 uplinks, not 4; the bisection is the
    cross-pod cut (half the spines' uplinks), far below the pods' own; diameter 6."""
    from topoplan.flow.bisection import bisection

    design = make_design(cluster={"gpus": None, "servers": 512},
                         fabric={"topology": topology, "tiers": 3, "oversubscription": {"spine": 15},
                                 "pod": {"servers": 128}})
    topology_ = generate(design, catalog)
    plan = topology_.layout.tree.plan
    assert (plan.pods, plan.leaves_per_pod, plan.spines_per_pod, plan.up[1]) == (4, 32, 32, 3)
    assert np.bincount(topology_.pod[topology_.tier == 0]).tolist() == [32, 32, 32, 32]
    assert topology_.layout.bisection_gbps == plan.spines * plan.up[1] * 400 / 2
    assert topology_.layout.diameter_hops == 6
    assert bisection(topology_).gbps == topology_.layout.bisection_gbps
    natural = generate(make_design(cluster={"gpus": None, "servers": 512},
                                   fabric={"topology": topology, "tiers": 3, "oversubscription": {"spine": 15}}),
                       catalog).layout.tree.plan
    assert natural.pods < plan.pods          # without pod: as large as the 30 down ports of a spine allow


@pytest.mark.parametrize("fabric,path,message", [
    ({"pod": {"servers": 98}}, "fabric.pod.servers", "does not fill whole leaves of 32 ports"),
    ({"pod": {"servers": 256}}, "fabric.pod.servers", "needs spines with 64 ports down; they have 32"),
    ({"pod": {"servers": 64}, "tiers": 2}, "fabric.tiers", "need a core tier above them"),
    ({"pod": {"servers": 2048}}, "fabric.pod.servers", "does not fit two tiers"),
    ({"topology": "rail-optimized", "pod": {"servers": 48}}, "fabric.pod.servers", "not a whole number of scalable"),
    ({"topology": "rail-only", "pod": {"servers": 64}}, "fabric.pod", "apply to fat-tree and rail-optimized"),
])
def test_pods_that_cannot_be_built_are_refused_with_a_hint(make_design, catalog, fabric, path, message):
    from topoplan.errors import TopoplanError

    with pytest.raises(TopoplanError, match=f"{path}: .*{message}.*hint: "):
        generate(make_design(cluster={"gpus": None, "servers": 512}, fabric=fabric), catalog)


# --- per-tier link speed (issue 14, item 3) ----------------------------------------------------------

def test_faster_uplinks_take_lanes_of_the_switch_below(make_design, catalog):
    """1,024 DGX H100 GPUs (400G NICs) on 51.2T switches: with 800G uplinks a leaf keeps 64 x 400G down and
    has 32 x 800G up (25.6 Tb/s each way), half the leaf-spine links of the all-400G build and the same
    bisection; every link of a tier runs at its speed."""
    from topoplan.topology import LINK_TIER

    base = {"switch": "broadcom-th5-64x800g"}
    slow = generate(make_design(cluster={"gpus": 1024}, fabric=base), catalog)
    fast = generate(make_design(cluster={"gpus": 1024}, fabric={**base, "link_gbps": {"spine": 800}}), catalog)
    plan = fast.layout.tree.plan
    assert (plan.down[0], plan.up[0]) == (64, 32) and plan.radix[1] == 64
    assert fast.links_by_tier()["spine"] * 2 == slow.links_by_tier()["spine"]
    assert fast.layout.bisection_gbps == slow.layout.bisection_gbps
    for tier, speed in (("leaf", 400.0), ("spine", 800.0)):
        assert set(fast.capacity_gbps[fast.link_tier == LINK_TIER[tier]].tolist()) == {speed}


@pytest.mark.parametrize("link_gbps,message", [
    ({"spine": 600}, "600 Gb/s is not a whole multiple of the 400 Gb/s links below it"),
    ({"spine": 800}, "the leaf switch nvidia-qm9700 has no 800 Gb/s ports"),
    ({"core": 200}, "200 Gb/s is not a whole multiple of the 400 Gb/s links below it"),
])
def test_link_speeds_a_switch_cannot_run_are_refused(make_design, catalog, link_gbps, message):
    design = make_design(cluster={"gpus": 4096}, fabric={"tiers": 3, "link_gbps": link_gbps})
    with pytest.raises(InfeasibleDesign, match=re.escape(message) + r".*\(hint: "):
        generate(design, catalog)


def test_meta_like_cluster_has_metas_racks_and_pods(in_root, catalog):
    """designs/meta-like-24k.yaml: 1,536 rack ToRs of 16 GPUs (16 down, 32 up) in 8 pods of 192 racks, as
    Meta's 24k clusters; a spine uses 192 of its 224 down ports, so at 7:1 it has ceil(192 / 7) = 28
    uplinks, not 32; the cross-pod cut is the pods' spine uplinks: 8 x 32 spines x 28 x 400G / 2."""
    from topoplan.spec import load_design

    topology = generate(load_design("designs/meta-like-24k.yaml", catalog), catalog)
    plan = topology.layout.tree.plan
    assert (plan.leaves, plan.pods, plan.leaves_per_pod) == (1536, 8, 192)
    assert (plan.down[0], plan.up[0]) == (16, 32)
    assert plan.spines_per_pod == 32 and plan.up[1] == 28
    assert topology.layout.bisection_gbps == 8 * 32 * 28 * 400 / 2
    assert topology.layout.diameter_hops == 6
