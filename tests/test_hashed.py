"""``ecmp-hash`` (flow/hashed.py) against an independent oracle: networkx shortest-path distances and, for
every flow, a hop-by-hop walk in plain Python picking the same hashed member of each ECMP group."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from topoplan.flow import hashed
from topoplan.flow.ecmp import arc_weights, relays
from topoplan.flow.traffic import Demand
from topoplan.generators import generate

MASK = 2**64 - 1


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def oracle_paths(topology, demand, seed, qps, arc_mask=None, distances=None):
    """Every flow's arcs, walked one at a time: at each node, the usable out-arcs (in arc id order) whose
    head relays (or is the destination) and lies one arc weight closer; the flow takes member
    ``splitmix64(salt ^ flow << 8 ^ hop) % size`` of that group. ``distances`` (optional): a dict that keeps
    each destination's distances for later calls with the same topology and mask."""
    usable = np.ones(topology.num_arcs, dtype=bool) if arc_mask is None else arc_mask
    weight, relay = arc_weights(topology), relays(topology)
    out_arcs = {}
    for a in np.flatnonzero(usable).tolist():
        out_arcs.setdefault(int(topology.src[a]), []).append(a)
    distances = {} if distances is None else distances

    towards = nx.DiGraph()   # reversed arcs, the lightest of parallel ones
    for a in np.flatnonzero(usable).tolist():
        u, v, w = int(topology.src[a]), int(topology.dst[a]), int(weight[a])
        if not towards.has_edge(v, u) or towards[v][u]["w"] > w:
            towards.add_edge(v, u, w=w)

    def dist_to(t):
        if t not in distances:
            # a flow is carried on only by nodes that relay: a node that does not is searched from only
            # when it is the destination itself (nx hides an edge whose weight is None)
            def carried(v, _u, data, t=t):
                return data["w"] if relay[v] or v == t else None
            distances[t] = nx.single_source_dijkstra_path_length(towards, t, weight=carried) \
                if t in towards else {t: 0}
        return distances[t]

    salt = (seed * 0x100000001B3) & MASK
    src, dst, size = demand.pairs()
    paths = []
    for s, t in zip(np.repeat(src, qps).tolist(), np.repeat(dst, qps).tolist()):
        flow, here, path, dist = len(paths), s, [], dist_to(t)
        if s in dist:
            while here != t:
                group = [a for a in out_arcs[here]
                         if (relay[topology.dst[a]] or topology.dst[a] == t)
                         and dist.get(int(topology.dst[a]), -1) == dist[here] - weight[a]]
                pick = group[splitmix64(salt ^ (flow << 8) ^ len(path)) % len(group)]
                path.append(pick)
                here = int(topology.dst[pick])
        paths.append(path)
    return paths, np.repeat(size / qps, qps)


def _fat_tree(make_design, catalog):
    return generate(make_design(cluster={"gpus": 256}), catalog)


def _railx(make_design, catalog):   # GPUs relay; arcs between nodes weigh num_nodes
    design = make_design(cluster={"server": "railx-node-8", "gpus": 6 * 4 * 8},
                         fabric={"topology": "railx", "switch": None,
                                 "railx": {"columns": 6, "rows": 4, "ocs": "calient-s320"}})
    return generate(design, catalog)


def _demands(topology, rng):
    gpus = topology.gpus
    src, dst = rng.choice(gpus, 300), rng.choice(gpus, 300)   # some to themselves: dropped
    yield Demand(src, dst, rng.random(300) * 1e6)
    yield Demand(a2a_members=rng.permutation(gpus)[:48].reshape(2, 24), a2a_bytes=3e3)


def _masks(topology, rng):
    yield None
    yield rng.random(topology.num_arcs) > 0.2   # some flows cut off, some detours
    busiest = np.argmax(np.bincount(topology.src, minlength=topology.num_nodes))
    yield (topology.src != busiest) & (topology.dst != busiest)


