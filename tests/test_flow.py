"""The flow solver, each result held to an independent oracle."""

from __future__ import annotations

import dataclasses
import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topoplan.flow import clos, ecmp, hashed, lp, route
from topoplan.flow.bisection import bisection, permutation_throughput
from topoplan.flow.metrics import Timing, arc_classes, evaluate_collective, phase_result
from topoplan.flow.placement import group_ranks
from topoplan.flow.algorithms import plan_collective
from topoplan.flow.traffic import BUSBW_FACTOR, Demand, ring_demand
from topoplan.generators import generate
from topoplan.spec import Collective
from topoplan.topology import KIND, LINK_TIER

ZERO = Timing(latency_scale=0.0)  # bandwidth only


def timed(topology, plan, **options):
    """One plan routed and timed (bandwidth only) as the collective's one candidate."""
    return evaluate_collective(topology, [plan], ZERO, **options)


def fabric(make_design, catalog, **sections):
    design = make_design(**sections)
    return design, generate(design, catalog)


def seconds_per_arc(topology, load):
    return load / (topology.capacity_gbps * 1e9 / 8)


# --- nccl-tests conventions ------------------------------------------------------------------------

@pytest.mark.parametrize("op,n,algbw,busbw", [("allreduce", 8, 100, 175), ("allreduce", 1024, 25, 49.95),
                                               ("allgather", 16, 40, 37.5)])
def test_busbw_factors_match_published_table(op, n, algbw, busbw):
    """topologies.md B11 (published to two decimals)."""
    assert algbw * BUSBW_FACTOR[op](n) == pytest.approx(busbw, abs=0.005)


def test_busbw_factors_for_every_op():
    """nccl-tests PERFORMANCE.md: allreduce 2(n-1)/n; RS, AG, alltoall (n-1)/n; broadcast, reduce 1; the stress
    ops, which nccl-tests lacks, report algbw (factor 1)."""
    n = 12
    expected = {"allreduce": 2 * 11 / 12, "reducescatter": 11 / 12, "allgather": 11 / 12, "alltoall": 11 / 12,
                "broadcast": 1.0, "reduce": 1.0, "sendrecv": 1.0, "permutation": 1.0, "incast": 1.0}
    assert {op: f(n) for op, f in BUSBW_FACTOR.items()} == pytest.approx(expected)


# --- placement ---------------------------------------------------------------------------------------

def test_groups_follow_the_rank_layout(make_design):
    design = make_design(cluster={"gpus": 64}, workload={"parallelism": {"tp": 8, "pp": 2, "dp": 4, "ep": 2}})
    tp, dp, pp, ep = (group_ranks(design, g) for g in ("tp", "dp", "pp", "ep"))
    assert tp.shape == (8, 8) and tp[0].tolist() == list(range(8))
    assert dp.shape == (16, 4) and dp[0].tolist() == [0, 8, 16, 24]
    assert pp.shape == (32, 2) and pp[0].tolist() == [0, 32]
    assert ep.shape == (32, 2) and ep[0].tolist() == [0, 8] and [16, 24] in ep.tolist()
    assert all(row in [r[i:i + 2] for r in dp.tolist() for i in (0, 2)] for row in ep.tolist())  # carved out of dp
    for groups in (tp, dp, pp, ep):  # every rank in exactly one group of each kind
        assert np.array_equal(np.sort(groups.ravel()), np.arange(64))


def test_order_option_changes_the_innermost_dimension(make_design):
    design = make_design(cluster={"gpus": 64},
                         workload={"parallelism": {"tp": 8, "dp": 8}, "order": ["dp", "tp", "cp", "pp"]})
    assert group_ranks(design, "dp")[0].tolist() == list(range(8))
    assert group_ranks(design, "tp")[0].tolist() == list(range(0, 64, 8))


# --- engines against oracles -----------------------------------------------------------------------

