"""The ``railx`` engine against the generic ``ecmp`` engine (itself checked against networkx)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topoplan.errors import EngineRefused
from topoplan.flow import RouteRequest, ecmp, railx, route, select_engine
from topoplan.flow.traffic import Demand, ring_demand
from topoplan.generators import generate


def _railx(make_design, catalog, columns, rows, **extra):
    design = make_design(cluster={"server": "railx-node-8", "gpus": columns * rows * 8},
                         fabric={"topology": "railx", "switch": None,
                                 "railx": {"columns": columns, "rows": rows, "ocs": "calient-s320", **extra}})
    return generate(design, catalog)


def _demands(topology, rng):
    chips = topology.gpus
    src, dst = rng.choice(chips, 200), rng.choice(chips, 200)
    yield "random flows", Demand(src, dst, rng.random(200) * 1e6)
    yield "ring", ring_demand(rng.permutation(chips).reshape(1, -1), 3e6)
    yield "world all-to-all", Demand(a2a_members=chips.reshape(1, -1), a2a_bytes=1e3)
    nodes = chips.size // 8
    if nodes % 2 == 0:  # two groups of whole nodes, interleaved over the grid
        by_node = chips.reshape(nodes, 8)
        groups = np.stack([by_node[0::2].ravel(), by_node[1::2].ravel()])
        yield "whole-node groups", Demand(a2a_members=groups, a2a_bytes=2e3)
    yield "partial-node groups", Demand(a2a_members=chips.reshape(-1, 8).T.copy(), a2a_bytes=5e2)


GRIDS = [
    (3, 3, {}),
    (6, 4, {}),                                   # even sizes: rings plus a perfect matching
    (5, 3, {"row_rails": 3, "column_rails": 2}),  # repeated rings on other chips
    (3, 2, {"row_rails": 10, "column_rails": 1}),  # more copies than chips: parallel circuits on one chip
    (7, 1, {"row_rails": 4, "column_rails": 0}),  # a single row
    (1, 4, {"row_rails": 0, "column_rails": 5}),  # a single column
]


@pytest.mark.parametrize("columns,rows,extra", GRIDS)
def test_railx_engine_equals_generic_ecmp(make_design, catalog, columns, rows, extra):
    topology = _railx(make_design, catalog, columns, rows, **extra)
    assert railx.refusal(topology) is None
    assert select_engine(topology, RouteRequest("ecmp")).name == "railx"
    for name, demand in _demands(topology, np.random.default_rng(columns * 10 + rows)):
        want = ecmp.route(topology, demand).load
        got = railx.route(topology, demand).load
        assert want.max() > 0, name
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * want.max(), err_msg=name)


def test_whole_node_groups_take_the_closed_form(make_design, catalog, monkeypatch):
    topology = _railx(make_design, catalog, 6, 4)
    calls = []
    original = railx._add_whole_node_alltoall
    monkeypatch.setattr(railx, "_add_whole_node_alltoall", lambda *a: calls.append(1) or original(*a))
    demand = Demand(a2a_members=topology.gpus.reshape(1, -1), a2a_bytes=1.0)
    railx.route(topology, demand)
    assert calls == [1]
    calls.clear()
    railx.route(topology, Demand(a2a_members=topology.gpus.reshape(-1, 8).T.copy(), a2a_bytes=1.0))
    assert calls == []  # groups with one chip per node are enumerated


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(columns=st.integers(1, 6), rows=st.integers(1, 5), row_share=st.floats(0.2, 0.8), seed=st.integers(0, 99))
def test_railx_engine_equals_ecmp_on_random_full_meshes(make_design, catalog, columns, rows, row_share, seed):
    if columns * rows < 2:
        return
    need_row, need_col = columns // 2, rows // 2  # ceil((n - 1) / 2) rings make a full mesh
    rails = 8 * 36 // 2
    row_rails = max(need_row, int(row_share * 40)) if columns > 1 else 0
    col_rails = max(need_col, int((1 - row_share) * 40)) if rows > 1 else 0
    assert row_rails + col_rails <= rails
    topology = _railx(make_design, catalog, columns, rows, row_rails=row_rails, column_rails=col_rails)
    rng = np.random.default_rng(seed)
    chips = topology.gpus
    demand = Demand(rng.choice(chips, 100), rng.choice(chips, 100), rng.random(100),
                    a2a_members=chips.reshape(1, -1), a2a_bytes=float(rng.random()))
    want = ecmp.route(topology, demand).load
    got = route(topology, demand).load  # through the facade, which picks railx
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * want.max())


@pytest.mark.parametrize("extra,reason", [
    ({"ring_assignment": "naive"}, "not full meshes"),
    ({"row_rails": 1, "column_rails": 2}, "rows are not full meshes"),
])
def test_railx_engine_refuses_what_it_cannot_do_exactly(make_design, catalog, extra, reason):
    topology = _railx(make_design, catalog, 5, 5, **extra)
    assert reason in railx.refusal(topology).reason
    assert select_engine(topology, RouteRequest("ecmp")).name == "ecmp"  # the facade falls back to the generic engine
    chips = topology.gpus
    demand = Demand(chips[:10], chips[-10:], 1.0)
    assert route(topology, demand).load.sum() > 0
    with pytest.raises(EngineRefused, match="railx engine does not apply"):
        railx.route(topology, demand)


def test_railx_engine_refuses_other_families(make_design, catalog):
    topology = generate(make_design(), catalog)
    assert "not RailX" in railx.refusal(topology).reason


def test_hashed_paths_cross_as_many_circuits_as_ecmp(make_design, catalog):
    """Every shortest path of a flow crosses the same number of circuits and of local links, so ecmp-hash
    must put exactly as many bytes on each kind as ecmp, whatever it picks."""
    from topoplan.topology import LINK_TIER

    topology = _railx(make_design, catalog, 5, 4, row_rails=3, column_rails=4)
    rng = np.random.default_rng(5)
    chips = topology.gpus
    demand = Demand(rng.choice(chips, 300), rng.choice(chips, 300), rng.random(300))
    want = route(topology, demand).load
    circuit = topology.link_tier == LINK_TIER["ocs"]
    for seed in range(3):
        got = route(topology, demand, "ecmp-hash", seed=seed, qps=4).load
        assert got[circuit].sum() == pytest.approx(want[circuit].sum(), rel=1e-12)
        assert got[~circuit].sum() == pytest.approx(want[~circuit].sum(), rel=1e-12)
        assert not np.allclose(got, want)  # it did hash: loads differ arc by arc


def _grid_design(make_design, columns, rows, collectives, parallelism=None, **rails):
    return make_design(cluster={"server": "railx-node-8", "gpus": columns * rows * 8},
                       fabric={"topology": "railx", "switch": None,
                               "railx": {"columns": columns, "rows": rows, "ocs": "calient-s320", **rails}},
                       workload={"parallelism": parallelism or {"tp": 8}, "collectives": collectives})


def test_grid_allreduce_matches_its_closed_form(make_design, catalog):
    """5 x 5 grid, two row rings (chips 0, 1) and two column rings (chips 2, 3): every pair of nodes in a
    line shares exactly one circuit, so each ring step of the 8 data-parallel groups (chip l of every
    node) crosses it: row phases 8 * (4/5) * S/2 over 50 GB/s, the column phase 8 * 2(4/5) * (S/5)/2."""
    from topoplan.flow import nccl
    from topoplan.flow.metrics import evaluate_workload

    design = _grid_design(make_design, 5, 5, [{"name": "g", "op": "allreduce", "group": "dp", "size": "1GB",
                                               "algorithm": "grid"}], row_rails=2, column_rails=2)
    (result,) = evaluate_workload(generate(design, catalog), design, catalog, latency_scale=0.0)
    times = [p.bandwidth_s for p in result.phases]
    want = [8 * 0.8 * 0.5 / 50, 8 * 1.6 * 0.2 * 0.5 / 50, 8 * 0.8 * 0.5 / 50]
    np.testing.assert_allclose(times, want, rtol=1e-9)
    # the five stages overlap by chunks: the slowest stage plus the others' share of one chunk each
    chunks = result.size_bytes / (result.channels * nccl.PIPELINE_CHUNK_BYTES)
    pipelined = max(want) + (sum(want) - max(want)) / chunks
    assert result.busbw_GBps == pytest.approx(2 * 24 / 25 / pipelined, rel=1e-9)
    assert [p.bottleneck for p in result.phases] == ["ocs"] * 3


def test_grid_allreduce_of_the_world_is_the_local_index_grids_plus_the_node(make_design, catalog):
    """Over all chips, the grid algorithm reduces inside each node first; its grid phases then move the
    same bytes as the data-parallel grid allreduce of S/8 (one per chip index)."""
    from topoplan.flow.metrics import evaluate_workload

    collectives = [{"name": "world", "op": "allreduce", "group": "world", "size": "8GB", "algorithm": "grid"},
                   {"name": "dp", "op": "allreduce", "group": "dp", "size": "1GB", "algorithm": "grid"}]
    design = _grid_design(make_design, 4, 3, collectives)
    world, dp = evaluate_workload(generate(design, catalog), design, catalog, latency_scale=0.0)
    assert [p.label for p in world.phases][0] == "intra-node reduce-scatter"
    np.testing.assert_allclose([p.bandwidth_s for p in world.phases[1:-1]], [p.bandwidth_s for p in dp.phases],
                               rtol=1e-9)
    assert world.phases[0].bottleneck == "nvlink"


def test_grid_allreduce_needs_a_group_spanning_the_grid(make_design, catalog):
    from topoplan.errors import InfeasibleDesign
    from topoplan.flow.algorithms import plan_workload

    design = _grid_design(make_design, 4, 4, [{"name": "g", "op": "allreduce", "group": "pp", "size": "1GB",
                                               "algorithm": "grid"}], parallelism={"tp": 8, "pp": 2})
    with pytest.raises(InfeasibleDesign, match="every node of the 4 x 4 grid"):
        plan_workload(generate(design, catalog), design)
