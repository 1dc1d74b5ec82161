"""``ecmp``: fractional equal-cost multipath on any topology.

Routing semantics (shared with ``clos``, ``railx`` and ``ecmp-hash``): paths are shortest in links
(hops); at every node, the traffic for a destination splits equally over the node's out-arcs that lie on
a shortest path to it (per next-hop link, as a switch's ECMP group does; parallel links are separate next
hops). GPUs are endpoints and never relay other GPUs' traffic; where a collective library forwards
through a peer GPU (NCCL's PXN), the traffic model says so explicitly (``traffic.apply_pxn``).

Direct-connect fabrics (RailX, ``Layout.gpus_relay``), whose chips do relay, count hops by level: a
path is shorter if it crosses fewer links between nodes, and links inside a node only break ties. Their
routing tables are computed on the node graph; counting a hop inside a node like a circuit between
nodes would send traffic on two-circuit detours to save one local hop. In the arrays this is an arc
weight (``arc_weights``): 1 inside a node, ``num_nodes`` between nodes, more than any path's local hops.

Algorithm, per block of destinations at once (``N x B`` dense matrices, one sparse adjacency per arc
weight): a level-synchronous search towards the destinations (Dial's buckets, one per distance that
occurs) gives each node its distance and its number of shortest-path out-arcs; then flow is pushed from
the farthest level inwards, one sparse matrix product per level and weight; finally each arc's load is
the sum over destinations of the flow its tail sends on each shortest-path arc. Cost: about
``(2 * levels + 2) * arcs * destinations`` multiply-adds (``search_ops`` counts them per arc weight), with
no per-flow or per-path Python loop.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from ..errors import EngineRefused, Refusal
from ..topology import KIND, Topology
from .engine import Routed
from .traffic import Demand

# dense working set per destination block: about 6 matrices of N x B float64/float32/int32
_BLOCK_BUDGET_BYTES = 320 * 2**20

# The search both ECMP engines run (this one and ``ecmp-hash``) costs about ``search_ops`` multiply-adds;
# past this many (several minutes at the rate ``benchmarks/`` measures, docs/performance.md) they refuse
# before starting, with the estimate. The closed forms (``clos``, ``railx``) have no such cost.
MAX_SEARCH_OPS = 200_000_000_000
MEASURED_OPS_PER_S = 5e8  # multiply-adds per second on the benchmark machine (docs/performance.md)


def relays(topology: Topology) -> np.ndarray:
    """Nodes that forward traffic for others: everything but GPUs, except in direct-connect fabrics
    (RailX) whose chips forward by design."""
    return np.isin(topology.kind, [KIND[kind] for kind in topology.layout.relay_kinds])


def arc_weights(topology: Topology) -> np.ndarray:
    """Length of each arc in the shortest-path sense: 1, except that in direct-connect fabrics an arc
    between two nodes (servers) weighs ``num_nodes``, so that fewer inter-node hops always win."""
    weight = np.ones(topology.num_arcs, dtype=np.int64)
    if topology.layout.gpus_relay:
        weight[topology.server[topology.src] != topology.server[topology.dst]] = topology.num_nodes
    return weight


@dataclass
class RoutingGraph:
    """The routing view of a topology: usable arcs, their weights, one adjacency per weight."""

    num_nodes: int
    arcs: np.ndarray          # ids of the usable arcs
    weight: np.ndarray        # per usable arc
    relay: np.ndarray         # per node
    by_weight: list           # (weight, A, A^T) with A[u, v] = number of usable arcs u -> v of that weight


def routing_graph(topology: Topology, arc_mask: np.ndarray | None = None) -> RoutingGraph:
    import scipy.sparse as sp  # lazily: loading a spec or the CLI needs no scipy
    n = topology.num_nodes
    arcs = np.arange(topology.num_arcs) if arc_mask is None else np.flatnonzero(arc_mask)
    weight = arc_weights(topology)[arcs]
    src, dst = topology.src[arcs], topology.dst[arcs]
    by_weight = []
    for w in np.unique(weight).tolist():
        pick = weight == w
        adj = sp.csr_matrix((np.ones(int(pick.sum()), dtype=np.float32), (src[pick], dst[pick])), shape=(n, n))
        by_weight.append((int(w), adj, adj.T.tocsr()))  # CSR products are much faster than CSC ones
    return RoutingGraph(n, arcs, weight, relays(topology), by_weight)


def distances_to(graph: RoutingGraph, targets: np.ndarray):
    """Weighted distance from every node to each target (``N x B`` int32, -1 unreachable), the number of
    each node's out-arcs on a shortest path to the target (``N x B`` float32), and the distances that
    occur, ascending. Only nodes marked ``relay`` forward traffic (besides the target itself)."""
    n, b = graph.num_nodes, targets.size
    dist = np.full((n, b), -1, dtype=np.int32)
    outdeg = np.zeros((n, b), dtype=np.float32)
    dist[targets, np.arange(b)] = 0
    levels = [0]
    occurs = {0}
    candidates = sorted({w for w, _, _ in graph.by_weight})
    seen = set(candidates)
    while candidates:
        level = heapq.heappop(candidates)
        reach = None
        for w, adj, _ in graph.by_weight:
            if level - w in occurs:
                frontier = dist == level - w
                if level - w:
                    frontier &= graph.relay[:, None]
                part = adj @ frontier.astype(np.float32)  # arcs from each node into that level
                reach = part if reach is None else reach + part
        if reach is None:
            continue
        new = (reach > 0) & (dist < 0)
        if not new.any():
            continue
        dist[new] = level
        outdeg[new] = reach[new]
        levels.append(level)
        occurs.add(level)
        for w, _, _ in graph.by_weight:
            if level + w not in seen:
                seen.add(level + w)
                heapq.heappush(candidates, level + w)
    return dist, outdeg, levels


def push(graph: RoutingGraph, x: np.ndarray, dist: np.ndarray, outdeg: np.ndarray, levels: list):
    """Push the injected flow ``x`` (``N x B``, updated in place to the flow through each node) from the
    farthest level inwards, one sparse product per level and weight. Returns ``(share, inverse,
    forwards)``: the flow each node sends on each of its shortest-path out-arcs, ``1 / outdeg``, and
    which nodes may be a next hop (relays, and the destination itself)."""
    inverse = np.divide(1.0, outdeg.astype(np.float64), out=np.zeros(outdeg.shape), where=outdeg > 0)
    forwards = graph.relay[:, None] | (dist == 0)
    occurs = set(levels)
    for level in reversed(levels[1:]):
        share = x * inverse
        share *= dist == level
        for w, _, adj_t in graph.by_weight:
            if level - w in occurs:
                received = adj_t @ share
                received *= (dist == level - w) & forwards
                x += received
    return x * inverse, inverse, forwards


def search_arc_visits(topology: Topology, arc_mask: np.ndarray | None = None) -> tuple[int, int]:
    """Arcs the search towards one destination multiplies through (one sparse product per weight each
    time): ``(distances, push)``, for ``distances_to`` and for pushing the flow back in ``route``. Replays
    both loops on the distances one probe search towards one GPU meets; taken for every destination (the
    fabrics topoplan builds are symmetric)."""
    global _probed
    mask_key = None if arc_mask is None else hash(np.asarray(arc_mask, dtype=bool).tobytes())
    if _probed is None or _probed[0] is not topology or _probed[1] != mask_key:
        graph = routing_graph(topology, arc_mask)
        probe = topology.gpus[:1]
        levels = set([0] if probe.size == 0 else distances_to(graph, probe)[2])
        arcs_of_weight = {w: adj.nnz for w, adj, _ in graph.by_weight}
        distances = 0
        occurs, candidates = {0}, sorted(arcs_of_weight)
        seen = set(candidates)
        while candidates:  # the order and the products of ``distances_to``
            level = heapq.heappop(candidates)
            distances += sum(arcs for w, arcs in arcs_of_weight.items() if level - w in occurs)
            if level in levels:
                occurs.add(level)
                for w in arcs_of_weight:
                    if level + w not in seen:
                        seen.add(level + w)
                        heapq.heappush(candidates, level + w)
        push = sum(arcs for level in levels - {0} for w, arcs in arcs_of_weight.items() if level - w in levels)
        _probed = (topology, mask_key, (int(distances), int(push)))
    return _probed[2]


# (topology, arc-mask hash, visits) of the last probe: the pipeline routes many phases over one topology
_probed: tuple | None = None


def search_ops(topology: Topology, destinations: int, arc_mask: np.ndarray | None = None,
               push: bool = True) -> int:
    """Multiply-adds of routing to ``destinations`` destinations: per destination, the arc visits of the
    search and of the push (``search_arc_visits``) and two passes over the arcs for the loads (module
    docstring); the search's visits alone for the distances (``ecmp-hash``)."""
    distances, pushed = search_arc_visits(topology, arc_mask)
    arcs = topology.num_arcs if arc_mask is None else int(np.count_nonzero(arc_mask))
    return (distances + pushed + 2 * arcs if push else distances) * destinations


