"""``clos-failed``: ECMP on a folded Clos with failed network links or switches, by destination classes.

It gives exactly the loads of the generic ``ecmp`` engine (same semantics, see ``ecmp.py``) on the
fabrics the ``clos`` closed form accepts (``clos.py``: GPU - NIC - leaf - spine - core trees, one NIC port
per plane) when some network links or switches are down (``arc_mask``), in a small fraction of its time:

* Traffic between GPUs of one server over NVLink, or through a NIC they share, never reaches the
  network, and a flow none of whose healthy ECMP paths uses a failed arc keeps those paths and their
  split (distances only grow when arcs fail, and the nodes on its paths keep theirs): both are placed
  as ``clos`` places them. Under a few failures that is most of the traffic.
* Every other flow leaves its GPU through its NIC. In the network, what ECMP does with a flow depends
  only on the distances to its destination, and every switch's distance to a GPU is its distance to the
  leaves the GPU's NIC is attached to (by live links) plus a constant. So destinations whose NICs hang
  off the same live leaves (one per plane) form one *class*, routed by one search on the switch graph:
  a few hundred searches on a 16k-GPU fabric instead of 16k.
* A NIC with live ports on two leaves forwards between them (``ecmp`` lets NICs relay): such a bridge is
  a path of two hops leaf -> NIC -> leaf, an arc of weight 2 in the switch graph, whose load is spread
  over the NICs that make it. Under one failure it is never on a shortest path; under several it can be.
* A source NIC splits its flow over its live ports on shortest paths, as ECMP does; where a class is
  reached by several leaves (one per plane), how much of each flow arrives through each of them is the
  probability of ending there from where it entered, one backward pass per plane.

Cost per block of ``B`` classes: about ``levels * (switch arcs) * B`` multiply-adds for the search and as
much for the push, plus a pass over the flows; no per-flow Python loop. Tests hold it equal to ``ecmp``
on random failures of links and switches over every tree fabric of the engine invariants.
"""

from __future__ import annotations

import numpy as np

from ..errors import EngineRefused, Refusal
from ..topology import KIND, Topology
from . import clos
from .ecmp import RoutingGraph, distances_to, push
from .engine import Routed
from .traffic import Demand

_HOST = (clos.NVL_UP, clos.NVL_DOWN, clos.PCIE_UP, clos.PCIE_DOWN)
_BLOCK_BUDGET_BYTES = 256 * 2**20


def refusal(topology: Topology, arc_mask: np.ndarray | None) -> Refusal | None:
    """None when this engine gives ``ecmp``'s loads for ``topology`` under ``arc_mask``, else why not."""
    found = clos.index_of(topology)
    if isinstance(found, str):
        return Refusal("clos-failed", f"the clos-failed engine does not apply: {found}")
    if arc_mask is not None:
        mask = np.asarray(arc_mask, dtype=bool)
        if mask.shape != (topology.num_arcs,):
            return Refusal("clos-failed", "the arc mask does not have one entry per arc")
        host = np.isin(found.category, _HOST)
        if not mask[host].all():
            return Refusal("clos-failed", "the clos-failed engine takes failed network links and switches only, "
                           "not links inside a server")
    return None


