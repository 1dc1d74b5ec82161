"""The exporters' contract (``Export``, ``ExportOptions``) and what several formats read off a Topology."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
