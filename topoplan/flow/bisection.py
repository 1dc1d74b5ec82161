"""Bisection bandwidth: the least capacity crossing a cut that splits the GPUs in two equal halves.

* Where the generator knows it (folded Clos), the analytic value from the topology's layout.
* Otherwise the smallest cut found over structural cuts (halves by each group id: pod, row, column,
  rail, server, plane) and, on direct-connect fabrics (every link joins two GPUs), a Kernighan-Lin
  partition of the server graph (networkx), refined from the best structural cut and from a seeded
  random start. Any cut found is an upper bound on the true minimum, and is labelled so.

Also the throughput under a random bisection permutation: the GPUs split at random into halves, each
GPU sends to a random partner in the other half (both ways at once), routed with the design's engine;
reported as Gb/s per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from ..topology import GROUPS, KIND, Topology
from .traffic import Demand


@dataclass
class Bisection:
    gbps: float
    method: str
    permutation_gbps_per_gpu: float | None = None
    permutation_note: str = ""  # why the permutation throughput is missing, when it is


def cut_capacity(topology: Topology, side: np.ndarray) -> float:
    """Gb/s from side True to side False (one direction)."""
    crossing = side[topology.src] & ~side[topology.dst]
    return float(topology.capacity_gbps[crossing].sum())


def _structural_cuts(topology: Topology):
    gpus = topology.gpus
    total = np.bincount(topology.src, weights=topology.capacity_gbps, minlength=topology.num_nodes)
    not_gpu = topology.kind != KIND["gpu"]
    for group in GROUPS:
        ids = getattr(topology, group)
        gpu_ids = ids[gpus]
        if gpu_ids.min() < 0 or np.unique(gpu_ids).size < 2:
            continue
        order = np.argsort(gpu_ids, kind="stable")
        half = np.zeros(topology.num_nodes, dtype=bool)
        half[gpus[order[: gpus.size // 2]]] = True
        # other nodes join the side where their group sits, or (three passes) the side they link to more
        threshold = gpu_ids[order[gpus.size // 2 - 1]]
        half[(ids >= 0) & not_gpu] = ids[(ids >= 0) & not_gpu] <= threshold
        loose = np.flatnonzero((ids < 0) & not_gpu)
        for _ in range(3 if loose.size else 0):
            toward = np.bincount(topology.src, weights=topology.capacity_gbps * half[topology.dst],
                                 minlength=topology.num_nodes)
            half[loose] = toward[loose] * 2 >= total[loose]
        yield group, half


# Kernighan-Lin in networkx costs about n^2 per pass; beyond this many servers it is skipped
MAX_PARTITION_SERVERS = 4096


def _partition_cuts(topology: Topology, starts: list) -> list | str:
    """Kernighan-Lin bisections of the server graph of a direct-connect fabric, one per start (a node
    side array, or None for a seeded random start), as sides per node; or why none was tried."""
    gpus = topology.gpus
    if topology.num_arcs == 0 or (topology.kind[topology.src] != KIND["gpu"]).any():
        return "the fabric has switches"
    server = topology.server[gpus]
    per_server = np.bincount(server)
    used = np.flatnonzero(per_server)
    if used.size % 2 or per_server[used].min() != per_server[used].max():
        return "the servers cannot be split evenly"
    if used.size > MAX_PARTITION_SERVERS:
        return f"no Kernighan-Lin partition beyond {MAX_PARTITION_SERVERS:,} servers"
    a, b = topology.server[topology.src], topology.server[topology.dst]
    one_way = a < b
    pairs, which = np.unique(a[one_way] * (used.max() + 1) + b[one_way], return_inverse=True)
    weight = np.bincount(which.ravel(), weights=topology.capacity_gbps[one_way])
    graph = nx.Graph()
    graph.add_nodes_from(used.tolist())
    graph.add_weighted_edges_from(zip((pairs // (used.max() + 1)).tolist(), (pairs % (used.max() + 1)).tolist(),
                                      weight.tolist()))
    sides = []
    for start in starts:
        partition = None
        if start is not None:
            first = set(np.unique(server[start[gpus]]).tolist())
            if len(first) != used.size // 2:
                continue
            partition = (first, set(used.tolist()) - first)
        half, _other = nx.community.kernighan_lin_bisection(graph, partition, max_iter=10, weight="weight", seed=0)
        side = np.zeros(topology.num_nodes, dtype=bool)
        side[gpus] = np.isin(server, list(half))
        sides.append(side)
    return sides


def bisection(topology: Topology) -> Bisection:
    layout = topology.layout
    if layout.bisection_gbps is not None:
        return Bisection(float(layout.bisection_gbps), layout.bisection_method or "analytic")
    best, how, best_side = None, "", None
    for group, side in _structural_cuts(topology):
        value = min(cut_capacity(topology, side), cut_capacity(topology, ~side))
        if best is None or value < best:
            best, how, best_side = value, group, side
    if best is None:
        return Bisection(0.0, "not computed: no structural cut splits the GPUs")
    method = f"upper bound: smallest structural cut found (halves by {how})"
    partitions = _partition_cuts(topology, [best_side, None])
    if isinstance(partitions, str):
        if partitions.startswith("no Kernighan-Lin"):
            method += f"; {partitions}"
        return Bisection(best, method)
    for side in partitions:
        value = min(cut_capacity(topology, side), cut_capacity(topology, ~side))
        if value < best:
            best, method = value, "upper bound: smallest cut found, by a Kernighan-Lin partition of the servers"
    return Bisection(best, method)


def permutation_throughput(topology: Topology, engine: str = "ecmp", seed: int = 0) -> float | None:
    """Gb/s per GPU under a random bisection permutation (None if some pair is unreachable)."""
    from . import route

    gpus = topology.gpus
    if gpus.size < 2:
        return None
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(gpus)
    half = gpus.size // 2
    a, b = shuffled[:half], shuffled[half:2 * half]
    size = 1e9
    demand = Demand(np.concatenate([a, b]), np.concatenate([b, a]), size)
    routed = route(topology, demand, engine)
    if routed.unreachable_pairs:
        return None
    seconds = (routed.load / (topology.capacity_gbps * 1e9 / 8)).max()
    return size * 8 / 1e9 / seconds


def degraded_bisection(topology: Topology, arc_mask: np.ndarray, healthy_gbps: float) -> float:
    """Bisection with the arcs outside ``arc_mask`` down: the least of the healthy value and the cuts over
    the surviving arcs of every structural half of the GPUs (``_structural_cuts``) at every tier: switches
    below the tier go with the side most of the tier below them is on, switches at or above it join either
    side, so the cut crosses the host links, the leaf uplinks or the spine uplinks of the other half.
    Removing links never widens a cut, so this is an upper bound, exact where the healthy value is and
    the failures hit the halves evenly (one of ``S`` spines of a non-blocking two-tier fat-tree:
    ``(S - 1) / S`` of healthy)."""
    up = np.asarray(arc_mask, dtype=bool)
    failed = np.flatnonzero(~up)
    src, dst, capacity = topology.src[failed], topology.dst[failed], topology.capacity_gbps[failed]
    best = float(healthy_gbps)
    for healthy_cut, half in _tier_cuts(topology):
        best = min(best, healthy_cut - float(capacity[half[src] & ~half[dst]].sum()))
    return best


_CUTS: dict = {}


def _tier_cuts(topology: Topology) -> list:
    """The cuts ``degraded_bisection`` tries, as (healthy capacity, the nodes of the sending half); they
    depend on the topology only, so a failure study computes them once (the last topology is kept)."""
    cached = _CUTS.get(id(topology))
    if cached is not None and cached[0] is topology:
        return cached[1]
    src, dst = topology.src, topology.dst
    switch = topology.kind == KIND["switch"]
    tiers = int(topology.tier[switch].max(initial=-1)) + 1
    cuts = []
    for _group, side in _structural_cuts(topology):
        side = side.copy()
        for top in range(tiers + 1):
            level = np.where(switch, topology.tier, -1)  # hosts: -1
            for tier in range(top):
                below = level[dst] == tier - 1
                toward = np.bincount(src[below], weights=topology.capacity_gbps[below] * side[dst[below]],
                                     minlength=topology.num_nodes)
                total = np.bincount(src[below], weights=topology.capacity_gbps[below], minlength=topology.num_nodes)
                these = switch & (topology.tier == tier)
                side[these] = toward[these] * 2 >= total[these]
            for upper_side in (True, False):
                side[switch & (topology.tier >= top)] = upper_side
                for half in (side, ~side):
                    cuts.append((float(topology.capacity_gbps[half[src] & ~half[dst]].sum()), half.copy()))
    _CUTS.clear()
    _CUTS[id(topology)] = (topology, cuts)
    return cuts
