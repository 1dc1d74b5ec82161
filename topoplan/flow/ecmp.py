"""``ecmp``: fractional equal-cost multipath on any topology.

Routing semantics (shared with ``clos`` and ``ecmp-hash``): paths are shortest in links (hops); at every
node, the traffic for a destination splits equally over the node's out-arcs that lie on a shortest path
to it (per next-hop link, as a switch's ECMP group does; parallel links are separate next hops).
GPUs are endpoints and never relay other GPUs' traffic; where a collective library forwards through a
peer GPU (NCCL's PXN), the traffic model says so explicitly (``traffic.apply_pxn``).

Algorithm, per block of destinations at once (``N x B`` dense matrices, ``A`` the sparse arc-count
adjacency): a level-synchronous BFS towards the destinations gives each node its distance and its
number of shortest-path out-arcs; then flow is pushed from the farthest level inwards, one sparse
matrix product per level; finally each arc's load is the sum over destinations of the flow its tail
sends on each shortest-path arc. Cost: about ``(2 * levels + 2) * arcs * destinations`` multiply-adds,
with no per-flow or per-path Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..topology import KIND, Topology
from .traffic import Demand

# dense working set per destination block: about 5 matrices of N x B float64/float32
_BLOCK_BUDGET_BYTES = 320 * 2**20


@dataclass
class Routed:
    """Bytes per arc, and what could not be routed."""

    load: np.ndarray
    unreachable_pairs: int = 0
    unreachable_bytes: float = 0.0


def relays(topology: Topology) -> np.ndarray:
    """Nodes that forward traffic for others: everything but GPUs, except in direct-connect fabrics
    (RailX) whose chips forward by design."""
    if topology.hierarchy.get("chips_relay"):
        return np.ones(topology.num_nodes, dtype=bool)
    return topology.kind != KIND["gpu"]


def adjacency(topology: Topology, arc_mask: np.ndarray | None = None) -> sp.csr_matrix:
    """``A[u, v]`` = number of (usable) arcs from u to v."""
    src, dst = topology.src, topology.dst
    if arc_mask is not None:
        src, dst = src[arc_mask], dst[arc_mask]
    n = topology.num_nodes
    return sp.csr_matrix((np.ones(src.size, dtype=np.float32), (src, dst)), shape=(n, n))


def distances_to(adj: sp.csr_matrix, targets: np.ndarray, relay: np.ndarray):
    """Hop distance from every node to each target (``N x B`` int16, -1 unreachable) and, for each node,
    the number of its out-arcs on a shortest path to the target (``N x B`` float32). Only nodes marked
    in ``relay`` forward traffic (besides the target itself)."""
    n, b = adj.shape[0], targets.size
    dist = np.full((n, b), -1, dtype=np.int16)
    outdeg = np.zeros((n, b), dtype=np.float32)
    cols = np.arange(b)
    dist[targets, cols] = 0
    frontier = np.zeros((n, b), dtype=np.float32)
    frontier[targets, cols] = 1.0
    level = 0
    while True:
        level += 1
        reach = adj @ frontier  # arcs from each node into the previous level
        new = (reach > 0) & (dist < 0)
        if not new.any():
            return dist, outdeg
        dist[new] = level
        outdeg[new] = reach[new]
        frontier = (new & relay[:, None]).astype(np.float32)


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
        inside = rows >= 0
        members = demand.a2a_members[rows[inside]]          # (b', p)
        cols = np.flatnonzero(inside)
        flat = (members * b + cols[:, None]).ravel()
        x += np.bincount(flat, minlength=n * b).reshape(n, b) * demand.a2a_bytes
        x[targets[inside], cols] -= demand.a2a_bytes      # no traffic to oneself
    return x


def route(topology: Topology, demand: Demand, arc_mask: np.ndarray | None = None) -> Routed:
    """Bytes per arc under fractional ECMP. ``arc_mask`` (optional) marks the arcs that are up."""
    n, m = topology.num_nodes, topology.num_arcs
    load = np.zeros(m)
    targets_all = demand.destinations()
    if targets_all.size == 0:
        return Routed(load)
    adj = adjacency(topology, arc_mask)
    relay = relays(topology)
    usable = np.ones(m, dtype=bool) if arc_mask is None else arc_mask
    arcs = np.flatnonzero(usable)
    src, dst = topology.src[arcs], topology.dst[arcs]
    a2a_group_of = None
    if demand.has_a2a:
        a2a_group_of = np.full(n, -1, dtype=np.int64)
        a2a_group_of[demand.a2a_members] = np.arange(demand.a2a_members.shape[0])[:, None]
    block = max(1, min(targets_all.size, _BLOCK_BUDGET_BYTES // (n * 40)))
    routed = Routed(load)
    adj_t = adj.T.tocsr()  # CSR products are much faster than the CSC ones a transpose view gives
    arc_chunk = max(1, _BLOCK_BUDGET_BYTES // (block * 12))
    for start in range(0, targets_all.size, block):
        targets = targets_all[start:start + block]
        x = _injection(demand, targets, n, a2a_group_of)
        dist, outdeg = distances_to(adj, targets, relay)
        lost = (dist < 0) & (x > 0)
        if lost.any():
            routed.unreachable_bytes += float(x[lost].sum())
            routed.unreachable_pairs += _count_lost_pairs(demand, targets, dist, a2a_group_of)
            x[lost] = 0.0
        inverse = np.divide(1.0, outdeg.astype(np.float64), out=np.zeros(outdeg.shape), where=outdeg > 0)
        forwards = relay[:, None] | (dist == 0)  # a next hop must relay, or be the destination
        for level in range(int(dist.max()), 0, -1):
            share = x * inverse
            share *= dist == level
            received = adj_t @ share
            received *= (dist == level - 1) & forwards
            x += received
        share = x * inverse
        for lo in range(0, arcs.size, arc_chunk):
            s, d = src[lo:lo + arc_chunk], dst[lo:lo + arc_chunk]
            on_path = (dist[d] == dist[s] - 1) & forwards[d]
            load[arcs[lo:lo + arc_chunk]] += np.einsum("ij,ij->i", share[s], on_path)
    return routed


def _count_lost_pairs(demand: Demand, targets: np.ndarray, dist: np.ndarray, a2a_group_of) -> int:
    col_of = np.full(dist.shape[0], -1, dtype=np.int64)
    col_of[targets] = np.arange(targets.size)
    keep = (demand.src != demand.dst) & (col_of[demand.dst] >= 0)
    count = int((dist[demand.src[keep], col_of[demand.dst[keep]]] < 0).sum())
    if a2a_group_of is not None:
        rows = a2a_group_of[targets]
        inside = np.flatnonzero(rows >= 0)
        if inside.size:
            members = demand.a2a_members[rows[inside]]
            count += int((dist[members, inside[:, None]] < 0).sum())
    return count
