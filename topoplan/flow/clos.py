"""``clos``: closed-form ECMP on the tree-structured fabrics the Clos generator builds.

In a folded Clos built as ``generators/clos.py`` builds it, ECMP (see ``ecmp.py``) splits a unit's
outgoing traffic equally over all its up-arcs, and a unit's incoming traffic arrives equally over all its
down-arcs. So every arc's load follows from how much traffic leaves or enters each subtree:

* NVLink arcs: traffic between GPUs of one server; PCIe arcs: traffic a GPU sends to or receives from
  outside its server (or through its own NIC to a GPU sharing it; with NVLink that pair splits half
  and half between the two equal 2-hop paths);
* NIC -> leaf: what the NIC sends out, ``1/planes`` per plane; leaf -> spine: what leaves the leaf,
  divided by its up-arcs; spine -> core: what leaves the pod, divided by the pod's spines and their
  up-arcs; and the mirror images downwards.

Traffic is aggregated per subtree with ``bincount``, all-to-all groups by member counts per subtree, so
no host pair is enumerated. The engine accepts a topology only where this is exact (a tree of GPU, NIC,
leaf, spine and core links, one NIC port per plane, all links up); ``refusal`` says why not.
Tests hold it equal to ``ecmp`` on every instance it accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import EngineRefused, Refusal
from ..topology import KIND, Topology
from .engine import Routed
from .traffic import Demand

# arc categories
(NVL_UP, NVL_DOWN, PCIE_UP, PCIE_DOWN, NIC_UP, NIC_DOWN, LEAF_UP, LEAF_DOWN, SPINE_UP, SPINE_DOWN) = range(10)


@dataclass
class ClosIndex:
    """What the closed form needs, derived once from a topology's arrays."""

    planes: int
    category: np.ndarray      # per arc, -1 for none
    nic_of_gpu: np.ndarray    # per node (GPU rows filled)
    nvlink: np.ndarray        # per node: GPU has an NVLink domain
    leaf_of_nic: np.ndarray   # (planes, N): leaf node of each NIC in each plane
    up_arcs: np.ndarray       # per node: number of up-arcs (leaf: to spines, spine: to cores)
    down_arcs: np.ndarray     # per node: number of down-arcs arriving from the tier above
    spines_in_pod: np.ndarray  # per pod key (plane * pods + pod)
    pods: int
    isolated_pods: bool       # some pods cannot reach each other (no core, or cores per rail)
    pod_island: np.ndarray    # per pod: which pods it reaches (same id), through the cores
    arcs_of: dict = None      # category -> its arc ids (route() fills loads category by category)