def too_much_search(engine: str, ops: int) -> Refusal | None:
    """The refusal of a search of ``ops`` multiply-adds past ``MAX_SEARCH_OPS`` (None: within it)."""
    if ops <= MAX_SEARCH_OPS:
        return None
    minutes = ops / MEASURED_OPS_PER_S / 60
    return Refusal(engine, f"the {engine} engine would search about {ops:.2g} multiply-adds (about {minutes:,.0f} "
                   f"min at {MEASURED_OPS_PER_S:.0e}/s; the limit is {MAX_SEARCH_OPS:.0e}): the closed-form "
                   "engines do not cover this topology (intact folded Clos and full-mesh RailX only); "
                   "route fewer GPUs, or choose a fabric they cover")


def _injection(demand: Demand, targets: np.ndarray, n: int, a2a_group_of: np.ndarray | None) -> np.ndarray:
    """``N x B`` bytes injected at each node for each target of the block."""
    b = targets.size
    x = np.zeros((n, b))
    col_of = np.full(n, -1, dtype=np.int64)
    col_of[targets] = np.arange(b)
    keep = (demand.src != demand.dst) & (col_of[demand.dst] >= 0)
    if keep.any():
        flat = demand.src[keep] * b + col_of[demand.dst[keep]]
        x += np.bincount(flat, weights=demand.bytes[keep], minlength=n * b).reshape(n, b)
    if a2a_group_of is not None:
        rows = a2a_group_of[targets]
        for group in np.unique(rows[rows >= 0]).tolist():
            cols = np.flatnonzero(rows == group)
            x[np.ix_(demand.a2a_members[group], cols)] += demand.a2a_bytes
        inside = rows >= 0
        x[targets[inside], np.flatnonzero(inside)] -= demand.a2a_bytes  # no traffic to oneself
    return x