def _networkx_ecmp(topology, src, dst, size, weight=None, relaying=()):
    """Independent oracle: enumerate every shortest path with networkx and weight each by the product of
    its per-hop split (1 / number of shortest-path out-arcs at each hop, parallel arcs counted).
    ``weight`` (per arc, default 1) is each arc's length; GPUs relay only if listed in ``relaying``."""
    weight = np.ones(topology.num_arcs) if weight is None else weight
    graph = nx.MultiDiGraph()
    graph.add_nodes_from(range(topology.num_nodes))
    for arc, (a, b) in enumerate(zip(topology.src, topology.dst)):
        graph.add_edge(int(a), int(b), key=arc, w=float(weight[arc]))
    load = np.zeros(topology.num_arcs)
    gpus = set(topology.gpus.tolist()) - set(relaying)
    for s, t, size_st in zip(src, dst, size):
        # GPUs do not relay: only the source's and the destination's GPU links may be used
        view = nx.subgraph_view(graph, filter_node=lambda x: x not in gpus or x in (int(s), int(t)))
        to_t = nx.shortest_path_length(view, target=int(t), weight="w")
        for path in nx.all_shortest_paths(view, int(s), int(t), weight="w"):
            share = 1.0
            for u, v in itertools.pairwise(path):
                on_path = [k for _, x, k, w in view.out_edges(u, keys=True, data="w")
                           if x in to_t and to_t[x] == to_t[u] - w]
                share *= len(graph[u][v]) / len(on_path)
            for u, v in itertools.pairwise(path):
                for arc in graph[u][v]:
                    load[arc] += size_st * share / len(graph[u][v])
    return load


@pytest.mark.parametrize("sections", [
    {"cluster": {"server": "generic-1gpu", "gpus": 96}, "fabric": {"switch": "generic-48x400g"}},
    {"cluster": {"server": "generic-1gpu", "gpus": 80}, "fabric": {"switch": "generic-48x400g", "oversubscription": 3}},
    {"cluster": {"gpus": 64}, "fabric": {"switch": "generic-48x400g", "tiers": 2}},
    {"cluster": {"server": "pcie-8gpu-l40s", "gpus": 96}, "fabric": {"switch": "generic-48x400g"}},
])
def test_ecmp_equals_networkx_shortest_paths(make_design, catalog, sections):
    _, topology = fabric(make_design, catalog, **sections)
    rng = np.random.default_rng(7)
    gpus = topology.gpus
    src = rng.choice(gpus, 40)
    dst = rng.choice(gpus, 40)
    size = rng.uniform(1, 3, 40)
    keep = src != dst
    got = ecmp.route(topology, Demand(src[keep], dst[keep], size[keep])).load
    want = _networkx_ecmp(topology, src[keep], dst[keep], size[keep])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


CLOS_CASES = [
    {"cluster": {"gpus": 256}},
    {"cluster": {"gpus": 2048}, "fabric": {"tiers": 3}},
    {"cluster": {"gpus": 384}, "fabric": {"oversubscription": 3}},
    {"cluster": {"server": "hgx-b300", "gpus": 512}, "fabric": {"planes": 2}},
    {"cluster": {"server": "pcie-8gpu-l40s", "gpus": 256}},
    # three tiers over two pods (one pod would leave the core with no traffic, refused)
    {"cluster": {"server": "generic-1gpu", "gpus": 1600}, "fabric": {"tiers": 3, "oversubscription": {"spine": 3}}},
    {"cluster": {"server": "generic-1gpu", "gpus": 620}, "fabric": {"switch": "generic-48x400g", "tiers": 3}},
    # faster links above the leaves (800G on 51.2T switches, 400G NICs), two and three tiers
    {"cluster": {"gpus": 1024}, "fabric": {"switch": "broadcom-th5-64x800g", "link_gbps": {"spine": 800}}},
    {"cluster": {"server": "generic-1gpu", "gpus": 1536},
     "fabric": {"switch": "broadcom-th5-64x800g", "tiers": 3, "leaf_uplinks": 60, "link_gbps": {"spine": 800},
                "oversubscription": {"spine": 7}}},
    # spread wiring (prime uplink counts) and pods of a given size
    {"cluster": {"server": "generic-1gpu", "gpus": 352}, "fabric": {"switch": "generic-48x400g", "leaf_uplinks": 13}},
    {"cluster": {"server": "generic-1gpu", "gpus": 1008},
     "fabric": {"switch": "generic-48x400g", "tiers": 3, "oversubscription": {"spine": 5.86}}},
    {"cluster": {"server": "generic-1gpu", "gpus": 1600},
     "fabric": {"tiers": 3, "oversubscription": {"spine": 3}, "pod": {"servers": 320}}},
]