def _index(topology: Topology) -> ClosIndex | str:
    """The index, or the reason the closed form does not apply."""
    layout = topology.layout
    if layout.tree is None:
        return f"fabric family '{layout.family}' is not a folded Clos"
    kind, tier = topology.kind, topology.tier
    src, dst = topology.src, topology.dst
    ks, kd = kind[src], kind[dst]
    n = topology.num_nodes
    category = np.full(topology.num_arcs, -1, dtype=np.int8)
    category[(ks == KIND["gpu"]) & (kd == KIND["nvswitch"])] = NVL_UP
    category[(ks == KIND["nvswitch"]) & (kd == KIND["gpu"])] = NVL_DOWN
    category[(ks == KIND["gpu"]) & (kd == KIND["nic"])] = PCIE_UP
    category[(ks == KIND["nic"]) & (kd == KIND["gpu"])] = PCIE_DOWN
    category[(ks == KIND["nic"]) & (kd == KIND["switch"])] = NIC_UP
    category[(ks == KIND["switch"]) & (kd == KIND["nic"])] = NIC_DOWN
    sw = (ks == KIND["switch"]) & (kd == KIND["switch"])
    ts, td = tier[src], tier[dst]
    category[sw & (ts == 0) & (td == 1)] = LEAF_UP
    category[sw & (ts == 1) & (td == 0)] = LEAF_DOWN
    category[sw & (ts == 1) & (td == 2)] = SPINE_UP
    category[sw & (ts == 2) & (td == 1)] = SPINE_DOWN
    if (category < 0).any():
        return "the topology has links outside the GPU-NIC-leaf-spine-core tree"

    planes = layout.planes
    pcie = np.flatnonzero(category == PCIE_UP)
    nic_of_gpu = np.full(n, -1, dtype=np.int64)
    nic_of_gpu[src[pcie]] = dst[pcie]
    if np.bincount(src[pcie], minlength=n)[topology.gpus].max(initial=1) != 1:
        return "a GPU has more than one PCIe path to a NIC"
    nvlink = np.zeros(n, dtype=bool)
    nvlink[src[category == NVL_UP]] = True
    nic_up = np.flatnonzero(category == NIC_UP)
    nics = topology.nodes_of("nic")
    if not np.array_equal(np.bincount(src[nic_up], minlength=n)[nics], np.full(nics.size, planes)):
        return "a NIC does not have exactly one port in each plane"
    leaf_of_nic = np.full((planes, n), -1, dtype=np.int64)
    leaf_of_nic[topology.plane[dst[nic_up]], src[nic_up]] = dst[nic_up]
    if (leaf_of_nic[:, nics] < 0).any():
        return "a NIC has two ports in one plane"
    up_arcs = np.bincount(src[(category == LEAF_UP) | (category == SPINE_UP)], minlength=n)
    down_arcs = np.bincount(dst[(category == LEAF_DOWN) | (category == SPINE_DOWN)], minlength=n)
    pods = int(topology.pod[topology.kind == KIND["switch"]].max(initial=0)) + 1
    spines = np.flatnonzero((kind == KIND["switch"]) & (tier == 1))
    spines_in_pod = np.bincount(topology.plane[spines] * pods + topology.pod[spines], minlength=planes * pods)
    island = _pod_islands(topology, category, pods)
    arcs_of = {c: np.flatnonzero(category == c) for c in (NVL_UP, NVL_DOWN, PCIE_UP, PCIE_DOWN, NIC_UP, NIC_DOWN,
                                                          LEAF_UP, LEAF_DOWN, SPINE_UP, SPINE_DOWN)}
    return ClosIndex(planes, category, nic_of_gpu, nvlink, leaf_of_nic, up_arcs, down_arcs, spines_in_pod, pods,
                     bool(np.unique(island).size > 1), island, arcs_of)


def _pod_islands(topology: Topology, category: np.ndarray, pods: int) -> np.ndarray:
    """Per pod, the id of the set of pods it reaches through a core (plane 0): all 0 under one core; one
    per pod without a core; one per rail when every rail has cores of its own (rail-only, three tiers)."""
    if pods <= 1:
        return np.zeros(1, dtype=np.int64)
    up = np.flatnonzero((category == SPINE_UP) & (topology.plane[topology.src] == 0))
    pod_of_link, core = topology.pod[topology.src[up]].astype(np.int64), topology.dst[up]
    cores, core_of_link = np.unique(core, return_inverse=True)
    island = np.arange(pods, dtype=np.int64)
    while True:  # label propagation: every pod takes the least label among the pods its cores reach
        core_label = np.full(cores.size, pods, dtype=np.int64)
        np.minimum.at(core_label, core_of_link, island[pod_of_link])
        relabeled = island.copy()
        np.minimum.at(relabeled, pod_of_link, core_label[core_of_link])
        if (relabeled == island).all():
            return island
        island = relabeled


_CACHE: dict = {}


def index_of(topology: Topology) -> ClosIndex | str:
    key = id(topology)
    cached = _CACHE.get(key)
    if cached is None or cached[0] is not topology:
        _CACHE.clear()
        _CACHE[key] = (topology, _index(topology))
    return _CACHE[key][1]


def refusal(topology: Topology) -> Refusal | None:
    """None when the closed form applies, else the reason it does not."""
    found = index_of(topology)
    return Refusal("clos", f"the clos engine does not apply: {found}") if isinstance(found, str) else None


