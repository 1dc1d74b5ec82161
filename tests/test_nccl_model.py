"""NCCL's cost model (flow/nccl.py) against numbers worked out by hand from the reference's formulas, and
topoplan's routed predictions against NCCL's model on non-blocking fabrics."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from topoplan.flow import nccl
from topoplan.flow.algorithms import BY_KEY, plan_collective
from topoplan.flow.metrics import Timing, evaluate_collective, evaluate_plan, timing_for
from topoplan.generators import generate
from topoplan.spec import Collective

GiB, MiB = 2**30, 2**20

# (family, op, protocol, ranks, nodes, nominal busBw GB/s, size, channels, seconds), Hopper, NVLink inside
# a node. Worked by hand from ../shared/reference/nccl_model.md: e.g. the first, ring AllReduce Simple on
# 4 x 8 ranks: latency 8.4 + 56 x 3.4 (intra) + 6 x 14 (network) = 282.8 us; algbw 400 x 32/62 GB/s;
# 1 GiB / algbw = 5200.94 us; 5483.74 us in all.
HAND_WORKED = [
    ("ring", "allreduce", "Simple", 32, 4, 400, 1073741824, 16, 5.483737e-03),
    ("ring", "allreduce", "LL128", 32, 4, 400, 1048576, 16, 1.499207e-04),
    ("ring", "allreduce", "LL", 32, 4, 400, 8, 16, 7.880008e-05),
    ("ring", "allgather", "Simple", 128, 16, 400, 268435456, 16, 1.265046e-03),
    ("ring", "reducescatter", "LL128", 128, 16, 400, 4194304, 16, 2.981085e-04),
    ("ring", "allreduce", "Simple", 1024, 1024, 50, 8589934592, 2, 3.719142e-01),   # one rank per node
    ("tree", "allreduce", "Simple", 64, 8, 400, 1073741824, 16, 5.983953e-03),
    ("tree", "allreduce", "LL", 512, 64, 400, 65536, 16, 7.655346e-05),
    ("tree", "allreduce", "LL128", 8192, 1024, 400, 16777216, 16, 2.987592e-04),
    ("ring", "allreduce", "Simple", 16, 2, 400, 8589934592, 16, 4.039692e-02),
    ("ring", "allgather", "LL", 8192, 1024, 400, 8, 16, 9.936700e-03),
    ("ring", "allreduce", "LL128", 64, 8, 400, 536870912, 8, 3.882816e-03),     # capped: 8 x 36.7 GB/s
]


@pytest.mark.parametrize("family, op, protocol, ranks, nodes, bus, size, channels, seconds", HAND_WORKED)
def test_nccl_model_matches_hand_worked_points(family, op, protocol, ranks, nodes, bus, size, channels, seconds):
    shape = nccl.GroupShape(ranks, nodes, "nvlink", channels, "hopper")
    assert nccl.nccl_model_time_s(op, family, protocol, shape, size, bus) == pytest.approx(seconds, rel=1e-6)


def test_protocol_crossover_follows_size():
    """Latency-bound sizes take LL, bandwidth-bound ones Simple (NCCL's tuner on 4 x 8 H100 ranks)."""
    shape = nccl.GroupShape(32, 4, "nvlink", 16, "hopper")
    best = {size: min(nccl.PROTOCOLS, key=lambda p: nccl.nccl_model_time_s("allreduce", "ring", p, shape, size, 400))
            for size in (8, 64 * MiB, 8 * GiB)}
    assert best == {8: "LL", 64 * MiB: "LL128", 8 * GiB: "Simple"}


def _dgx_design(make_design, servers: int, tp: int = 1):
    design = make_design(cluster={"gpus": 8 * servers},
                         workload={"parallelism": {"tp": tp, "dp": 8 * servers // tp}} if tp > 1 else None)
    return design


def _result(design, catalog, op, group, size, algorithm):
    topology = generate(design, catalog)
    plan = plan_collective(topology, design, Collective("c", op, group, size, algorithm),
                           BY_KEY[(op, algorithm)])
    return evaluate_plan(topology, plan, timing_for(design, catalog))


# (servers, op, algorithm, group, tp, nominal busBw): ring at any node count, trees from 8 nodes (below
# that the heap-layout tree has no node that is inner in one tree and a leaf in the other; see
# docs/validation.md). A group of one GPU per server (tp = 8) is bounded by that GPU's NIC.
NONBLOCKING = [
    (2, "allreduce", "ring", "world", 1, 400), (4, "allreduce", "ring", "world", 1, 400),
    (16, "allreduce", "ring", "world", 1, 400), (128, "allreduce", "ring", "world", 1, 400),
    (4, "allgather", "ring", "world", 1, 400), (32, "reducescatter", "ring", "world", 1, 400),
    (1024, "allreduce", "ring", "dp", 8, 50), (8, "allreduce", "tree", "world", 1, 400),
    (64, "allreduce", "tree", "world", 1, 400), (1024, "allreduce", "tree", "dp", 8, 50),
]


@pytest.mark.parametrize("servers, op, algorithm, group, tp, bus", NONBLOCKING)
def test_routed_prediction_equals_nccl_model_on_a_nonblocking_fabric(make_design, catalog, servers, op, algorithm,
                                                                       group, tp, bus):
    design = _dgx_design(make_design, servers, tp)
    result = _result(design, catalog, op, group, GiB, algorithm)
    shape = result.shape
    assert shape.nodes == servers and shape.channels == 16 and shape.arch == "hopper"
    family = BY_KEY[(op, algorithm)].family
    for size in (8, 64 * 1024, 16 * MiB, GiB, 8 * GiB):
        for protocol in nccl.PROTOCOLS:
            want = nccl.nccl_model_time_s(op, family, protocol, shape, size, bus)
            assert result.time_s(protocol, size) == pytest.approx(want, rel=0.01), (size, protocol)


def test_world_allreduce_on_four_dgx_h100_uses_every_nic(make_design, catalog):
    """Channels leave each server through all 8 NICs: several hundred GB/s busbw, not one NIC's 50."""
    from topoplan.flow import route
    from topoplan.topology import KIND

    design = _dgx_design(make_design, 4)
    topology = generate(design, catalog)
    collective = Collective("c", "allreduce", "world", GiB, "auto")
    plans = [plan_collective(topology, design, collective, a)
             for a in (BY_KEY[("allreduce", "ring")], BY_KEY[("allreduce", "tree")])]
    result = evaluate_collective(topology, plans, timing_for(design, catalog))
    ring_time = result.choices[0].time_s("Simple", GiB)
    assert 350 < GiB / ring_time / 1e9 * 2 * 31 / 32 < 400
    assert result.protocol == "Simple" and 350 < result.busbw_GBps < 450
    load = route(topology, plans[0].phases[0].demand).load
    nic_up = (topology.kind[topology.src] == KIND["nic"]) & (topology.kind[topology.dst] == KIND["switch"])
    assert nic_up.sum() == 32 and (load[nic_up] > 0).all()
    assert np.ptp(load[nic_up]) <= 1e-9 * load[nic_up].max()  # every NIC carries the same share


def test_one_gpu_per_node_ring_is_bounded_by_its_nic(make_design, catalog):
    design = _dgx_design(make_design, 64, tp=8)
    result = _result(design, catalog, "allreduce", "dp", 8 * GiB, "ring")
    busbw = 8 * GiB / result.best(8 * GiB)[1] / 1e9 * 2 * 63 / 64
    assert 45 < busbw <= 50


def test_hierarchical_is_bounded_by_its_slowest_stage(make_design, catalog):
    """Pipelined by chunks: bandwidth-only time -> the slowest stage (plus fill), not the sum of the three."""
    design = _dgx_design(make_design, 32)
    result = _result(design, catalog, "allreduce", "world", 8 * GiB, "hierarchical")
    stages = result.phase_bandwidths_s("Simple", 8 * GiB)
    bandwidth = result.bandwidth_s("Simple", 8 * GiB)
    assert bandwidth < sum(stages)
    chunks = 8 * GiB / (result.shape.channels * nccl.PIPELINE_CHUNK_BYTES)
    assert bandwidth == pytest.approx(max(stages) + (sum(stages) - max(stages)) / chunks, rel=1e-12)
    assert bandwidth == pytest.approx(max(stages), rel=0.01)


def test_alltoall_latency_is_not_summed_over_peers(make_design, catalog):
    design = _dgx_design(make_design, 128)
    result = _result(design, catalog, "alltoall", "world", 8, "direct")
    assert result.latency_s("Simple") < 50e-6   # one step, not 1,023


def test_latency_scale_zero_is_bandwidth_only(make_design, catalog):
    design = _dgx_design(make_design, 4)
    topology = generate(design, catalog)
    plan = plan_collective(topology, design, Collective("c", "allreduce", "world", GiB, "ring"))
    with_latency = evaluate_plan(topology, plan, timing_for(design, catalog))
    without = evaluate_plan(topology, plan, dataclasses.replace(timing_for(design, catalog), latency_scale=0.0))
    assert without.latency_s("Simple") == 0.0
    assert with_latency.time_s("Simple", GiB) - without.time_s("Simple", GiB) == pytest.approx(
        nccl.ring_latency_us("allreduce", "Simple", with_latency.shape) * 1e-6, rel=1e-9)


# --- NVLS (NVLink SHARP) ------------------------------------------------------------------------------

def test_nvls_inside_one_dgx_h100_is_nccl_nvls_model(make_design, catalog):
    """tp = 8 on a DGX H100: NVLS, by hand from the reference: NVLink at NCCL's 18 x 20.6 = 370.8 GB/s,
    busbw 370.8 x 0.85 x 15/16 x 2 = 590.96 GB/s, algbw x 8/14 = 337.69 GB/s; 1 GiB takes 25 us + 3179.67 us."""
    design = _dgx_design(make_design, 2, tp=8)
    result = _result(design, catalog, "allreduce", "tp", GiB, "nvls")
    assert result.time_s("Simple", GiB) == pytest.approx(3.20467e-3, rel=1e-4)


def test_auto_takes_nvls_for_large_buffers_inside_a_server(make_design, catalog):
    design = _dgx_design(make_design, 2, tp=8)
    topology = generate(design, catalog)
    collective = Collective("c", "allreduce", "tp", GiB, "auto")
    from topoplan.flow.algorithms import applicable

    names = [a.name for a in applicable(topology, design, collective)]
    assert names == ["ring", "tree", "nvls"]   # NVLS-Tree needs several servers
    plans = [plan_collective(topology, design, collective, a) for a in applicable(topology, design, collective)]
    result = evaluate_collective(topology, plans, timing_for(design, catalog))
    assert (result.algorithm, result.protocol) == ("nvls", "Simple")
    assert result.at(8)[0].algorithm.name == "ring"   # small sizes: NVLS's 25 us step loses to LL rings


def test_nvls_tree_across_sixteen_dgx_h100_is_bound_by_the_network(make_design, catalog):
    """NCCL's NVLS-Tree takes the lesser of NVLS inside (337.69 GB/s algbw) and the network, 400 GB/s of NICs
    x 128 / 254 = 201.57 GB/s algbw: 8 GiB in 42.6 ms plus 25 + 2 x 4 x 20.9 us."""
    design = _dgx_design(make_design, 16)
    result = _result(design, catalog, "allreduce", "world", 8 * GiB, "nvls-tree")
    want = (25 + 8 * 20.9) * 1e-6 + 8 * GiB / (400e9 * 128 / 254)
    assert result.time_s("Simple", 8 * GiB) == pytest.approx(want, rel=0.01)


def test_nvls_is_refused_where_the_switch_cannot_reduce(make_design, catalog):
    from topoplan.errors import InfeasibleDesign
    from topoplan.flow.algorithms import applicable

    design = make_design(cluster={"server": "hgx-a100", "gpus": 16}, workload={"parallelism": {"tp": 8, "dp": 2}})
    topology = generate(design, catalog)
    assert [a.name for a in applicable(topology, design, Collective("c", "allreduce", "tp", GiB, "auto"))] == \
        ["ring", "tree"]
    with pytest.raises(InfeasibleDesign, match="NVLS needs an NVSwitch"):
        plan_collective(topology, design, Collective("c", "allreduce", "tp", GiB, "nvls"), BY_KEY[("allreduce", "nvls")])


# --- congestion still counts -------------------------------------------------------------------------------

def _strided_dp(make_design, catalog, ratio):
    """1,024 DGX H100 GPUs, dp groups of 8 ranks 16 servers apart: every ring hop leaves its leaf."""
    design = make_design(cluster={"gpus": 1024}, fabric={"oversubscription": ratio},
                         workload={"parallelism": {"tp": 8, "pp": 16, "dp": 8}, "order": ["tp", "pp", "dp", "cp"]})
    topology = generate(design, catalog)
    plan = plan_collective(topology, design, Collective("c", "allreduce", "dp", GiB, "ring"),
                           BY_KEY[("allreduce", "ring")])
    return topology, plan


@pytest.mark.parametrize("ratio, leaf_down, leaf_up", [(1, 32, 32), (3, 48, 16)])
def test_oversubscription_slows_channelled_rings_by_the_uplink_ratio(make_design, catalog, ratio, leaf_down, leaf_up):
    """Each leaf's NICs (leaf_down of them) all send one ring hop up over leaf_up uplinks: busbw is the NIC's
    50 GB/s over max(1, down / up)."""
    topology, plan = _strided_dp(make_design, catalog, ratio)
    assert topology.layout.tree.plan.down[0] == leaf_down and topology.layout.tree.plan.up[0] == leaf_up
    result = evaluate_collective(topology, [plan], Timing(0.0))
    assert result.busbw_GBps == pytest.approx(50.0 / max(1.0, leaf_down / leaf_up), rel=1e-9)


def test_hash_collisions_slow_channelled_rings_and_queue_pairs_spread_them(make_design, catalog):
    design = _dgx_design(make_design, 64)
    topology = generate(design, catalog)
    plan = plan_collective(topology, design, Collective("c", "allreduce", "world", GiB, "ring"),
                           BY_KEY[("allreduce", "ring")])
    fluid = evaluate_collective(topology, [plan], Timing(0.0))
    hashed = {qps: evaluate_collective(topology, [plan], Timing(0.0), "ecmp-hash", seeds=4, qps=qps)
              for qps in (1, 16)}
    assert fluid.busbw_GBps == pytest.approx(400.0, rel=1e-9)
    assert hashed[1].max_link_utilization > 1.0 and hashed[1].busbw_GBps < fluid.busbw_GBps
    assert hashed[1].busbw_GBps < hashed[16].busbw_GBps <= fluid.busbw_GBps * (1 + 1e-9)


# --- CollNet (SHARP) ----------------------------------------------------------------------------------------

def test_collnet_halves_what_each_nic_sends(make_design, catalog):
    """On QM9700 (SHARP) a world AllReduce over 128 DGX H100: every GPU sends its 1/8 shard into the switches
    once and gets it back reduced, so algbw is the node's 8 x 50 GB/s x 0.85 (Hopper): 340 GB/s, against
    about 200 for a ring; latency 2 (3.7 + 7 x 0.4) + 31 us."""
    design = _dgx_design(make_design, 128)
    result = _result(design, catalog, "allreduce", "world", 8 * GiB, "collnet")
    assert result.latency_s("Simple") == pytest.approx((2 * (3.7 + 7 * 0.4) + 31) * 1e-6, rel=1e-12)
    bandwidth = result.bandwidth_s("Simple", 8 * GiB)
    assert 8 * GiB / bandwidth / 1e9 == pytest.approx(340.0, rel=0.01)
    assert result.phases[1].bottleneck == "leaf" and result.phases[1].max_utilization == pytest.approx(1.0)


def test_collnet_needs_switches_that_reduce(make_design, catalog):
    from topoplan.errors import InfeasibleDesign
    from topoplan.flow.algorithms import applicable

    design = make_design(cluster={"gpus": 64}, fabric={"switch": "nvidia-sn5400"})   # Spectrum: no SHARP
    topology = generate(design, catalog)
    assert "collnet" not in [a.name for a in applicable(topology, design, Collective("c", "allreduce", "world",
                                                                                    GiB, "auto"))]
    with pytest.raises(InfeasibleDesign, match="reduce in the network"):
        plan_collective(topology, design, Collective("c", "allreduce", "world", GiB, "collnet"),
                        BY_KEY[("allreduce", "collnet")])


def test_nccl_tests_sizes_are_binary():
    from topoplan.units import parse_size, parse_test_size

    assert parse_test_size("8G") == 8 * GiB and parse_test_size("1M") == MiB and parse_test_size("64k") == 65536
    assert parse_test_size("1MB") == parse_size("1MB") == 10**6 and parse_test_size("4096") == 4096