@pytest.mark.parametrize("sections", CLOS_CASES)
def test_clos_closed_form_equals_ecmp(make_design, catalog, sections):
    _, topology = fabric(make_design, catalog, **sections)
    assert clos.refusal(topology) is None
    rng = np.random.default_rng(3)
    gpus = topology.gpus
    width = 16 if gpus.size % 16 == 0 else 6 if gpus.size % 6 == 0 else 2
    demands = [Demand(gpus, rng.permutation(gpus), rng.uniform(1, 2, gpus.size)),
               ring_demand(gpus.reshape(-1, width), 5.0),
               Demand(a2a_members=rng.permutation(gpus).reshape(-1, width), a2a_bytes=3.0)]
    for demand in demands:
        want = ecmp.route(topology, demand).load
        got = clos.route(topology, demand).load
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * want.max())


def test_clos_refuses_what_it_cannot_model_exactly(make_design, catalog):
    # two NIC ports in one plane: ECMP may use either, the closed form assumes one
    _, topology = fabric(make_design, catalog, cluster={"server": "hgx-b300", "gpus": 64})
    assert "one port in each plane" in clos.refusal(topology).reason


def test_permutation_on_non_blocking_fat_tree_is_line_rate(make_design, catalog):
    design, topology = fabric(make_design, catalog, cluster={"gpus": 1024})
    rng = np.random.default_rng(0)
    classes = arc_classes(topology)
    for _ in range(3):
        gpus = topology.gpus
        demand = Demand(gpus, rng.permutation(gpus), 1e9)
        for engine in ("ecmp", "optimal"):
            result = phase_result(topology, classes, route(topology, demand, engine).load, "perm", 1, 0)
            assert result.max_utilization == pytest.approx(1.0, rel=1e-9)


def test_oversubscribed_leaf_cross_leaf_permutation(make_design, catalog):
    """4:1 leaf (51 down / 13 up is not exact, so use a 40-port split: 32 down, 8 up): every GPU sends
    across leaves, so each uplink carries 32/8 = 4x what each NIC link carries."""
    design, topology = fabric(make_design, catalog, cluster={"server": "generic-1gpu", "gpus": 320},
                              fabric={"switch": "nvidia-qm8700", "oversubscription": 4})
    plan = topology.layout.tree.plan
    assert (plan.down[0], plan.up[0]) == (32, 8)
    gpus = topology.gpus
    shift = plan.down[0]  # send to the same position on the next leaf
    demand = Demand(gpus, np.roll(gpus, -shift), 1e9)
    classes = arc_classes(topology)
    for engine in ("ecmp", "optimal"):
        load = route(topology, demand, engine).load
        result = phase_result(topology, classes, load, "perm", 1, 0)
        assert result.max_utilization == pytest.approx(4.0, rel=1e-6)
        assert result.bottleneck == "spine"
        uplinks = topology.link_tier == LINK_TIER["spine"]
        assert result.utilization_by_tier["spine"] == pytest.approx(4.0, rel=1e-6)
        assert seconds_per_arc(topology, load)[uplinks].min() > 0


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), ratio=st.sampled_from([1, 2, 3]), kind=st.sampled_from(["perm", "a2a", "random"]))
def test_optimal_is_never_worse_than_ecmp(catalog, seed, ratio, kind):
    from topoplan.spec import design_from_data
    from conftest import spec_data

    design = design_from_data(spec_data(cluster={"server": "generic-1gpu", "gpus": 192},
                                        fabric={"oversubscription": ratio}), catalog)
    topology = generate(design, catalog)
    rng = np.random.default_rng(seed)
    gpus = topology.gpus
    if kind == "perm":
        demand = Demand(gpus, rng.permutation(gpus), 1.0)
    elif kind == "a2a":
        demand = Demand(a2a_members=rng.permutation(gpus).reshape(-1, 12), a2a_bytes=1.0)
    else:
        demand = Demand(rng.choice(gpus, 300), rng.choice(gpus, 300), rng.uniform(0, 5, 300))
    worst = lambda load: seconds_per_arc(topology, load).max()
    assert worst(lp.route(topology, demand).load) <= worst(ecmp.route(topology, demand).load) * (1 + 1e-9)