def route(topology: Topology, demand: Demand) -> Routed:
    ix = index_of(topology)
    if isinstance(ix, str):
        raise EngineRefused(refusal(topology))
    agg, pod_out, pod_in = new_aggregates(topology, ix)
    src, dst, size = demand.src, demand.dst, demand.bytes
    keep = src != dst
    lost_pairs, lost_bytes = _add_pairs(topology, ix, src[keep], dst[keep], size[keep], agg, pod_out, pod_in)
    if demand.has_a2a:
        pairs, lost = _add_all_to_all(topology, ix, demand.a2a_members, demand.a2a_bytes, agg, pod_out, pod_in)
        lost_pairs, lost_bytes = lost_pairs + pairs, lost_bytes + lost
    load = arc_loads(topology, ix, agg, pod_out, pod_in)
    return Routed(load, unreachable_pairs=lost_pairs, unreachable_bytes=lost_bytes)


def new_aggregates(topology: Topology, ix: ClosIndex) -> tuple[dict, np.ndarray, np.ndarray]:
    """Empty per-node traffic aggregates, and per (plane, pod) traffic out of and into the pod."""
    n = topology.num_nodes
    agg = {name: np.zeros(n) for name in ("nvl_up", "nvl_down", "pcie_up", "pcie_down", "nic_out", "nic_in",
                                          "leaf_out", "leaf_in")}
    return agg, np.zeros(ix.planes * ix.pods), np.zeros(ix.planes * ix.pods)


def arc_loads(topology: Topology, ix: ClosIndex, agg: dict, pod_out: np.ndarray, pod_in: np.ndarray) -> np.ndarray:
    """Every arc's load from the aggregates: each unit spreads what it sends up (receives from above)
    equally over its up-arcs (down-arcs)."""
    arcs_of, s, d = ix.arcs_of, topology.src, topology.dst
    load = np.zeros(topology.num_arcs)
    pairs = ((NVL_UP, agg["nvl_up"], s), (NVL_DOWN, agg["nvl_down"], d), (PCIE_UP, agg["pcie_up"], s),
             (PCIE_DOWN, agg["pcie_down"], d))
    for category, values, end in pairs:
        arcs = arcs_of[category]
        load[arcs] = values[end[arcs]]
    arcs = arcs_of[NIC_UP]
    load[arcs] = agg["nic_out"][s[arcs]] / ix.planes
    arcs = arcs_of[NIC_DOWN]
    load[arcs] = agg["nic_in"][d[arcs]] / ix.planes
    arcs = arcs_of[LEAF_UP]
    load[arcs] = agg["leaf_out"][s[arcs]] / ix.up_arcs[s[arcs]]
    arcs = arcs_of[LEAF_DOWN]
    load[arcs] = agg["leaf_in"][d[arcs]] / ix.down_arcs[d[arcs]]
    pod_key = topology.plane * ix.pods + topology.pod
    arcs = arcs_of[SPINE_UP]
    load[arcs] = pod_out[pod_key[s[arcs]]] / ix.spines_in_pod[pod_key[s[arcs]]] / ix.up_arcs[s[arcs]]
    arcs = arcs_of[SPINE_DOWN]
    load[arcs] = pod_in[pod_key[d[arcs]]] / ix.spines_in_pod[pod_key[d[arcs]]] / ix.down_arcs[d[arcs]]
    return load


