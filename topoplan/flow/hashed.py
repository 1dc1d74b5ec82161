"""``ecmp-hash``: every flow (or each of its ``qps`` queue pairs) takes ONE shortest path, picked hop by
hop by a seeded hash, as switches hash a flow's header onto one member of the ECMP group.

Same shortest-path next hops as ``ecmp`` (weighted hops included); where ``ecmp`` splits a flow evenly,
here the whole flow (or its queue pair's share) lands on one next hop, so flows collide. Over many queue
pairs the load tends to the ``ecmp`` split; over seeds it shows the spread real fabrics see. The hash is
a deterministic function of (seed, flow, queue pair, hop), so results repeat exactly for a given seed.
"""

from __future__ import annotations

import numpy as np

from ..errors import EngineRefused, Refusal
from ..topology import Topology
from .ecmp import distances_to, routing_graph, search_ops, too_much_search
from .engine import Routed
from .traffic import Demand

MAX_FLOWS = 20_000_000
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: a well-spread 64-bit hash of uint64 values."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
    return x ^ (x >> np.uint64(31))


def route(topology: Topology, demand: Demand, seed: int = 0, qps: int = 1,
          arc_mask: np.ndarray | None = None) -> Routed:
    return route_seeds(topology, demand, [seed], qps, arc_mask)[0]


def flow_paths(topology: Topology, demand: Demand, seed: int = 0, qps: int = 1,
               arc_mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each flow's hashed path, as the fair-share solver takes it (``fairshare.completion_times``):
    ``(arc_ptr, arcs, bytes)``, flow ``i`` (queue pairs listed one after another per pair, in the order of
    ``demand.pairs()``) crossing ``arcs[arc_ptr[i]:arc_ptr[i + 1]]``; unreachable flows have no arcs."""
    hops: list = []
    route_seeds(topology, demand, [seed], qps, arc_mask, hops)
    flows = int((demand.pairs()[0]).size) * qps
    flow = np.concatenate([h[0] for h in hops]) if hops else np.zeros(0, dtype=np.int64)
    arcs = np.concatenate([h[1] for h in hops]) if hops else np.zeros(0, dtype=np.int64)
    order = np.argsort(flow, kind="stable")   # hops were recorded in path order
    arc_ptr = np.concatenate([[0], np.cumsum(np.bincount(flow, minlength=flows))])
    size = np.repeat(demand.pairs()[2] / qps, qps)
    return arc_ptr, arcs[order], size


def route_seeds(topology: Topology, demand: Demand, seeds, qps: int = 1,
                arc_mask: np.ndarray | None = None, hops: list | None = None) -> list[Routed]:
    """One ``Routed`` per seed. The distances to each block of destinations do not depend on the seed, so
    they are computed once for all seeds (the search is most of the work)."""
    pairs = int((demand.src != demand.dst).sum())
    if demand.has_a2a:
        groups, p = demand.a2a_members.shape
        pairs += groups * p * (p - 1)
    flows = pairs * qps   # counted before any pair is listed: a 16k-GPU all-to-all has 268 million
    if flows > MAX_FLOWS:
        raise EngineRefused(Refusal("ecmp-hash", f"ecmp-hash would follow {flows:,} flows (more than {MAX_FLOWS:,}); "
                         "use ecmp for this workload or fewer queue pairs"))
    refused = too_much_search("ecmp-hash", search_ops(topology, demand.destinations().size, arc_mask, push=False))
    if refused is not None:
        raise EngineRefused(refused)
    src, dst, size = demand.pairs()
    n, m = topology.num_nodes, topology.num_arcs
    routed = [Routed(np.zeros(m)) for _ in seeds]
    if src.size == 0:
        return routed
    usable = np.ones(m, dtype=bool) if arc_mask is None else arc_mask
    graph = routing_graph(topology, usable)
    relay = graph.relay
    weight = np.zeros(m, dtype=np.int64)
    weight[graph.arcs] = graph.weight
    # out-arcs of every node, as CSR over arc ids
    arcs = graph.arcs
    order = np.argsort(topology.src[arcs], kind="stable")
    out_arcs = arcs[order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(topology.src[out_arcs], minlength=n))])
    max_degree = int(np.diff(indptr).max(initial=0))

    flow_src = np.repeat(src, qps)
    flow_dst = np.repeat(dst, qps)
    flow_bytes = np.repeat(size / qps, qps)
    flow_id = np.arange(flows, dtype=np.uint64)
    targets_all = np.unique(flow_dst)
    block = max(1, min(targets_all.size, (256 * 2**20) // (n * 8)))
    for start in range(0, targets_all.size, block):
        targets = targets_all[start:start + block]
        dist, _outdeg, _levels = distances_to(graph, targets)
        col_of = np.full(n, -1, dtype=np.int64)
        col_of[targets] = np.arange(targets.size)
        mine = np.flatnonzero(col_of[flow_dst] >= 0)
        col = col_of[flow_dst[mine]]
        lost = dist[flow_src[mine], col] < 0
        for seed, out in zip(seeds, routed):
            if lost.any():
                out.unreachable_pairs += int(lost.sum()) // qps
                out.unreachable_bytes += float(flow_bytes[mine][lost].sum())
            _walk(topology, out.load, dist, flow_src[mine].copy(), col, ~lost, flow_id[mine], flow_bytes[mine],
                  seed, indptr, out_arcs, max_degree, weight, relay, hops)
    return routed


def _walk(topology, load, dist, here, col, active, flow_id, flow_bytes, seed, indptr, out_arcs, max_degree,
          weight, relay, hops: list | None = None) -> None:
    """Move every active flow hop by hop along one hashed shortest-path next hop, adding its bytes;
    ``hops`` (optional) gets ``(flow ids, chosen arcs)`` of every hop."""
    m = load.size
    hop = 0
    positions = np.arange(max_degree)
    while active.any():
        idx = np.flatnonzero(active)
        u, c = here[idx], col[idx]
        level = dist[u, c]
        # candidate out-arcs, position by position, that step one level closer
        starts, degree = indptr[u], indptr[u + 1] - indptr[u]
        valid = positions[None, :] < degree[:, None]
        cand = out_arcs[np.minimum(starts[:, None] + positions[None, :], out_arcs.size - 1)]
        head = topology.dst[cand]
        head_level = dist[head, c[:, None]]
        good = valid & (head_level == level[:, None] - weight[cand]) & (relay[head] | (head_level == 0))
        count = good.sum(axis=1)
        key = (np.uint64(seed) * np.uint64(0x100000001B3)) ^ (flow_id[idx] << np.uint64(8)) ^ np.uint64(hop)
        pick = (_mix(key) % count.astype(np.uint64)).astype(np.int64)
        rank = np.cumsum(good, axis=1) - 1
        chosen = cand[np.arange(idx.size), np.argmax(good & (rank == pick[:, None]), axis=1)]
        load += np.bincount(chosen, weights=flow_bytes[idx], minlength=m)
        if hops is not None:
            hops.append((flow_id[idx].astype(np.int64), chosen))
        here[idx] = topology.dst[chosen]
        active[idx] = dist[here[idx], c] > 0
        hop += 1
