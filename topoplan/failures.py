"""What failed elements do to a synchronous job: which GPUs stop it, which servers lose bandwidth (issue 16, item 3).

Contract of :func:`blast_radius`, for any generated topology:

- A failed node takes every link it ends down with it; a failed link takes both of its arcs.
- A NIC that had network uplinks and has none left is *cut off*: its GPUs stop the job, as NCCL
  does not re-route a communicator around a dead NIC (a single-homed host losing its link).
- A GPU outside the connected piece of the surviving graph that holds the most GPUs stops the job.
- Every server keeps ``surviving / healthy`` of its NIC uplink capacity: a dual-homed host (dual-ToR,
  one port per plane) losing one of its P ports keeps (P-1)/P of it and keeps running.

Columnar: one ``connected_components`` call over the surviving links, bincounts for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from .topology import KIND, LINK_TIER, Topology


@dataclass(frozen=True)
class BlastRadius:
    """Effect of one set of failed elements on a job over every GPU."""

    failed_links: int                     # links down, counting those of failed nodes
    stopped_gpus: np.ndarray              # GPU node ids whose job stops (sorted)
    server_injection_fraction: np.ndarray  # per server id: surviving / healthy NIC uplink capacity

    @property
    def job_stops(self) -> bool:
        return bool(self.stopped_gpus.size)

    @property
    def degraded_servers(self) -> int:
        """Servers that lost part, not all, of their network bandwidth."""
        fraction = self.server_injection_fraction
        return int(((fraction < 1) & (fraction > 0)).sum())

    @property
    def worst_server_fraction(self) -> float:
        return float(self.server_injection_fraction.min(initial=1.0))


def component_counts(topology: Topology) -> dict[str, int]:
    """How many of each failure unit the topology has (the units of ``reliability.ComponentRate``)."""
    network = topology.link_tier[0::2] != LINK_TIER["host"]
    switches = topology.kind == KIND["switch"]
    return {
        "gpu": int(topology.gpus.size),
        "host": int(np.unique(topology.server[topology.server >= 0]).size),
        "nic": int(topology.nodes_of("nic").size),
        "nic_link": int((topology.link_tier[0::2] == LINK_TIER["leaf"]).sum()),
        "leaf_switch": int((switches & (topology.tier == 0)).sum()),
        "switch": int(switches.sum()),
        "link": int(network.sum()),
    }


def link_down_mask(topology: Topology, failed_links=(), failed_nodes=()) -> np.ndarray:
    """Per link (arc pair), True when it is down: listed, or ending at a failed node."""
    down = np.zeros(topology.num_links, dtype=bool)
    links = np.asarray(failed_links, dtype=np.int64)
    if links.size and (links.min() < 0 or links.max() >= topology.num_links):
        raise ValueError(f"link index out of range 0..{topology.num_links - 1}")
    down[links] = True
    nodes = np.asarray(failed_nodes, dtype=np.int64)
    if nodes.size:
        if nodes.min() < 0 or nodes.max() >= topology.num_nodes:
            raise ValueError(f"node index out of range 0..{topology.num_nodes - 1}")
        dead = np.zeros(topology.num_nodes, dtype=bool)
        dead[nodes] = True
        down |= dead[topology.src[0::2]] | dead[topology.dst[0::2]]
    return down


def arc_mask(link_down: np.ndarray) -> np.ndarray:
    """Per arc, True when it is usable: both directions of a surviving link (``flow.route(arc_mask=)``)."""
    return np.repeat(~link_down, 2)


def blast_radius(topology: Topology, failed_links=(), failed_nodes=()) -> BlastRadius:
    down = link_down_mask(topology, failed_links, failed_nodes)
    src, dst = topology.src[0::2], topology.dst[0::2]
    n = topology.num_nodes
    gpus = topology.gpus
    failed_gpu = np.zeros(n, dtype=bool)
    failed_gpu[np.asarray(failed_nodes, dtype=np.int64)] = True

    # NIC uplinks: network links with a NIC at one end (links are stored with either end first).
    network = topology.link_tier[0::2] != LINK_TIER["host"]
    nic_end = np.where(topology.kind[src] == KIND["nic"], src, np.where(topology.kind[dst] == KIND["nic"], dst, -1))
    uplink = network & (nic_end >= 0)
    capacity = topology.capacity_gbps[0::2]
    healthy_nic = np.bincount(nic_end[uplink], weights=capacity[uplink], minlength=n)
    alive = uplink & ~down
    surviving_nic = np.bincount(nic_end[alive], weights=capacity[alive], minlength=n)
    cut_off_nic = (healthy_nic > 0) & (surviving_nic == 0)

    # GPUs behind a cut-off NIC: host links between a GPU and a NIC.
    host = ~network
    gpu_nic = host & (((topology.kind[src] == KIND["gpu"]) & (topology.kind[dst] == KIND["nic"]))
                      | ((topology.kind[dst] == KIND["gpu"]) & (topology.kind[src] == KIND["nic"])))
    gpu_end = np.where(topology.kind[src[gpu_nic]] == KIND["gpu"], src[gpu_nic], dst[gpu_nic])
    nic_of_pair = np.where(topology.kind[src[gpu_nic]] == KIND["nic"], src[gpu_nic], dst[gpu_nic])
    stopped = failed_gpu.copy()
    stopped[gpu_end[cut_off_nic[nic_of_pair]]] = True

    # GPUs cut off from the largest GPU-holding piece of the surviving graph.
    keep = ~down
    graph = coo_matrix((np.ones(int(keep.sum()), dtype=np.int8), (src[keep], dst[keep])), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    live_gpus = gpus[~failed_gpu[gpus]]
    if live_gpus.size:
        main_piece = np.bincount(label[live_gpus]).argmax()
        stopped[live_gpus[label[live_gpus] != main_piece]] = True

    servers = topology.server
    nics = topology.nodes_of("nic")
    nic_server = servers[nics]
    size = int(servers.max(initial=-1)) + 1
    in_server = nic_server >= 0
    healthy_server = np.bincount(nic_server[in_server], weights=healthy_nic[nics][in_server], minlength=size)
    surviving_server = np.bincount(nic_server[in_server], weights=surviving_nic[nics][in_server], minlength=size)
    fraction = np.divide(surviving_server, healthy_server, out=np.ones(size), where=healthy_server > 0)
    return BlastRadius(int(down.sum()), gpus[stopped[gpus]], fraction)


def single_failure_stop_fractions(topology: Topology) -> dict[str, float]:
    """Per failure unit ``nic_link`` and ``leaf_switch`` (``component_counts``): the share of its single
    failures that stop the job, without routing. A NIC link's failure stops the job when its NIC (with
    GPUs behind it) has no other uplink; a leaf's when some such NIC has all its uplinks on that leaf.
    It is what ``blast_radius`` finds where the rest of the fabric stays connected, as it does in every
    generated family (tests hold it to exhaustive ``resilience`` scenarios)."""
    src, dst = topology.src[0::2], topology.dst[0::2]
    n = topology.num_nodes
    network = topology.link_tier[0::2] != LINK_TIER["host"]
    nic_end = np.where(topology.kind[src] == KIND["nic"], src, np.where(topology.kind[dst] == KIND["nic"], dst, -1))
    uplink = network & (nic_end >= 0)
    host = ~network
    feeds_gpu = np.zeros(n, dtype=bool)  # NICs with a GPU behind them
    for a, b in ((src, dst), (dst, src)):
        pairs = host & (topology.kind[a] == KIND["nic"]) & (topology.kind[b] == KIND["gpu"])
        feeds_gpu[a[pairs]] = True
    nic, far = nic_end[uplink], np.where(nic_end == src, dst, src)[uplink]
    ports = np.bincount(nic, minlength=n)
    out = {}
    nic_links = topology.link_tier[0::2] == LINK_TIER["leaf"]
    if nic_links.any():
        stops = uplink & feeds_gpu[np.maximum(nic_end, 0)] & (ports[np.maximum(nic_end, 0)] == 1)
        out["nic_link"] = float(stops[nic_links].sum() / nic_links.sum())
    leaves = np.flatnonzero((topology.kind == KIND["switch"]) & (topology.tier == 0))
    if leaves.size:
        # per (NIC, leaf): uplinks of the NIC on that leaf; a NIC with all of them on one leaf dies with it
        key = nic.astype(np.int64) * n + far
        pairs, count = np.unique(key, return_counts=True)
        whole = (count == ports[pairs // n]) & feeds_gpu[pairs // n]
        dies = np.zeros(n, dtype=bool)
        dies[(pairs % n)[whole]] = True
        out["leaf_switch"] = float(dies[leaves].mean())
    return out