def route(topology: Topology, demand: Demand, arc_mask: np.ndarray | None = None) -> Routed:
    ix = clos.index_of(topology)
    refused = refusal(topology, arc_mask)
    if refused is not None:
        raise EngineRefused(refused)
    up = np.ones(topology.num_arcs, dtype=bool) if arc_mask is None else np.asarray(arc_mask, dtype=bool)
    failed = _FailedArcs(topology, ix, up)
    agg, pod_out, pod_in = clos.new_aggregates(topology, ix)
    lost_pairs, lost_bytes = 0, 0.0
    # all-to-all groups none of whose members is near a failure keep the closed form's aggregation; the
    # others are expanded into pairs
    src, dst, size = demand.src, demand.dst, demand.bytes
    if demand.has_a2a:
        members = demand.a2a_members
        near = failed.near(ix.nic_of_gpu[members]).any(axis=1)
        if not near.all():
            lost_pairs, lost_bytes = clos._add_all_to_all(topology, ix, members[~near], demand.a2a_bytes, agg,
                                                          pod_out, pod_in)
        if near.any():
            src, dst, size = Demand(src, dst, size, members[near], demand.a2a_bytes).pairs()
    keep = (src != dst) & (size > 0)
    src, dst, size = src[keep], dst[keep], size[keep]
    nic_a, nic_b = ix.nic_of_gpu[src], ix.nic_of_gpu[dst]
    # flows that stay inside a server (NVLink, or a shared NIC), and flows whose healthy ECMP paths cross
    # no failed arc, are placed as the closed form places them: distances to a destination only grow when
    # arcs fail, and the nodes of such a flow's paths keep theirs, so its paths and split do not change
    inside = (ix.nvlink[src] & (topology.server[src] == topology.server[dst])) | (nic_a == nic_b)
    hit = ~inside & failed.crossed_by(nic_a, nic_b)
    pairs, bytes_ = clos._add_pairs(topology, ix, src[~hit], dst[~hit], size[~hit], agg, pod_out, pod_in)
    lost_pairs, lost_bytes = lost_pairs + pairs, lost_bytes + bytes_
    src, dst, size, nic_a, nic_b = (a[hit] for a in (src, dst, size, nic_a, nic_b))

    network = np.zeros(topology.num_arcs)
    reached = np.zeros(src.size, dtype=bool)
    if src.size:
        reached = _switch_graph(topology, ix, up).route(nic_a, nic_b, size, network)
    n = topology.num_nodes
    agg["pcie_up"] += np.bincount(src[reached], size[reached], n)
    agg["pcie_down"] += np.bincount(dst[reached], size[reached], n)
    load = clos.arc_loads(topology, ix, agg, pod_out, pod_in) + network
    lost = ~reached & (size > 0)
    return Routed(load, unreachable_pairs=lost_pairs + int(lost.sum()),
                  unreachable_bytes=lost_bytes + float(size[lost].sum()))


_LAST_GRAPH: list = []


def _switch_graph(topology: Topology, ix: clos.ClosIndex, up: np.ndarray) -> "_SwitchGraph":
    """The live switch graph, kept for the last (topology, mask): a failure's collectives share it."""
    if _LAST_GRAPH and _LAST_GRAPH[0] is topology and np.array_equal(_LAST_GRAPH[1], up):
        return _LAST_GRAPH[2]
    graph = _SwitchGraph(topology, ix, up)
    _LAST_GRAPH[:] = [topology, up.copy(), graph]
    return graph


