"""Rail-optimized, rail-only and RailX generators against published counts, graph theory and networkx."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest

from topoplan.flow import clos, ecmp
from topoplan.flow.traffic import Demand, apply_pxn
from topoplan.generators import generate
from topoplan.generators.railx import ring_decomposition
from topoplan.spec import load_design
from topoplan.topology import KIND, LINK_TIER


def _rail(make_design, catalog, gpus=None, servers=None, **fabric):
    cluster = {"gpus": gpus} if gpus else {"gpus": None, "servers": servers}
    design = make_design(cluster=cluster, fabric={"topology": "rail-optimized", **fabric})
    return design, generate(design, catalog)


# --- rail-optimized: vendor reference architectures ------------------------------------------------

@pytest.mark.parametrize("units,leaves,spines", [(1, 8, 4), (2, 16, 8), (3, 24, 16), (4, 32, 16)])
def test_superpod_h100_table_4(make_design, catalog, units, leaves, spines):
    """DGX SuperPOD H100 RA Table 4: 32*SU - 1 nodes; 8 leaves per SU, 4/8/16/16 spines, 256 leaf-spine
    cables per SU (the fabric is built for full SUs), 8 compute links per node."""
    nodes = 32 * units - 1
    _, topology = _rail(make_design, catalog, servers=nodes, scalable_unit=32)
    assert topology.switches_by_tier() == {"leaf": leaves, "spine": spines}
    links = topology.links_by_tier()
    assert links["spine"] == 256 * units
    assert links["leaf"] == 8 * nodes
    # one rail per leaf: every NIC on a leaf has the leaf's rail index
    arcs = np.flatnonzero(topology.link_tier == LINK_TIER["leaf"])
    up = arcs[topology.kind[topology.src[arcs]] == KIND["nic"]]
    assert (topology.rail[topology.src[up]] == topology.rail[topology.dst[up]]).all()


def test_hpn_like_pod(in_root, catalog):
    """HPN: 16 ToRs per 1,024-GPU segment (8 rails x 2 planes); 60 aggregation switches per plane and
    15 segments per 15,360-GPU pod; 360 switches in all."""
    topology = generate(load_design("designs/hpn-pod-15k.yaml", catalog), catalog)
    assert topology.switches_by_tier() == {"leaf": 240, "spine": 120}
    spines = (topology.kind == KIND["switch"]) & (topology.tier == 1)
    assert np.bincount(topology.plane[spines]).tolist() == [60, 60]
    leaves = (topology.kind == KIND["switch"]) & (topology.tier == 0)
    assert leaves.sum() / 15 == 16
    # every ToR reaches every aggregation switch of its plane over one 400G link (60 x 400G up), and keeps
    # 136 ports of 200G down: 128 hosts and HPN's 8 spares
    arcs = np.flatnonzero((topology.link_tier == LINK_TIER["spine"]) & (topology.tier[topology.src] == 0))
    pairs, counts = np.unique(np.stack([topology.src[arcs], topology.dst[arcs]]), axis=1, return_counts=True)
    assert pairs.shape[1] == 240 * 60 and set(counts.tolist()) == {1}
    assert set(topology.capacity_gbps[arcs].tolist()) == {400.0}
    plan = topology.layout.tree.plan
    assert (plan.down[0], plan.up[0]) == (136, 60) and plan.down[0] * 200 + plan.up[0] * 400 == 51_200


def test_hpn_like_two_pods_under_a_15_to_1_core(in_root, catalog):
    """Two HPN pods (designs/hpn-2pod-30k.yaml): each pod is the 15k pod above (120 ToRs and 60 aggregation
    switches per plane); 15:1 from aggregation to core makes the cross-pod bisection a fifteenth of what a
    GPU's ToR uplinks carry (400 Gb/s x 120/128), 25 Gb/s per GPU; a path between pods crosses six links.
    The core carries that cut: cores x ports >= the aggregation uplinks, and one core fewer could not.
    Every aggregation switch has HPN's 120 x 400G down and 8 x 400G up."""
    from topoplan.flow.bisection import bisection

    topology = generate(load_design("designs/hpn-2pod-30k.yaml", catalog), catalog)
    plan = topology.layout.tree.plan
    switches = topology.kind == KIND["switch"]
    leaves, spines = switches & (topology.tier == 0), switches & (topology.tier == 1)
    assert np.bincount(topology.pod[leaves]).tolist() == [2 * 120, 2 * 120]     # per pod, two planes
    assert np.bincount(topology.pod[spines]).tolist() == [2 * 60, 2 * 60]
    cut = bisection(topology)
    assert cut.gbps == topology.layout.bisection_gbps
    assert cut.gbps / (30720 / 2) == pytest.approx(400 * 120 / 128 / 15)
    assert topology.layout.diameter_hops == 6
    assert (plan.down[1], plan.up[1]) == (120, 8)
    uplinks = plan.pods * plan.spines_per_pod * plan.up[1]
    assert plan.cores * plan.radix[2] >= uplinks > (plan.cores - 1) * (plan.radix[2] // plan.pods) * plan.pods


def test_partial_scalable_unit_builds_the_full_unit(make_design, catalog):
    _, full = _rail(make_design, catalog, servers=64, scalable_unit=32)
    _, partial = _rail(make_design, catalog, servers=40, scalable_unit=32)
    assert partial.switches_by_tier() == full.switches_by_tier()
    assert partial.links_by_tier()["spine"] == full.links_by_tier()["spine"]


def test_same_rail_spines_serve_one_rail(make_design, catalog):
    _, topology = _rail(make_design, catalog, gpus=1024, scalable_unit=8, aggregation="same-rail")
    arcs = np.flatnonzero((topology.link_tier == LINK_TIER["spine"]) & (topology.tier[topology.src] == 0))
    rail_of_spine = {}
    for leaf, spine in zip(topology.src[arcs], topology.dst[arcs]):
        assert rail_of_spine.setdefault(int(spine), int(topology.rail[leaf])) == topology.rail[leaf]
    assert len(set(rail_of_spine.values())) == 8


def test_astral_three_tier_core_joins_rails(make_design, catalog):
    _, topology = _rail(make_design, catalog, gpus=1024, scalable_unit=8, aggregation="same-rail", tiers=3)
    assert set(topology.switches_by_tier()) == {"leaf", "spine", "core"}
    assert nx.is_strongly_connected(nx.DiGraph(zip(topology.src.tolist(), topology.dst.tolist())))


def test_rail_only_has_no_path_across_rails_but_pxn(make_design, catalog):
    design = make_design(cluster={"gpus": 1024}, fabric={"topology": "rail-only", "scalable_unit": 16})
    topology = generate(design, catalog)
    gpus = topology.gpus
    cross = Demand(gpus[:8], gpus[8 * 17 + 1: 8 * 18 + 1], 1.0)  # GPU i of server 0 -> GPU i+1 of server 17
    assert ecmp.route(topology, cross).unreachable_pairs == 8
    assert ecmp.route(topology, apply_pxn(topology, cross)).unreachable_pairs == 0
    assert topology.layout.diameter_hops == 4


@pytest.mark.parametrize("topology_name", ["rail-only", "rail-optimized"])
def test_pxn_of_whole_server_alltoall_groups_equals_listing_pairs(make_design, catalog, topology_name):
    """All-to-all groups of whole servers take PXN without listing pairs; the loads must be those of the
    pair-by-pair rewrite. Groups that split servers fall back to the pairs."""
    design = make_design(cluster={"gpus": 256}, fabric={"topology": topology_name, "scalable_unit": 8})
    topology = generate(design, catalog)
    gpus = topology.gpus
    for members in (gpus.reshape(1, -1), gpus.reshape(4, -1), gpus.reshape(16, -1)[:, ::-1].copy(),
                    gpus.reshape(-1, 8), gpus.reshape(8, 32).T.copy()):
        demand = Demand(a2a_members=members, a2a_bytes=3.0)
        aggregated = apply_pxn(topology, demand)
        listed = apply_pxn(topology, Demand(*demand.pairs()))
        assert aggregated.src.size < listed.src.size or not aggregated.has_a2a
        fast, slow = ecmp.route(topology, aggregated), ecmp.route(topology, listed)
        assert fast.unreachable_pairs == slow.unreachable_pairs == 0
        np.testing.assert_allclose(fast.load, slow.load, rtol=1e-12)


@pytest.mark.parametrize("sections", [
    {"cluster": {"gpus": 1024}, "fabric": {"topology": "rail-optimized"}},
    {"cluster": {"gpus": 1024}, "fabric": {"topology": "rail-optimized", "scalable_unit": 8, "aggregation": "same-rail",
                                          "tiers": 3}},
    {"cluster": {"gpus": 2048}, "fabric": {"topology": "rail-optimized", "scalable_unit": 16, "tiers": 3}},
    {"cluster": {"gpus": 1024}, "fabric": {"topology": "rail-only", "scalable_unit": 16}},
    {"cluster": {"server": "pcie-8gpu-l40s", "gpus": 512}, "fabric": {"topology": "rail-only", "scalable_unit": 16}},
    # rail-only of three tiers (cores per rail) and rail-optimized with pods of 2 SUs
    {"cluster": {"gpus": None, "servers": 26}, "fabric": {"topology": "rail-only", "switch": "generic-48x400g",
                                                         "tiers": 3, "scalable_unit": 1, "leaf_uplinks": 2}},
    {"cluster": {"gpus": 2048}, "fabric": {"topology": "rail-optimized", "scalable_unit": 16, "tiers": 3,
                                          "pod": {"servers": 32}}},
    # 72 rails (GB200 NVL72) on 64-port spines: rail groups of 24 share spines, the core joins the groups
    {"cluster": {"server": "gb200-nvl72", "gpus": None, "servers": 16},
     "fabric": {"topology": "rail-optimized", "scalable_unit": 8}},
    {"cluster": {"server": "hgx-b300", "gpus": 512}, "fabric": {"topology": "rail-optimized", "planes": 2,
                                                                "scalable_unit": 16}},
])
def test_clos_engine_equals_ecmp_on_rail_fabrics(make_design, catalog, sections):
    topology = generate(make_design(**sections), catalog)
    assert clos.refusal(topology) is None
    rng = np.random.default_rng(5)
    gpus = topology.gpus
    for demand in (Demand(gpus, rng.permutation(gpus), rng.uniform(1, 2, gpus.size)),
                   Demand(a2a_members=rng.permutation(gpus).reshape(-1, 16), a2a_bytes=3.0)):
        for routed in (demand, apply_pxn(topology, demand)):
            want, got = ecmp.route(topology, routed), clos.route(topology, routed)
            np.testing.assert_allclose(got.load, want.load, rtol=1e-9, atol=1e-9 * max(want.load.max(), 1))
            assert got.unreachable_pairs == want.unreachable_pairs


# --- RailX ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", list(range(2, 41)) + [64, 97, 112, 145])
def test_ring_decomposition_is_k_n(n):
    """Walecki: odd n -> (n-1)/2 Hamiltonian cycles; even n -> (n-2)/2 cycles and a perfect matching;
    together exactly the edges of K_n, each once."""
    rings = ring_decomposition(n)
    seen = set()
    for index, ring in enumerate(rings):
        last_is_matching = n % 2 == 0 and index == len(rings) - 1
        if last_is_matching:
            pairs = list(zip(ring[0::2], ring[1::2]))
            assert sorted(ring) == list(range(n))  # perfect matching
        else:
            assert sorted(ring) == list(range(n))  # Hamiltonian cycle
            pairs = list(zip(ring, ring[1:] + ring[:1]))
        for a, b in pairs:
            edge = frozenset((a, b))
            assert len(edge) == 2 and edge not in seen
            seen.add(edge)
    assert len(seen) == n * (n - 1) // 2
    assert len(rings) == math.ceil((n - 1) / 2)


def _railx(make_design, catalog, columns, rows, chips_gpus=8, **extra):
    design = make_design(cluster={"server": "railx-node-8", "gpus": columns * rows * chips_gpus},
                         fabric={"topology": "railx", "switch": None,
                                 "railx": {"columns": columns, "rows": rows, "ocs": "calient-s320", **extra}})
    return design, generate(design, catalog)


def _node_graph(topology):
    circuit = topology.link_tier == LINK_TIER["ocs"]
    graph = nx.Graph()
    graph.add_nodes_from(np.unique(topology.server[topology.gpus]).tolist())
    graph.add_edges_from(zip(topology.server[topology.src[circuit]].tolist(),
                             topology.server[topology.dst[circuit]].tolist()))
    return graph


@pytest.mark.parametrize("columns,rows", [(7, 5), (8, 6), (9, 9), (12, 3)])
def test_rows_and_columns_are_full_meshes(make_design, catalog, columns, rows):
    _, topology = _railx(make_design, catalog, columns, rows)
    graph = _node_graph(topology)
    for y in range(rows):
        row = [y * columns + x for x in range(columns)]
        assert all(graph.has_edge(a, b) for a, b in itertools.combinations(row, 2))
    for x in range(columns):
        column = [y * columns + x for y in range(rows)]
        assert all(graph.has_edge(a, b) for a, b in itertools.combinations(column, 2))
    assert nx.diameter(graph) == topology.layout.diameter_hops == 2
    # no circuit joins nodes outside one row or column
    assert all((a // columns == b // columns) or (a % columns == b % columns) for a, b in graph.edges)


@pytest.mark.parametrize("n", [5, 9, 13, 17])
def test_naive_ring_assignment_diameter_grows(make_design, catalog, n):
    _, walecki = _railx(make_design, catalog, n, 1, chips_gpus=8)
    _, naive = _railx(make_design, catalog, n, 1, chips_gpus=8, ring_assignment="naive")
    assert walecki.layout.diameter_hops == 1
    assert naive.layout.diameter_hops == nx.diameter(_node_graph(naive)) == n // 2


def test_too_few_rails_give_a_partial_mesh(make_design, catalog):
    _, topology = _railx(make_design, catalog, 15, 1, row_rails=3, column_rails=0)
    graph = _node_graph(topology)
    assert graph.number_of_edges() == 3 * 15  # three Hamiltonian cycles of K_15
    assert topology.layout.diameter_hops == nx.diameter(graph) > 1
    assert any("partial" in w for w in topology.layout.warnings)


def test_ocs_count_and_bom(make_design, catalog):
    design, topology = _railx(make_design, catalog, 9, 9)
    per_row_links = sum(len(r) for r in ring_decomposition(9)) * (72 // 4)  # 72 row rails over 4 rings
    ports = catalog.ocs["calient-s320"].ports
    expected_per_row = math.ceil(2 * per_row_links / ports)
    assert topology.layout.grid.ocs_per_row == expected_per_row
    assert topology.switches_by_tier()["ocs"] == 9 * expected_per_row + 9 * topology.layout.grid.ocs_per_column


def _circuits_first(topology):
    """Arc lengths for the oracle: a circuit between nodes outweighs any number of links inside nodes."""
    return np.where(topology.link_tier == LINK_TIER["ocs"], 1000.0, 1.0)


@pytest.mark.parametrize("columns,rows,rails", [(3, 3, (1, 1)), (5, 3, (2, 1)), (4, 3, (3, 2))])
def test_railx_ecmp_equals_networkx_with_relaying_chips(make_design, catalog, columns, rows, rails):
    from test_flow import _networkx_ecmp

    _, topology = _railx(make_design, catalog, columns, rows, row_rails=rails[0], column_rails=rails[1])
    rng = np.random.default_rng(2)
    chips = topology.gpus
    src, dst = rng.choice(chips, 40), rng.choice(chips, 40)
    keep = src != dst
    got = ecmp.route(topology, Demand(src[keep], dst[keep], 1.0)).load
    want = _networkx_ecmp(topology, src[keep], dst[keep], np.ones(keep.sum()), weight=_circuits_first(topology),
                          relaying=chips)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_railx_counts_circuits_before_local_hops(make_design, catalog):
    """Counting every hop alike would route chip 0 -> chip 0 of a node whose circuit sits on chip 1 over
    two chip-0 circuits (2 hops) instead of local, circuit, local (3 hops); RailX routing must not."""
    from test_flow import _networkx_ecmp

    _, topology = _railx(make_design, catalog, 5, 1, row_rails=2, column_rails=0)
    circuit = topology.link_tier == LINK_TIER["ocs"]
    chip0 = topology.rail[topology.src] == 0
    # a pair of nodes whose only circuit is on chip 1
    arc = np.flatnonzero(circuit & ~chip0)[0]
    a, b = topology.server[topology.src[arc]], topology.server[topology.dst[arc]]
    src = topology.gpus[(topology.server[topology.gpus] == a) & (topology.rail[topology.gpus] == 0)]
    dst = topology.gpus[(topology.server[topology.gpus] == b) & (topology.rail[topology.gpus] == 0)]
    got = ecmp.route(topology, Demand(src, dst, 1.0)).load
    assert got[circuit].sum() == pytest.approx(1.0)  # exactly one circuit crossed
    hops = _networkx_ecmp(topology, src, dst, [1.0], relaying=topology.gpus)
    assert hops[circuit].sum() == pytest.approx(2.0)  # plain hop counting takes two


@pytest.mark.parametrize("columns,rows,rails", [(4, 4, (3, 3)), (4, 2, (3, 4)), (6, 2, (4, 5)), (4, 4, (2, 2))])
def test_railx_bisection_is_the_exact_minimum_on_small_grids(make_design, catalog, columns, rows, rails):
    """Uneven ring copies make the structural cuts miss the minimum; the Kernighan-Lin partition finds
    it. The oracle enumerates every balanced split of the nodes."""
    from topoplan.flow.bisection import bisection

    _, topology = _railx(make_design, catalog, columns, rows, row_rails=rails[0], column_rails=rails[1])
    nodes = columns * rows
    server_of = topology.server
    weight = np.zeros((nodes, nodes))
    np.add.at(weight, (server_of[topology.src], server_of[topology.dst]), topology.capacity_gbps)
    np.fill_diagonal(weight, 0)
    exact = min(weight[np.ix_(half, [x for x in range(nodes) if x not in half])].sum()
                for half in map(list, itertools.combinations(range(nodes), nodes // 2)) if 0 in half)
    found = bisection(topology)
    assert found.gbps == pytest.approx(exact)
    assert found.method.startswith("upper bound")


@pytest.mark.parametrize("tp", [3, 4, 7, 8])
def test_ring_inside_a_meshed_node_uses_the_hamiltonian_cycles_both_ways(make_design, catalog, tp):
    """A ring collective among chips of one RailX node runs as the edge-disjoint Hamiltonian cycles of K_tp in
    both directions (tp - 1 rings for odd tp, tp - 2 for even): every ring a Hamiltonian cycle of the group
    (networkx), no directed link carried by two rings, and each link's bytes the ring share over the rings."""
    from topoplan.flow import route
    from topoplan.flow.algorithms import RING_SHARE, ring_plan

    _, topology = _railx(make_design, catalog, 3, 3)
    members = np.arange(tp)[None, :]
    (phase,) = ring_plan(topology, members, "allgather", 1.0)
    rings = tp - 1 if tp % 2 else tp - 2
    assert phase.label == f"ring on {rings} channels"
    load = route(topology, phase.demand).load
    used = load > 0
    assert used.sum() == rings * tp                       # disjoint: tp arcs per ring, none shared
    assert np.allclose(load[used], RING_SHARE["allgather"](tp) / rings)
    assert set(topology.src[used]) <= set(members[0]) and set(topology.dst[used]) <= set(members[0])
    graph = nx.DiGraph(list(zip(topology.src[used].tolist(), topology.dst[used].tolist())))
    assert all(graph.out_degree(v) == rings and graph.in_degree(v) == rings for v in members[0])


def test_railx_grid_defaults_to_the_squarest(make_design, catalog):
    design = make_design(cluster={"server": "railx-node-8", "gpus": 8 * 96},
                         fabric={"topology": "railx", "switch": None, "railx": {"ocs": "calient-s320"}})
    grid = generate(design, catalog).layout.grid
    assert (grid.columns, grid.rows) == (12, 8)


def test_railx_100k_design(in_root, catalog):
    design = load_design("designs/railx-100k.yaml", catalog)
    topology = generate(design, catalog)
    assert design.gpus >= 100_000
    assert 2 <= topology.layout.diameter_hops <= 4
    assert topology.switches_by_tier()["ocs"] > 0


@pytest.mark.parametrize("gpus", [32768, 131072])
def test_rail_only_of_three_tiers_builds_past_a_two_tier_rail(make_design, catalog, gpus):
    """On 64-port switches a rail of more than 2,048 servers is a three-tier Clos of its own: N/32 leaves and
    spines and N/64 cores per plane (N NIC ports), every core serving one rail (no link joins two rails)."""
    from topoplan.generators.rail import plan_rail

    servers = gpus // 8
    plan, _su, _sus, _leaf_pod = plan_rail(servers, 8, (64, 64, 64), (1, 1), None, None, "rail-only", "any-to-any", 32)
    assert (plan.tiers, plan.core_islands) == (3, 8)
    assert (plan.leaves, plan.spines, plan.cores) == (gpus // 32, gpus // 32, gpus // 64)
    if gpus > 32768:
        return
    topology = generate(make_design(cluster={"server": "dgx-b200", "gpus": gpus},
                                    fabric={"topology": "rail-only", "switch": "nvidia-qm9700", "scalable_unit": 32}),
                        catalog)
    assert topology.switches_by_tier() == {"leaf": gpus // 32, "spine": gpus // 32, "core": gpus // 64}
    switch_arcs = (topology.kind[topology.src] == KIND["switch"]) & (topology.kind[topology.dst] == KIND["switch"])
    rail_of = topology.rail.copy()
    spines = (topology.kind == KIND["switch"]) & (topology.tier == 1)
    rail_of[spines] = topology.pod[spines] // (plan.pods // 8)       # a spine's rail: its pod's
    ends = rail_of[topology.src[switch_arcs]], rail_of[topology.dst[switch_arcs]]
    assert (ends[0] == ends[1]).all() and (ends[0] >= 0).all()
    assert topology.layout.diameter_hops == 6


@pytest.mark.parametrize("design,leaves,spines,leaf_ports", [
    # B300-XDR: 8 SUs x 8 rails; 72 down + 72 up on 144 x 800G; ceil(72 / floor(144 / 64)) = 36 spines
    ("superpod-b300-xdr-8su", 64, 36, (72, 72)),
    # GB200 NVL72: 4 SUs of 8 racks x 72 rails; a leaf's uplinks follow its 8 servers (8 up, not 280);
    # ceil(8 / floor(288 / 288)) = 8 spines
    ("gb200-nvl72-4su", 288, 8, (8, 8)),
])
def test_shipped_superpod_like_designs_match_their_closed_forms(in_root, catalog, design, leaves, spines, leaf_ports):
    topology = generate(load_design(f"designs/{design}.yaml", catalog), catalog)
    plan = topology.layout.tree.plan
    assert topology.switches_by_tier() == {"leaf": leaves, "spine": spines}
    su = plan.endpoints // topology.layout.tree.scalable_units // topology.layout.tree.rails
    assert su == leaf_ports[0] and plan.up[0] == leaf_ports[1]
    assert topology.links_by_tier() == {"leaf": plan.endpoints, "spine": leaves * plan.up[0]}
    switches = topology.kind == KIND["switch"]
    degree = np.bincount(topology.src, minlength=topology.num_nodes)
    assert degree[switches].max() <= plan.radix[0]


def test_more_rails_than_spine_ports_share_spines_in_rail_groups(make_design, catalog):
    """16 GB200 NVL72 racks (72 rails) in SUs of 8 on 64-port switches: a spine has 32 down ports, fewer
    than the rails, so pods hold groups of 24 rails (the largest divisor of 72 that fits) for one SU: 3
    groups x 2 SUs = 6 pods of 24 leaves; a spine uses 24 of its 32 down ports, so it has 24 uplinks; every
    pod reaches every other through the core; six hops across pods."""
    topology = generate(make_design(cluster={"server": "gb200-nvl72", "gpus": None, "servers": 16},
                                    fabric={"topology": "rail-optimized", "scalable_unit": 8}), catalog)
    plan = topology.layout.tree.plan
    assert (plan.tiers, plan.pods, plan.leaves_per_pod, plan.spines_per_pod, plan.up) == (3, 6, 24, 8, (8, 24, 0))
    leaves = (topology.kind == KIND["switch"]) & (topology.tier == 0)
    rail, pod = topology.rail[leaves], topology.pod[leaves]
    assert all(np.unique(rail[pod == p]).size == 24 for p in range(6))
    assert (np.unique(pod[rail // 24 == 0]) == [0, 1]).all()
    assert topology.layout.diameter_hops == 6
    assert clos.index_of(topology).isolated_pods is False