def _add_pairs(topology, ix: ClosIndex, a, b, w, agg, pod_out, pod_in) -> tuple[int, float]:
    """Add explicit flows; returns the number of flows with bytes that cannot be routed, and their bytes."""
    n = topology.num_nodes
    if a.size == 0:
        return 0, 0.0
    nic_a, nic_b = ix.nic_of_gpu[a], ix.nic_of_gpu[b]
    same_server = topology.server[a] == topology.server[b]
    same_nic = nic_a == nic_b
    nvlink = ix.nvlink[a] & same_server
    tie = nvlink & same_nic                       # NVLink and the shared NIC: two equal 2-hop paths
    via_nvlink = np.where(tie, 0.5 * w, np.where(nvlink, w, 0.0))
    via_nic_only = np.where(tie, 0.5 * w, np.where(same_nic, w, 0.0))
    lost = np.zeros(a.size, dtype=bool)
    if ix.isolated_pods:
        island = ix.pod_island[topology.pod[ix.leaf_of_nic[0]]]
        lost = ~(nvlink | same_nic) & (island[nic_a] != island[nic_b])
    fabric = np.where(nvlink | same_nic | lost, 0.0, w)
    agg["nvl_up"] += np.bincount(a, via_nvlink, n)
    agg["nvl_down"] += np.bincount(b, via_nvlink, n)
    agg["pcie_up"] += np.bincount(a, via_nic_only + fabric, n)
    agg["pcie_down"] += np.bincount(b, via_nic_only + fabric, n)
    agg["nic_out"] += np.bincount(nic_a, fabric, n)
    agg["nic_in"] += np.bincount(nic_b, fabric, n)
    share = fabric / ix.planes
    for plane in range(ix.planes):
        leaf_a, leaf_b = ix.leaf_of_nic[plane, nic_a], ix.leaf_of_nic[plane, nic_b]
        cross = np.where(leaf_a != leaf_b, share, 0.0)
        agg["leaf_out"] += np.bincount(leaf_a, cross, n)
        agg["leaf_in"] += np.bincount(leaf_b, cross, n)
        pod_a = plane * ix.pods + topology.pod[leaf_a]
        pod_b = plane * ix.pods + topology.pod[leaf_b]
        far = np.where(pod_a != pod_b, share, 0.0)
        pod_out += np.bincount(pod_a, far, pod_out.size)
        pod_in += np.bincount(pod_b, far, pod_in.size)
    lost &= w > 0
    return int(lost.sum()), float(w[lost].sum())


def _members_alike(groups: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """For each member, how many members of its group share its unit (server, NIC, leaf, pod)."""
    g, p = groups.shape
    key = np.repeat(np.arange(g, dtype=np.int64), p) * (int(unit.max()) + 1) + unit.ravel()
    _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    return counts[inverse].reshape(g, p)


def _add_all_to_all(topology, ix: ClosIndex, members, b: float, agg, pod_out, pod_in) -> tuple[int, float]:
    """Add all-to-all groups by member counts per subtree; returns the number of unroutable pairs and their
    bytes (none when the pairs carry no bytes)."""
    n = topology.num_nodes
    p = members.shape[1]
    nics = ix.nic_of_gpu[members]
    servers = topology.server[members]
    n_server = _members_alike(members, servers)
    n_nic = _members_alike(members, nics)
    nvlink = ix.nvlink[members]

    def leaving(unit):
        """Per member: fabric pairs to members outside its unit (same-server NVLink pairs excluded)."""
        n_unit = _members_alike(members, unit)
        n_server_unit = _members_alike(members, servers * (int(unit.max()) + 1) + unit)
        return (p - n_unit) - np.where(nvlink, n_server - n_server_unit, 0)

    lost = leaving(ix.pod_island[topology.pod[ix.leaf_of_nic[0, nics]]]) if ix.isolated_pods else np.zeros_like(n_server)
    # per member: bytes over NVLink, over PCIe to a shared NIC only, and into the fabric
    via_nvlink = np.where(nvlink, (n_server - n_nic) + (n_nic - 1) / 2, 0.0) * b
    via_nic_only = np.where(nvlink, (n_nic - 1) / 2, n_nic - 1) * b
    fabric = (np.where(nvlink, p - n_server, p - n_nic) - lost) * b
    flat = members.ravel()
    for name in ("nvl_up", "nvl_down"):
        agg[name] += np.bincount(flat, via_nvlink.ravel(), n)
    for name in ("pcie_up", "pcie_down"):
        agg[name] += np.bincount(flat, (via_nic_only + fabric).ravel(), n)
    for name in ("nic_out", "nic_in"):
        agg[name] += np.bincount(nics.ravel(), fabric.ravel(), n)
    for plane in range(ix.planes):
        leaves = ix.leaf_of_nic[plane, nics]
        cross = ((leaving(leaves) - lost) * b / ix.planes).ravel()
        agg["leaf_out"] += np.bincount(leaves.ravel(), cross, n)
        agg["leaf_in"] += np.bincount(leaves.ravel(), cross, n)
        pods = plane * ix.pods + topology.pod[leaves]
        far = ((leaving(pods) - lost) * b / ix.planes).ravel()
        pod_out += np.bincount(pods.ravel(), far, pod_out.size)
        pod_in += np.bincount(pods.ravel(), far, pod_in.size)
    if b <= 0:
        return 0, 0.0
    return int(lost.sum()), float(lost.sum()) * b