class _FailedArcs:
    """Where the failed arcs are, per plane: NICs with a failed port up (down), leaves with a failed
    up-arc (down-arc), and (plane, pod)s with a failed arc out of (into) their spines."""

    def __init__(self, topology: Topology, ix: clos.ClosIndex, up: np.ndarray):
        n, s, d, category, down = topology.num_nodes, topology.src, topology.dst, ix.category, ~up
        self.ix = ix
        self.port_up = np.zeros((ix.planes, n), dtype=bool)
        arcs = np.flatnonzero(down & (category == clos.NIC_UP))
        self.port_up[topology.plane[d[arcs]], s[arcs]] = True
        self.port_down = np.zeros((ix.planes, n), dtype=bool)
        arcs = np.flatnonzero(down & (category == clos.NIC_DOWN))
        self.port_down[topology.plane[s[arcs]], d[arcs]] = True
        self.leaf_up = np.zeros(n, dtype=bool)
        self.leaf_up[s[down & (category == clos.LEAF_UP)]] = True
        self.leaf_down = np.zeros(n, dtype=bool)
        self.leaf_down[d[down & (category == clos.LEAF_DOWN)]] = True
        self.pod_key = topology.plane.astype(np.int64) * ix.pods + topology.pod
        self.pod_up = np.zeros(ix.planes * ix.pods, dtype=bool)
        self.pod_up[self.pod_key[s[down & (category == clos.SPINE_UP)]]] = True
        self.pod_down = np.zeros(ix.planes * ix.pods, dtype=bool)
        self.pod_down[self.pod_key[d[down & (category == clos.SPINE_DOWN)]]] = True

    def crossed_by(self, nic_a: np.ndarray, nic_b: np.ndarray) -> np.ndarray:
        """Per network flow NIC ``nic_a`` -> NIC ``nic_b``: whether one of its healthy ECMP paths uses a
        failed arc. In plane p those paths take the NIC's port up, then (leaves differ) every up-arc of
        its leaf and every down-arc into the far leaf, then (pods differ) every up-arc of the spines of
        its pod and every down-arc into the spines of the far pod, then the far NIC's port down."""
        crosses = np.zeros(nic_a.shape, dtype=bool)
        for p in range(self.ix.planes):
            leaf_a, leaf_b = self.ix.leaf_of_nic[p, nic_a], self.ix.leaf_of_nic[p, nic_b]
            crosses |= self.port_up[p, nic_a] | self.port_down[p, nic_b]
            crosses |= (leaf_a != leaf_b) & (self.leaf_up[leaf_a] | self.leaf_down[leaf_b])
            pod_a, pod_b = self.pod_key[leaf_a], self.pod_key[leaf_b]
            crosses |= (pod_a != pod_b) & (self.pod_up[pod_a] | self.pod_down[pod_b])
        return crosses

    def near(self, nics: np.ndarray) -> np.ndarray:
        """Per NIC: whether a flow from or to it could cross a failed arc (its port, leaf or pod has one)."""
        near = np.zeros(nics.shape, dtype=bool)
        for p in range(self.ix.planes):
            leaf = self.ix.leaf_of_nic[p, nics]
            pod = self.pod_key[leaf]
            near |= self.port_up[p, nics] | self.port_down[p, nics] | self.leaf_up[leaf] | self.leaf_down[leaf]
            near |= self.pod_up[pod] | self.pod_down[pod]
        return near


