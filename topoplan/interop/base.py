"""The exporters' contract (``Export``, ``ExportOptions``) and what several formats read off a Topology."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ..topology import KIND, Topology


@dataclass(frozen=True)
class ExportOptions:
    """What a user may choose about an export. ``node_names``: Slurm node names, a Python format string of
    ``{node}`` (the Slurm node's index), ``{server}`` (the server's) and ``{tray}`` (the node's index in its
    server); ``gpus_per_node``: GPUs per Slurm node (None: the server's, or 4 on NVLink racks of more than
    8 GPUs); ``suffix``: the output file's extension, for formats with a YAML and a JSON form."""

    node_names: str = "node{node:05d}"
    gpus_per_node: int | None = None
    suffix: str = ""


@dataclass(frozen=True)
class Export:
    """The files of one export, as (name, bytes); one file has the name "" (the output path itself), several
    go into the output directory under their names. ``notes``: what the format cannot express here."""

    files: tuple
    notes: tuple = ()
    summary: str = ""


@dataclass(frozen=True)
class Links:
    """Full-duplex links as columns: ``lower`` end (the NIC, or the switch of the lower tier), ``upper`` end."""

    lower: np.ndarray
    upper: np.ndarray
    gbps: np.ndarray
    latency_ns: np.ndarray

    @property
    def count(self) -> int:
        return int(self.lower.size)


def network_links(topology: Topology) -> tuple[Links, Links]:
    """(links from a NIC to a switch, links between two switches), each with its lower end first."""
    src, dst = topology.src[0::2].astype(np.int64), topology.dst[0::2].astype(np.int64)
    kind, tier = topology.kind, topology.tier
    capacity, latency = topology.capacity_gbps[0::2], topology.latency_ns[0::2]
    is_switch = kind == KIND["switch"]
    to_nic = (kind[src] == KIND["nic"]) & is_switch[dst] | (kind[dst] == KIND["nic"]) & is_switch[src]
    nic_end = np.where(kind[src] == KIND["nic"], src, dst)
    nic_links = Links(nic_end[to_nic], np.where(kind[src] == KIND["nic"], dst, src)[to_nic], capacity[to_nic],
                      latency[to_nic])
    between = is_switch[src] & is_switch[dst]
    swap = tier[src] > tier[dst]
    low, high = np.where(swap, dst, src), np.where(swap, src, dst)
    return nic_links, Links(low[between], high[between], capacity[between], latency[between])


def node_count_per_server(server_gpus: int, gpus_per_node: int | None) -> int:
    """Slurm nodes per topoplan server: one, or an NVLink rack's compute trays (4 GPUs each by default)."""
    per_node = gpus_per_node or (server_gpus if server_gpus <= 8 else 4)
    return max(1, server_gpus // per_node)


def slurm_node_names(pattern: str, servers: int, nodes_per_server: int) -> list[str]:
    """The Slurm name of every node, server-major: ``pattern`` formatted with node, server and tray."""
    return [pattern.format(node=s * nodes_per_server + t, server=s, tray=t)
            for s in range(servers) for t in range(nodes_per_server)]


def components(edges_a: np.ndarray, edges_b: np.ndarray, n: int) -> np.ndarray:
    """Connected component label of each of ``n`` vertices, labels in order of first vertex."""
    graph = coo_matrix((np.ones(edges_a.size), (edges_a, edges_b)), shape=(n, n))
    _count, labels = connected_components(graph, directed=False)
    _first, order = np.unique(labels, return_index=True)
    rank = np.empty(order.size, np.int64)
    rank[np.argsort(order)] = np.arange(order.size)
    return rank[labels]


def leaf_groups(topology: Topology) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Plane 0: (group of each server, -1 when a server reaches no leaf; the leaves (node ids) of plane 0;
    the group of each of those leaves)."""
    nic_links, _ = network_links(topology)
    plane0 = topology.plane[nic_links.upper] == 0
    server = topology.server[nic_links.lower[plane0]].astype(np.int64)
    leaf_nodes, leaf = np.unique(nic_links.upper[plane0], return_inverse=True)
    servers = int(topology.server[topology.gpus].max(initial=-1)) + 1
    # vertices: leaves 0..L-1, then servers
    labels = components(leaf, leaf_nodes.size + server, leaf_nodes.size + servers)
    leaf_group = labels[:leaf_nodes.size]
    _, leaf_group = np.unique(leaf_group, return_inverse=True)   # groups numbered by their first leaf
    server_group = np.full(servers, -1, np.int64)
    server_group[server] = leaf_group[leaf]
    return server_group, leaf_nodes, leaf_group