def test_optimal_beats_ecmp_where_hashing_paths_matter(make_design, catalog):
    """A 3-tier fabric where two pods' traffic all crosses the core: ECMP spreads evenly already, so
    the LP can only match it; on a 2-leaf pattern it can do no better than the cut (both tied)."""
    _, topology = fabric(make_design, catalog, cluster={"server": "generic-1gpu", "gpus": 2048},
                         fabric={"tiers": 3})
    gpus = topology.gpus
    demand = Demand(gpus[:1024], gpus[1024:], 1.0)
    e, o = ecmp.route(topology, demand).load, lp.route(topology, demand).load
    assert seconds_per_arc(topology, o).max() == pytest.approx(seconds_per_arc(topology, e).max(), rel=1e-6)


@pytest.mark.parametrize("ratio", [1, 3])
def test_flow_invariants(make_design, catalog, ratio):
    """Conservation at every node, no negative load, loads linear in bytes."""
    _, topology = fabric(make_design, catalog, cluster={"gpus": 512}, fabric={"oversubscription": ratio})
    rng = np.random.default_rng(1)
    gpus = topology.gpus
    demand = Demand(rng.choice(gpus, 500), rng.choice(gpus, 500), rng.uniform(0, 4, 500))
    for engine in ("ecmp", "optimal"):
        load = route(topology, demand, engine).load
        assert (load >= -1e-9 * load.max()).all()
        net = np.bincount(topology.src, load, topology.num_nodes) - np.bincount(topology.dst, load, topology.num_nodes)
        src, dst, size = demand.pairs()
        expected = np.bincount(src, size, topology.num_nodes) - np.bincount(dst, size, topology.num_nodes)
        np.testing.assert_allclose(net, expected, atol=1e-6 * size.sum())
    doubled = route(topology, demand.scaled(2.0), "ecmp").load
    np.testing.assert_allclose(doubled, 2 * route(topology, demand, "ecmp").load, rtol=1e-12)


def test_symmetric_fabric_gives_symmetric_loads(make_design, catalog):
    _, topology = fabric(make_design, catalog, cluster={"gpus": 1024})
    gpus = topology.gpus
    load = route(topology, Demand(a2a_members=gpus.reshape(1, -1), a2a_bytes=1.0)).load
    for tier in ("leaf", "spine"):
        arcs = topology.link_tier == LINK_TIER[tier]
        assert np.ptp(load[arcs]) <= 1e-9 * load[arcs].max()


# --- collectives and metrics -----------------------------------------------------------------------

def _collective(op, group, size=2**30, algorithm=None):
    from topoplan.flow.algorithms import BY_KEY

    default = next(a.name for (o, _), a in BY_KEY.items() if o == op and a.default)
    return Collective("c", op, group, size, algorithm or default)


def test_ring_allreduce_at_nic_rate(make_design, catalog):
    """World ring on a non-blocking 400G fabric, bandwidth only: NCCL's channels leave every DGX H100
    through all 8 NICs, so busbw is 8 x 50 GB/s; one GPU per server (dp at tp = 8) gets its one NIC."""
    design, topology = fabric(make_design, catalog, cluster={"gpus": 1024},
                              workload={"parallelism": {"tp": 8, "dp": 128}})
    result = timed(topology, plan_collective(topology, design, _collective("allreduce", "world", algorithm="ring")))
    assert result.busbw_GBps == pytest.approx(400.0, rel=1e-9)
    assert result.bottleneck == "leaf"
    result = timed(topology, plan_collective(topology, design, _collective("allreduce", "dp", algorithm="ring")))
    assert result.busbw_GBps == pytest.approx(50.0, rel=1e-9)