@pytest.mark.parametrize("fabric", [_fat_tree, _railx])
def test_flow_paths_equal_a_hop_by_hop_oracle(make_design, catalog, fabric, monkeypatch):
    """Same arcs, order and dtypes as the oracle, with queue pairs, arc masks and unreachable flows, the
    flows walked in small chunks (monkeypatched) and the destinations split over several blocks."""
    topology = fabric(make_design, catalog)
    rng = np.random.default_rng(7)
    monkeypatch.setattr(hashed, "_CHUNK", 37)
    unreachable = 0
    for demand in _demands(topology, rng):
        for arc_mask in _masks(topology, rng):
            distances: dict = {}
            for seed, qps in [(0, 1), (5, 3)]:
                expected, size = oracle_paths(topology, demand, seed, qps, arc_mask, distances)
                for budget in (None, topology.num_nodes * 8 * 7):   # all destinations, or 7 a block
                    with monkeypatch.context() as patch:
                        if budget is not None:
                            blocks = hashed._Setup.blocks
                            patch.setattr(hashed._Setup, "blocks",
                                          lambda self, flow_dst, _budget=0: blocks(self, flow_dst, budget))
                        for rows in (True, False):   # both layouts, whichever the paths would take
                            patch.setattr(hashed, "compact_rows", lambda *_, _rows=rows: _rows)
                            paths = hashed.flow_paths(topology, demand, seed, qps, arc_mask)
                            assert listed(paths) == expected
                            np.testing.assert_array_equal(paths.bytes, size)
                unreachable += sum(not p for p in expected)
                load = hashed.route(topology, demand, seed, qps, arc_mask).load
                expected_load = np.zeros(topology.num_arcs)
                for path, b in zip(expected, size):
                    expected_load[path] += b
                assert load == pytest.approx(expected_load, rel=1e-12, abs=1e-9)
    assert unreachable > 0


def listed(paths) -> list:
    """Each flow's arcs as a list, from either layout of ``FlowPaths`` (whose dtypes are checked)."""
    if paths.rows is not None:
        assert paths.rows.dtype == np.int32 and paths.arcs is None
        width = paths.rows.shape[1]
        out = []
        for row in paths.rows.tolist():
            arcs = [a for a in row if a != paths.num_arcs]
            assert row == arcs + [paths.num_arcs] * (width - len(arcs))   # padding only after the arcs
            out.append(arcs)
        return out
    assert paths.arc_ptr.dtype == np.int32 and paths.arcs.dtype == np.int32
    return [paths.arcs[b:e].tolist() for b, e in zip(paths.arc_ptr[:-1].tolist(), paths.arc_ptr[1:].tolist())]


def test_flow_paths_take_rows_where_padding_is_cheap(make_design, catalog):
    topology = _fat_tree(make_design, catalog)
    gpus = topology.gpus
    far = hashed.flow_paths(topology, Demand(gpus, np.roll(gpus, gpus.size // 2), 1.0))   # other servers
    assert far.rows is not None and far.rows.shape == (gpus.size, far.lengths().max())
    assert far.num_entries == int(far.lengths().sum()) and far.moving().all()
    near = hashed.flow_paths(topology, Demand(gpus[:-1], gpus[1:], 1.0))   # most over NVLink, a few far
    assert near.rows is None and near.lengths().max() * near.num_flows > 2 * near.num_entries


def test_flow_paths_of_nothing(make_design, catalog):
    topology = _fat_tree(make_design, catalog)
    gpus = topology.gpus
    paths = hashed.flow_paths(topology, Demand(gpus[:3], gpus[:3], 1.0))
    assert paths.arc_ptr.tolist() == [0] and paths.arcs.size == 0 and paths.bytes.size == 0


def test_compact_pairs_equal_the_pairs(make_design, catalog):
    """``Demand.pairs(compact=True)``, which the walks take: the same pairs, in int32 and with the
    all-to-all's sizes broadcast, where the all-to-all is the whole demand; as they are otherwise."""
    gpus = _fat_tree(make_design, catalog).gpus
    members = gpus[:24].reshape(2, 12)
    for demand, compact in ((Demand(a2a_members=members, a2a_bytes=3.0), True),
                            (Demand(gpus[:2], gpus[2:4], 1.0, members, 3.0), False)):
        plain, small = demand.pairs(), demand.pairs(compact=True)
        for a, b in zip(plain, small):
            np.testing.assert_array_equal(a, b)
        assert (small[0].dtype == np.int32) == compact and small[2].flags.writeable != compact
