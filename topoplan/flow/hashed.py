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
    ``demand.pairs()``) crossing ``arcs[arc_ptr[i]:arc_ptr[i + 1]]`` in path order; unreachable flows have
    no arcs. ``arcs`` is int32 (int64 past 2^31 arcs), ``arc_ptr`` int32 while the entries fit, else int64.

    Each flow's hop count is known from the distances before it moves (its distance, or for weighted hops
    its distance split into the weights it is made of), so ``arc_ptr`` is laid out first and every hop is
    written in place: no per-hop lists, no sort. The arcs are the same as ``route`` follows."""
    setup = _setup(topology, demand, qps, arc_mask)
    src, dst, size = setup.pairs
    flows = src.size * qps
    bytes_ = np.repeat(size / qps, qps)
    index_type = np.int32 if topology.num_arcs < 2**31 else np.int64
    if flows == 0:
        return np.zeros(1, dtype=np.int32), np.zeros(0, dtype=index_type), bytes_
    flow_src, flow_dst = (src, dst) if qps == 1 else (np.repeat(src, qps), np.repeat(dst, qps))
    blocks = list(setup.blocks(flow_dst, 1024 * 2**20))
    lengths = np.zeros(flows, dtype=np.int32)
    kept = None
    for targets, mine, col in blocks:
        dist, _outdeg, _levels = distances_to(setup.graph, targets)
        lengths[mine] = _hop_counts(dist[flow_src[mine], col], setup.weight_set, topology.num_nodes)
        kept = dist if len(blocks) == 1 else None
        del dist, _outdeg
    total = int(lengths.sum(dtype=np.int64))
    ptr_type = np.int32 if total < 2**31 else np.int64
    arc_ptr = np.zeros(flows + 1, dtype=ptr_type)
    np.cumsum(lengths, out=arc_ptr[1:])
    arcs = np.empty(total, dtype=index_type)
    for targets, mine, col in blocks:
        dist = kept if kept is not None else distances_to(setup.graph, targets)[0]
        go = mine[lengths[mine] > 0]
        col = col[lengths[mine] > 0] if go.size < mine.size else col
        _walk(topology, setup, dist, flow_src[go], col, go.astype(np.uint64), seed, lengths[go],
              out=arcs, pos=arc_ptr[go].astype(np.int64))
        del dist
        kept = None
    return arc_ptr, arcs, bytes_


def _hop_counts(dist: np.ndarray, weight_set: tuple, n: int) -> np.ndarray:
    """Arcs on a shortest path of weighted distance ``dist`` (0 where unreachable): the distance itself
    when every arc weighs 1; with arcs of 1 and ``W`` (``ecmp.arc_weights``: ``W`` is the number of nodes,
    more than any path's arcs of weight 1), ``dist // W + dist % W``."""
    dist = np.maximum(dist, 0)
    if weight_set == (1,):
        return dist
    if len(weight_set) == 2 and weight_set[0] == 1 and weight_set[1] >= n:
        big = weight_set[1]
        return dist // big + dist % big
    raise ValueError(f"hop counts of arc weights {weight_set} are not known from distances")


class _Setup:
    """What every walk of one (topology, demand, qps, arc mask) shares: the pairs, the routing graph, the
    out-arcs of every node as CSR, and the arc weights."""

    def __init__(self, topology: Topology, demand: Demand, qps: int, arc_mask):
        self.pairs = demand.pairs()
        n, m = topology.num_nodes, topology.num_arcs
        usable = np.ones(m, dtype=bool) if arc_mask is None else arc_mask
        self.graph = routing_graph(topology, usable)
        self.relay = self.graph.relay
        self.weight = np.zeros(m, dtype=np.int64)
        self.weight[self.graph.arcs] = self.graph.weight
        self.weight_set = tuple(sorted({int(w) for w in np.unique(self.graph.weight)})) or (1,)
        arcs = self.graph.arcs
        order = np.argsort(topology.src[arcs], kind="stable")
        self.out_arcs = arcs[order]
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(topology.src[self.out_arcs], minlength=n))])
        self.num_nodes = n

    def blocks(self, flow_dst: np.ndarray, budget_bytes: int = 256 * 2**20):
        """Blocks of destinations whose distance matrices (int32 and float32 per node and destination) fit
        ``budget_bytes``: ``(targets, flows to them, their column)``."""
        n = self.num_nodes
        targets_all = np.unique(flow_dst)
        block = max(1, min(targets_all.size, budget_bytes // (n * 8)))
        col_of = np.full(n, -1, dtype=np.int64)
        if block >= targets_all.size:
            col_of[targets_all] = np.arange(targets_all.size)
            yield targets_all, np.arange(flow_dst.size), col_of[flow_dst]
            return
        for start in range(0, targets_all.size, block):
            targets = targets_all[start:start + block]
            col_of[targets] = np.arange(targets.size)
            mine = np.flatnonzero(col_of[flow_dst] >= 0)
            yield targets, mine, col_of[flow_dst[mine]]
            col_of[targets] = -1


def _setup(topology: Topology, demand: Demand, qps: int, arc_mask) -> _Setup:
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
    return _Setup(topology, demand, qps, arc_mask)


def route_seeds(topology: Topology, demand: Demand, seeds, qps: int = 1,
                arc_mask: np.ndarray | None = None) -> list[Routed]:
    """One ``Routed`` per seed. The distances to each block of destinations do not depend on the seed, so
    they are computed once for all seeds (the search is most of the work)."""
    setup = _setup(topology, demand, qps, arc_mask)
    src, dst, size = setup.pairs
    m = topology.num_arcs
    routed = [Routed(np.zeros(m)) for _ in seeds]
    if src.size == 0:
        return routed
    flows = src.size * qps
    flow_src = np.repeat(src, qps)
    flow_dst = np.repeat(dst, qps)
    flow_bytes = np.repeat(size / qps, qps)
    for targets, mine, col in setup.blocks(flow_dst):
        dist, _outdeg, _levels = distances_to(setup.graph, targets)
        to_go = dist[flow_src[mine], col]
        lost = to_go < 0
        go = mine[~lost]
        hops = _hop_counts(to_go[~lost], setup.weight_set, topology.num_nodes)
        for seed, out in zip(seeds, routed):
            if lost.any():
                out.unreachable_pairs += int(lost.sum()) // qps
                out.unreachable_bytes += float(flow_bytes[mine][lost].sum())
            _walk(topology, setup, dist, flow_src[go], col[~lost], go.astype(np.uint64), seed, hops,
                  load=out.load, flow_bytes=flow_bytes[go])
    del flows
    return routed


_COLUMNS = 256   # destinations whose next-hop table is built at once (arcs x this many booleans)


def _next_hop_table(topology, setup: _Setup, dist: np.ndarray):
    """ECMP groups: for every (node, destination column) ``node * b + column``, where its out-arcs that
    step one level closer start in ``pool`` and how many there are, packed as ``start << shift | count``
    (int64; ``shift`` bits hold the largest out-degree), in out-arc order: what a switch's forwarding table holds. Built arc by arc over blocks of
    columns: arc ``u -> v`` is on a shortest path to ``t`` when ``dist[v, t] = dist[u, t] - weight`` and
    ``v`` relays or is ``t``."""
    n, b = dist.shape
    small = dist.max(initial=0) < 2**15
    by_column = np.ascontiguousarray((dist.astype(np.int16) if small else dist).T)   # b x n
    arcs = setup.out_arcs
    tail, head = topology.src[arcs], topology.dst[arcs]
    weight = setup.weight[arcs][None, :].astype(by_column.dtype)
    forwards = setup.relay[head][None, :]
    shift = max(1, int(np.diff(setup.indptr).max(initial=1)).bit_length())
    table = np.zeros(n * b, dtype=np.int64)
    pools, base = [], 0
    for c0 in range(0, b, _COLUMNS):
        c1 = min(b, c0 + _COLUMNS)
        rows = by_column[c0:c1]
        at_tail, at_head = rows[:, tail], rows[:, head]
        good = (at_head == at_tail - weight) & (forwards | (at_head == 0)) & (at_tail > 0)
        column, row = np.nonzero(good)              # by column, then by out-arc order
        del good, at_tail, at_head
        key = tail[row].astype(np.int64) * b + (c0 + column)
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        table[key[starts]] = ((base + starts) << shift) | np.diff(np.r_[starts, key.size])
        pools.append(arcs[row])
        base += key.size
    pool = np.concatenate(pools) if pools else np.zeros(0, dtype=np.int64)
    return table, pool, shift


def _walk(topology, setup: _Setup, dist, here, col, flow_id, seed, hops, load=None, flow_bytes=None, out=None,
          pos=None) -> None:
    """Move every flow (all reachable, not at their destination, ``hops`` arcs from it) hop by hop along
    one hashed shortest-path next hop: ``load`` (optional) gets its bytes on every arc it takes, ``out[pos + hop]`` (optional) the
    arc it takes at each hop.

    The next hops of a flow depend only on where it is and where it goes, so they come from a table per
    (node, destination) (``_next_hop_table``), and each flow picks one of its group's by the hash: the
    same pick as examining every flow's out-arcs, without a flows x degree matrix. Only flows with more
    than one next hop are hashed (the pick of one is that one)."""
    m = topology.num_arcs
    b = dist.shape[1]
    table, pool, shift = _next_hop_table(topology, setup, dist)
    low = (1 << shift) - 1
    salt = np.uint64(seed) * np.uint64(0x100000001B3)
    key = here.astype(np.int64) * b + col
    hop = 0
    while key.size:
        entry = table[key]
        pick = entry >> shift
        choices = entry & low
        multi = np.flatnonzero(choices > 1)
        if multi.size:
            hashed = (salt ^ (flow_id[multi] << np.uint64(8))) ^ np.uint64(hop)
            pick[multi] += (_mix(hashed) % choices[multi].astype(np.uint64)).astype(np.int64)
        chosen = pool[pick]
        if load is not None:
            load += np.bincount(chosen, weights=flow_bytes, minlength=m)
        if out is not None:
            out[pos + hop] = chosen
        key = topology.dst[chosen] * b + col
        still = hops > hop + 1
        if not still.all():
            key, col, flow_id, hops = key[still], col[still], flow_id[still], hops[still]
            if load is not None:
                flow_bytes = flow_bytes[still]
            if out is not None:
                pos = pos[still]
        hop += 1
