"""``clos-failed``: ECMP on a folded Clos with failed network links or switches, by destination classes.

It gives exactly the loads of the generic ``ecmp`` engine (same semantics, see ``ecmp.py``) on the
fabrics the ``clos`` closed form accepts (``clos.py``: GPU - NIC - leaf - spine - core trees, one NIC port
per plane) when some network links or switches are down (``arc_mask``), in a small fraction of its time:

* Traffic between GPUs of one server over NVLink, or through a NIC they share, never reaches the
  network: it is placed as ``clos`` places it.
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
    n = topology.num_nodes
    load = np.zeros(topology.num_arcs)
    src, dst, size = demand.pairs()

    # flows that stay inside a server (NVLink, or a shared NIC): placed as the closed form places them
    nic_a, nic_b = ix.nic_of_gpu[src], ix.nic_of_gpu[dst]
    inside = (ix.nvlink[src] & (topology.server[src] == topology.server[dst])) | (nic_a == nic_b)
    agg = {name: np.zeros(n) for name in ("nvl_up", "nvl_down", "pcie_up", "pcie_down", "nic_out", "nic_in",
                                          "leaf_out", "leaf_in")}
    pods = np.zeros(ix.planes * ix.pods)
    clos._add_pairs(topology, ix, src[inside], dst[inside], size[inside], agg, pods, pods.copy())
    src, dst, size, nic_a, nic_b = (a[~inside] for a in (src, dst, size, nic_a, nic_b))

    fabric = _SwitchGraph(topology, ix, up)
    reached = np.zeros(src.size, dtype=bool)
    if src.size:
        reached = fabric.route(nic_a, nic_b, size, load)
    agg["pcie_up"] += np.bincount(src[reached], size[reached], n)
    agg["pcie_down"] += np.bincount(dst[reached], size[reached], n)
    s, d = topology.src, topology.dst
    for category, values, end in ((clos.NVL_UP, agg["nvl_up"], s), (clos.NVL_DOWN, agg["nvl_down"], d),
                                  (clos.PCIE_UP, agg["pcie_up"], s), (clos.PCIE_DOWN, agg["pcie_down"], d)):
        arcs = ix.arcs_of[category]
        load[arcs] = values[end[arcs]]
    lost = ~reached & (size > 0)
    return Routed(load, unreachable_pairs=int(lost.sum()), unreachable_bytes=float(size[lost].sum()))


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
        self._sp = sp

    def _graph(self, sink_leaves: np.ndarray) -> tuple[RoutingGraph, list]:
        """The routing graph with one sink per class (column of ``sink_leaves``: leaf per plane, -1 none):
        nodes are the switches, then the sinks. Returns the graph and its arcs per weight as (tails, heads,
        what each arc is: a switch arc id, a bridge id, or -1 for an arc into a sink)."""
        sp = self._sp
        topology, ns = self.topology, self.num_switches
        classes = sink_leaves.shape[1]
        total = ns + classes
        tails1 = [self.compact[topology.src[self.switch_arcs]]]
        heads1 = [self.compact[topology.dst[self.switch_arcs]]]
        what1 = [self.switch_arcs]
        for row in sink_leaves:
            has = np.flatnonzero(row >= 0)
            tails1.append(self.compact[row[has]])
            heads1.append(ns + has)
            what1.append(np.full(has.size, -1, dtype=np.int64))
        arcs = [(1, np.concatenate(tails1), np.concatenate(heads1), np.concatenate(what1), None)]
        if self.bridge_keys.size:
            arcs.append((2, self.bridge_keys // ns, self.bridge_keys % ns, np.arange(self.bridge_keys.size),
                         self.bridge_count.astype(np.float32)))
        by_weight = []
        for weight, tails, heads, _, count in arcs:
            values = np.ones(tails.size, dtype=np.float32) if count is None else count
            adj = sp.csr_matrix((values, (tails, heads)), shape=(total, total))
            by_weight.append((weight, adj, adj.T.tocsr()))
        relay = np.zeros(total, dtype=bool)
        relay[:ns] = True
        graph = RoutingGraph(total, np.zeros(0, dtype=np.int64), np.zeros(0), relay, by_weight)
        return graph, [(w, t, h, what, count) for w, t, h, what, count in arcs]

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
        graph, arcs = self._graph(sink_leaves)
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
        for w, tails, heads, what, _ in arcs:
            on_path = (dist[heads] == dist[tails] - w) & forwards[heads] & (dist[tails] > 0)
            carried = np.einsum("ij,ij->i", share[tails], on_path)
            if w == 1:
                real = what >= 0
                np.add.at(load, what[real], carried[real])
            else:
                # a bridge of k NICs is k parallel next hops: ``share`` is per next hop
                bridge_load[what] += carried * self.bridge_count
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