def test_ring_allreduce_slows_by_the_oversubscription_the_loads_predict(make_design, catalog):
    """Every server's ring crosses to the next server; with 1 GPU per server and 4:1 leaves, each leaf
    sends one ring hop up over its 8 uplinks: no slowdown. Crossing every hop instead (a ring over
    GPUs one leaf apart) puts 32 flows on 8 uplinks: busbw falls 4x, as the uplink loads say."""
    design, topology = fabric(make_design, catalog, cluster={"server": "generic-1gpu", "gpus": 320},
                              fabric={"switch": "nvidia-qm8700", "oversubscription": 4})
    gpus = topology.gpus
    nic_rate = 200 / 8  # QM8700 runs 200G ports: GB/s
    plan = plan_collective(topology, design, _collective("allreduce", "world"))
    assert timed(topology, plan).busbw_GBps == pytest.approx(nic_rate, rel=1e-9)
    interleaved = gpus.reshape(10, 32).T.reshape(1, -1)  # consecutive ring members on different leaves
    plan.phases[0].demand = ring_demand(interleaved, 2 * 319 / 320 * 2**30)
    result = timed(topology, plan)
    assert result.max_link_utilization == pytest.approx(4.0, rel=1e-9)
    assert result.busbw_GBps == pytest.approx(nic_rate / 4.0, rel=1e-9)


def test_hierarchical_allreduce_on_dgx_h100(make_design, catalog):
    """Intra-server phases run on NVLink (450 GB/s per GPU), the inter-server ring on one NIC per rail."""
    design, topology = fabric(make_design, catalog, cluster={"gpus": 256})
    S = 2**30
    plan = plan_collective(topology, design, _collective("allreduce", "world", S, "hierarchical"))
    assert [p.label for p in plan.phases] == ["intra-server reduce-scatter", "inter-server ring per local rank",
                                             "intra-server all-gather"]
    result = timed(topology, plan)
    intra, inter, _ = result.phases
    assert intra.bottleneck == "nvlink" and inter.bottleneck == "leaf"
    g, m = 8, 32
    assert intra.bandwidth_s == pytest.approx((g - 1) / g * S / 450e9, rel=1e-9)
    assert inter.bandwidth_s == pytest.approx(2 * (m - 1) / m * S / g / 50e9, rel=1e-9)
    assert result.bottleneck == "leaf"
    flat = timed(topology, plan_collective(topology, design, _collective("allreduce", "world", S, "ring")))
    assert result.time_s < flat.time_s  # the NICs carry 1/8 of the bytes


def test_every_op_routes_with_expected_steps(make_design, catalog):
    design, topology = fabric(make_design, catalog, cluster={"gpus": 128},
                              workload={"parallelism": {"tp": 8, "pp": 2, "dp": 8}})
    # NCCL's step counts: a ring broadcast or reduce takes p steps, all-to-all peers progress at once
    cases = [("allreduce", "tree", 2 * 3), ("allgather", "ring", 7), ("reducescatter", "ring", 7),
             ("alltoall", "direct", 1), ("broadcast", "ring", 8), ("broadcast", "tree", 3),
             ("reduce", "ring", 8), ("sendrecv", "direct", 1)]
    for op, algorithm, steps in cases:
        group = "pp" if op == "sendrecv" else "dp"
        plan = plan_collective(topology, design, _collective(op, group, 2**26, algorithm))
        assert plan.phases[0].steps == steps, (op, algorithm)
        result = timed(topology, plan)
        assert result.time_s > 0 and result.unreachable_pairs == 0


def test_tree_allreduce_trees_are_complementary():
    from topoplan.flow.traffic import tree_demand

    members = np.arange(16).reshape(1, 16)
    one, two = tree_demand(members, 1.0, both_ways=False), tree_demand(members, 1.0, both_ways=False, mirror=True)
    interior_one, interior_two = set(one.src.tolist()), set(two.src.tolist())
    assert not interior_one & interior_two  # an interior node of one tree is a leaf of the other
    for tree in (one, two):  # a spanning tree: 15 edges reaching every rank
        assert tree.src.size == 15 and set(tree.dst.tolist()) | {int(np.setdiff1d(members, tree.dst)[0])} == set(range(16))