def route(topology: Topology, demand: Demand, arc_mask: np.ndarray | None = None) -> Routed:
    """Bytes per arc under fractional ECMP. ``arc_mask`` (optional) marks the arcs that are up."""
    n, m = topology.num_nodes, topology.num_arcs
    load = np.zeros(m)
    targets_all = demand.destinations()
    if targets_all.size == 0:
        return Routed(load)
    refused = too_much_search("ecmp", search_ops(topology, targets_all.size, arc_mask))
    if refused is not None:
        raise EngineRefused(refused)
    graph = routing_graph(topology, arc_mask)
    arcs = graph.arcs
    src, dst = topology.src[arcs], topology.dst[arcs]
    a2a_group_of = None
    if demand.has_a2a:
        a2a_group_of = np.full(n, -1, dtype=np.int64)
        a2a_group_of[demand.a2a_members] = np.arange(demand.a2a_members.shape[0])[:, None]
    block = max(1, min(targets_all.size, _BLOCK_BUDGET_BYTES // (n * 48)))
    routed = Routed(load)
    arc_chunk = max(1, _BLOCK_BUDGET_BYTES // (block * 16))
    for start in range(0, targets_all.size, block):
        targets = targets_all[start:start + block]
        x = _injection(demand, targets, n, a2a_group_of)
        dist, outdeg, levels = distances_to(graph, targets)
        lost = (dist < 0) & (x > 0)
        if lost.any():
            routed.unreachable_bytes += float(x[lost].sum())
            routed.unreachable_pairs += _count_lost_pairs(demand, targets, dist, a2a_group_of)
            x[lost] = 0.0
        share, _inverse, forwards = push(graph, x, dist, outdeg, levels)
        for lo in range(0, arcs.size, arc_chunk):
            s, d = src[lo:lo + arc_chunk], dst[lo:lo + arc_chunk]
            on_path = (dist[d] == dist[s] - graph.weight[lo:lo + arc_chunk, None]) & forwards[d]
            load[arcs[lo:lo + arc_chunk]] += np.einsum("ij,ij->i", share[s], on_path)
    return routed


def _count_lost_pairs(demand: Demand, targets: np.ndarray, dist: np.ndarray, a2a_group_of) -> int:
    """Flows with bytes and no path (a flow of zero bytes needs no path, as in every engine)."""
    col_of = np.full(dist.shape[0], -1, dtype=np.int64)
    col_of[targets] = np.arange(targets.size)
    keep = (demand.src != demand.dst) & (col_of[demand.dst] >= 0) & (demand.bytes > 0)
    count = int((dist[demand.src[keep], col_of[demand.dst[keep]]] < 0).sum())
    if a2a_group_of is not None and demand.a2a_bytes > 0:
        rows = a2a_group_of[targets]
        inside = np.flatnonzero(rows >= 0)
        if inside.size:
            members = demand.a2a_members[rows[inside]]
            count += int((dist[members, inside[:, None]] < 0).sum())
    return count