class _SwitchGraph:
    """The live switch graph (switch arcs of weight 1, NIC bridges of weight 2) and the NICs' ports."""

    def __init__(self, topology: Topology, ix: clos.ClosIndex, up: np.ndarray):
        import scipy.sparse as sp
        self.topology, self.ix = topology, ix
        n = topology.num_nodes
        switches = np.flatnonzero(topology.kind == KIND["switch"])
        self.compact = np.full(n, -1, dtype=np.int64)
        self.compact[switches] = np.arange(switches.size)
        self.num_switches = switches.size
        category, s, d = ix.category, topology.src, topology.dst
        between = np.isin(category, (clos.LEAF_UP, clos.LEAF_DOWN, clos.SPINE_UP, clos.SPINE_DOWN)) & up
        self.switch_arcs = np.flatnonzero(between)
        # per plane and NIC: the arc up to its leaf and the arc down from it, -1 where that arc is down
        planes = ix.planes
        self.port_up = np.full((planes, n), -1, dtype=np.int64)
        self.port_down = np.full((planes, n), -1, dtype=np.int64)
        arcs = ix.arcs_of[clos.NIC_UP]
        live = arcs[up[arcs]]
        self.port_up[topology.plane[d[live]], s[live]] = live
        arcs = ix.arcs_of[clos.NIC_DOWN]
        live = arcs[up[arcs]]
        self.port_down[topology.plane[s[live]], d[live]] = live
        # bridges: leaf -> NIC -> other leaf, through a NIC with both of those arcs up
        bridge_in, bridge_out, bridge_from, bridge_to = [], [], [], []
        for p in range(planes):
            for q in range(planes):
                if p == q:
                    continue
                nics = np.flatnonzero((self.port_down[p] >= 0) & (self.port_up[q] >= 0))
                bridge_in.append(self.port_down[p, nics])
                bridge_out.append(self.port_up[q, nics])
                bridge_from.append(ix.leaf_of_nic[p, nics])
                bridge_to.append(ix.leaf_of_nic[q, nics])
        cat = (lambda parts: np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
        self.bridge_in, self.bridge_out = cat(bridge_in), cat(bridge_out)
        pair = self.compact[cat(bridge_from)] * self.num_switches + self.compact[cat(bridge_to)]
        self.bridge_keys, self.bridge_of_nic = np.unique(pair, return_inverse=True)
        self.bridge_count = np.bincount(self.bridge_of_nic, minlength=self.bridge_keys.size)
        # the arcs that carry load, by tail: parallel switch arcs once (``switch_pair`` maps each arc to its
        # (tail, head) pair), bridges once; as (weight, start of each switch's arcs, heads)
        ns = self.num_switches
        switch_keys = self.compact[s[self.switch_arcs]] * ns + self.compact[d[self.switch_arcs]]
        pairs, self.switch_pair = np.unique(switch_keys, return_inverse=True)
        self.out_arcs = []
        for weight, keys in ((1, pairs), (2, self.bridge_keys)):
            self.out_arcs.append((weight, np.searchsorted(keys // ns, np.arange(ns + 1)), keys % ns))
        self._sp = sp

    def _graph(self, sink_leaves: np.ndarray) -> RoutingGraph:
        """The routing graph with one sink per class (column of ``sink_leaves``: leaf per plane, -1 none):
        nodes are the switches, then the sinks; parallel arcs add up to one arc of that multiplicity."""
        sp = self._sp
        topology, ns = self.topology, self.num_switches
        total = ns + sink_leaves.shape[1]
        tails = [self.compact[topology.src[self.switch_arcs]]]
        heads = [self.compact[topology.dst[self.switch_arcs]]]
        for row in sink_leaves:
            has = np.flatnonzero(row >= 0)
            tails.append(self.compact[row[has]])
            heads.append(ns + has)
        tails, heads = np.concatenate(tails), np.concatenate(heads)
        arcs = [(1, tails, heads, np.ones(tails.size, dtype=np.float32))]
        if self.bridge_keys.size:
            arcs.append((2, self.bridge_keys // ns, self.bridge_keys % ns, self.bridge_count.astype(np.float32)))
        by_weight = []
        for weight, tails, heads, count in arcs:
            adj = sp.csr_matrix((count, (tails, heads)), shape=(total, total))
            by_weight.append((weight, adj, adj.T.tocsr()))
        relay = np.zeros(total, dtype=bool)
        relay[:ns] = True
        return RoutingGraph(total, np.zeros(0, dtype=np.int64), np.zeros(0), relay, by_weight)

    def route(self, nic_a: np.ndarray, nic_b: np.ndarray, size: np.ndarray, load: np.ndarray) -> np.ndarray:
        """Add the network loads of flows NIC ``nic_a`` -> NIC ``nic_b`` to ``load``; returns which flows
        have a path."""
        ix, ns = self.ix, self.num_switches
        attach = np.where(self.port_down >= 0, ix.leaf_of_nic, -1)  # (planes, N) live leaf of each NIC
        signature = attach[:, nic_b].T
        classes, class_of = np.unique(signature, axis=0, return_inverse=True)
        class_of = class_of.reshape(-1)
        reached = np.zeros(nic_a.size, dtype=bool)
        bridge_load = np.zeros(self.bridge_keys.size)
        order = np.argsort(class_of, kind="stable")
        starts = np.searchsorted(class_of[order], np.arange(classes.shape[0] + 1))
        block = max(1, min(classes.shape[0], _BLOCK_BUDGET_BYTES // ((ns + classes.shape[0]) * 64)))
        for first in range(0, classes.shape[0], block):
            cols = np.arange(first, min(first + block, classes.shape[0]))
            flows = order[starts[cols[0]]:starts[cols[-1] + 1]]
            reached[flows] = self._route_block(classes[cols].T, class_of[flows] - first, nic_a[flows],
                                               nic_b[flows], size[flows], load, bridge_load)
        share = bridge_load[self.bridge_of_nic] / self.bridge_count[self.bridge_of_nic]
        np.add.at(load, self.bridge_in, share)
        np.add.at(load, self.bridge_out, share)
        return reached

    def _route_block(self, sink_leaves, col, nic_a, nic_b, size, load, bridge_load) -> np.ndarray:
        ix, ns = self.ix, self.num_switches
        planes, b = ix.planes, sink_leaves.shape[1]
        graph = self._graph(sink_leaves)
        sinks = ns + np.arange(b)
        dist, outdeg, levels = distances_to(graph, sinks)
        # each source NIC splits over its live ports whose leaf is nearest to the class
        port_dist = np.full((planes, nic_a.size), -1, dtype=np.int64)
        for p in range(planes):
            live = self.port_up[p, nic_a] >= 0
            leaf = self.compact[ix.leaf_of_nic[p, nic_a[live]]]
            port_dist[p, live] = dist[leaf, col[live]]
        reachable = np.where(port_dist >= 0, port_dist, np.iinfo(np.int64).max)
        nearest = reachable.min(axis=0)
        reached = nearest < np.iinfo(np.int64).max
        chosen = (reachable == nearest) & reached
        split = np.where(chosen, size / np.maximum(chosen.sum(axis=0), 1), 0.0)  # (planes, flows)
        x = np.zeros((graph.num_nodes, b))
        for p in range(planes):
            use = split[p] > 0
            np.add.at(load, self.port_up[p, nic_a[use]], split[p, use])
            np.add.at(x, (self.compact[ix.leaf_of_nic[p, nic_a[use]]], col[use]), split[p, use])
        share, inverse, forwards = push(graph, x, dist, outdeg, levels)  # as ecmp.route does
        occurs = set(levels)
        carried = self._carried(share, dist, forwards)
        # parallel arcs and the k NICs of a bridge are parallel next hops: ``share`` is per next hop
        load[self.switch_arcs] += carried[0][self.switch_pair]
        bridge_load += carried[1] * self.bridge_count
        # what arrives through each plane's leaf of the destination: the chance of ending at that leaf
        # from each port, one backward pass per plane
        arrive = np.zeros((planes, nic_a.size))
        several = (sink_leaves >= 0).sum(axis=0) > 1
        for p in range(planes):
            has = sink_leaves[p] >= 0
            single = has & ~several
            arrive[p] += np.where(single[col], size * reached, 0.0)
            if not (has & several).any():
                continue
            chance = np.zeros((graph.num_nodes, b))
            rows = self.compact[sink_leaves[p, has & several]]
            chance[rows, np.flatnonzero(has & several)] = 1.0
            for level in levels[2:]:
                pulled = np.zeros_like(chance)
                for w, adj, _ in graph.by_weight:
                    if level - w in occurs and level - w >= 1:
                        pulled += adj @ (chance * (dist == level - w))
                chance += pulled * inverse * (dist == level)
            multi = several[col]
            for q in range(planes):
                use = multi & (split[q] > 0)
                leaf = self.compact[ix.leaf_of_nic[q, nic_a[use]]]
                arrive[p, use] += split[q, use] * chance[leaf, col[use]]
        for p in range(planes):
            use = arrive[p] > 0
            np.add.at(load, self.port_down[p, nic_b[use]], arrive[p, use])
        return reached

    def _carried(self, share, dist, forwards, chunk: int = 1 << 22) -> list:
        """What each arc carries, per weight (switch pairs, bridges): every (switch, class) with flow sends
        ``share`` to each next hop one arc-weight nearer the class. Walks only the out-arcs of entries with
        flow (a small part of arcs x classes), about ``chunk`` at a time."""
        ns = self.num_switches
        rows, cols = np.nonzero((share[:ns] > 0) & (dist[:ns] > 0))
        totals = []
        for weight, starts, heads in self.out_arcs:
            total = np.zeros(heads.size)
            count = starts[rows + 1] - starts[rows]
            ends = np.cumsum(count)
            first = 0
            while first < rows.size:
                last = max(first + 1, int(np.searchsorted(ends, ends[first] - count[first] + chunk, side="right")))
                r, c, k = rows[first:last], cols[first:last], count[first:last]
                arc = np.repeat(starts[r] - (np.cumsum(k) - k), k) + np.arange(int(k.sum()))
                r, c = np.repeat(r, k), np.repeat(c, k)
                h = heads[arc]
                on_path = (dist[h, c] == dist[r, c] - weight) & forwards[h, c]
                total += np.bincount(arc[on_path], share[r[on_path], c[on_path]], heads.size)
                first = last
            totals.append(total)
        return totals