# --- ecmp-hash --------------------------------------------------------------------------------------

def test_hash_collisions_and_queue_pairs(make_design, catalog):
    """A ring across leaves: each leaf sends several flows up; hashing them onto single uplinks
    collides (utilization > 1 for some seed), and more queue pairs bring the mean toward ecmp."""
    design, topology = fabric(make_design, catalog, cluster={"server": "generic-1gpu", "gpus": 512},
                              fabric={"switch": "nvidia-qm9700"})
    gpus = topology.gpus
    crossing = gpus.reshape(16, 32).T.reshape(1, -1)  # consecutive members on different leaves
    demand = ring_demand(crossing, 1e9)
    classes = arc_classes(topology)
    ecmp_util = phase_result(topology, classes, ecmp.route(topology, demand).load, "r", 1, 0).max_utilization
    assert ecmp_util == pytest.approx(1.0)

    def mean_util(qps):
        utils = [phase_result(topology, classes, hashed.route(topology, demand, seed, qps).load,
                              "r", 1, 0).max_utilization for seed in range(6)]
        return utils

    single = mean_util(1)
    assert max(single) > 1.0
    means = [np.mean(mean_util(q)) for q in (1, 4, 32)]
    assert means[0] > means[1] > means[2] >= ecmp_util - 1e-9
    # the same seed routes identically
    np.testing.assert_array_equal(hashed.route(topology, demand, 5).load, hashed.route(topology, demand, 5).load)


def test_hash_conserves_bytes(make_design, catalog):
    _, topology = fabric(make_design, catalog, cluster={"gpus": 256})
    gpus = topology.gpus
    demand = Demand(gpus, np.roll(gpus, 37), 2.0)
    load = hashed.route(topology, demand, seed=3, qps=2).load
    net = np.bincount(topology.src, load, topology.num_nodes) - np.bincount(topology.dst, load, topology.num_nodes)
    assert net[gpus] == pytest.approx(np.zeros(gpus.size))


# --- failures and bisection -------------------------------------------------------------------------

def test_disconnected_pairs_are_reported_not_crashed_on(make_design, catalog):
    design, topology = fabric(make_design, catalog, cluster={"gpus": 256})
    leaf0 = np.flatnonzero((topology.kind == KIND["switch"]) & (topology.tier == 0))[0]
    up = np.ones(topology.num_arcs, dtype=bool)
    cut = ((topology.src == leaf0) | (topology.dst == leaf0)) & (topology.link_tier == LINK_TIER["spine"])
    up[cut] = False
    gpus = topology.gpus
    demand = Demand(gpus, np.roll(gpus, 128), 1.0)
    for engine in ("ecmp", "ecmp-hash"):
        routed = route(topology, demand, engine, arc_mask=up)
        assert routed.unreachable_pairs == 2 * 32  # the 32 GPUs under leaf 0, both directions
    plan = plan_collective(topology, design, _collective("alltoall", "world", 2**20))
    result = timed(topology, plan, arc_mask=up)
    assert result.time_s is None and result.bottleneck == "unreachable"
    assert result.unreachable_pairs == 2 * 32 * 224


def test_structural_bisection_matches_analytic_on_clos(make_design, catalog):
    _, topology = fabric(make_design, catalog, cluster={"server": "generic-1gpu", "gpus": 2048},
                         fabric={"tiers": 3})
    analytic = bisection(topology)
    topology.layout = dataclasses.replace(topology.layout, bisection_gbps=None, bisection_method="")
    found = bisection(topology)
    assert "upper bound" in found.method
    assert found.gbps == pytest.approx(analytic.gbps, rel=1e-9)


def test_permutation_throughput(make_design, catalog):
    _, topology = fabric(make_design, catalog, cluster={"server": "generic-1gpu", "gpus": 384},
                         fabric={"oversubscription": 3})
    full = permutation_throughput(topology)
    assert 400 / 3 <= full <= 400  # between the oversubscribed and the line rate
