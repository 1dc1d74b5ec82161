"""SimAI topology file (``astra-sim-alibabacloud/inputs/topo``, as its ``gen_Topo_Template.py`` writes it).

* line 1: ``<nodes> <gpus per server> <nvswitches> <other switches> <links> <gpu type>``, nodes = GPUs +
  NVSwitches + other switches;
* line 2: the ids of every switch, NVSwitches first, then the leaves (SimAI's ASW), spines (PSW) and cores;
* then one link per line: ``<a> <b> <bandwidth>Gbps <latency>ms <error rate>``.

Ids: GPUs ``0..G-1`` server-major as topoplan numbers them, then one NVSwitch per server (the NVLink
domain), then the switches by tier. SimAI folds the NIC into its GPU, so every NIC port's link to a leaf
becomes a link from the GPU the NIC serves (a NIC shared by ``k`` GPUs gives each ``1/k`` of its rate: the
notes say so). Latencies are topoplan's cable propagation (0 inside a server). RailX is refused: SimAI's
network is built of NVSwitches and packet switches, and RailX joins chips by circuits.
"""

from __future__ import annotations

import numpy as np

from ..catalog import Catalog
from ..spec import Design
from ..topology import KIND, Topology
from .base import Export, ExportOptions, network_links


def _gpu_type(gpu: str) -> str:
    return gpu.split("-")[0].upper() or "GPU"


def write(topology: Topology, design: Design, catalog: Catalog, options: ExportOptions) -> Export:
    """The SimAI topology file of ``design``."""
    if topology.layout.family == "railx" or not (topology.kind == KIND["switch"]).any():
        raise design.infeasible("fabric.topology", "SimAI topologies are built of NVSwitches and packet switches; "
                                f"this {design.fabric.topology} fabric joins its chips by circuits",
                                "export it to infragraph, which takes any link")
    server = catalog.servers[design.cluster.server]
    gpus, nics, domains = topology.gpus, topology.nodes_of("nic"), topology.nodes_of("nvswitch")
    switches = topology.nodes_of("switch")
    switches = switches[np.lexsort((switches, topology.tier[switches]))]   # leaves, then spines, then cores
    ids = np.full(topology.num_nodes, -1, np.int64)
    ids[gpus] = np.arange(gpus.size)
    ids[domains] = gpus.size + np.arange(domains.size)
    ids[switches] = gpus.size + domains.size + np.arange(switches.size)

    lines, notes = [], []
    nvlink = (topology.kind[topology.src[0::2]] == KIND["gpu"]) & (topology.kind[topology.dst[0::2]] == KIND["nvswitch"])
    a, b = topology.src[0::2][nvlink], topology.dst[0::2][nvlink]
    lines += _rows(ids[a], ids[b], topology.capacity_gbps[0::2][nvlink], topology.latency_ns[0::2][nvlink])

    # each GPU's NIC from the server template (GPU i uses NIC gpu_nics[i]); NIC ports to leaves as GPU links
    n, g = server.nics, server.gpus
    local = np.asarray(server.gpu_nics, np.int64)
    gpu_server = np.arange(gpus.size) // g
    gpu_nic = nics[gpu_server * n + np.tile(local, design.cluster.servers)]
    sharing = np.tile(np.bincount(local, minlength=n)[local], design.cluster.servers)  # GPUs on each GPU's NIC
    nic_links, switch_links = network_links(topology)
    order = np.argsort(gpu_nic, kind="stable")
    starts = np.searchsorted(gpu_nic[order], nic_links.lower, side="left")
    ends = np.searchsorted(gpu_nic[order], nic_links.lower, side="right")
    per_nic = ends - starts
    link_index = np.repeat(np.arange(nic_links.count), per_nic)
    offset = np.arange(link_index.size) - np.repeat(np.cumsum(per_nic) - per_nic, per_nic)
    gpu_index = order[np.repeat(starts, per_nic) + offset]
    lines += _rows(ids[gpus[gpu_index]], ids[nic_links.upper[link_index]],
                   nic_links.gbps[link_index] / sharing[gpu_index], nic_links.latency_ns[link_index])
    if sharing.max(initial=1) > 1:
        notes.append(f"a NIC serves {int(sharing.max())} GPUs: SimAI folds NICs into GPUs, so each of them gets "
                     f"1/{int(sharing.max())} of the NIC's links")
    lines += _rows(ids[switch_links.lower], ids[switch_links.upper], switch_links.gbps, switch_links.latency_ns)
    header = [f"{gpus.size + domains.size + switches.size} {g} {domains.size} {switches.size} {len(lines)} "
              f"{_gpu_type(server.gpu)}",
              " ".join(str(i) for i in range(gpus.size, gpus.size + domains.size + switches.size)) + " "]
    text = "\n".join(header + lines) + "\n"
    return Export(files=(("", text.encode()),), notes=tuple(notes),
                  summary=f"{gpus.size:,} GPUs, {domains.size + switches.size:,} switches, {len(lines):,} links")


def _rows(a, b, gbps, latency_ns) -> list[str]:
    return [f"{x} {y} {_gbps(c)}Gbps {_ms(t)}ms 0" for x, y, c, t in
            zip(np.asarray(a).tolist(), np.asarray(b).tolist(), np.asarray(gbps).tolist(), np.asarray(latency_ns).tolist())]


def _gbps(value: float) -> str:
    return f"{value:.6g}"


def _ms(latency_ns: float) -> str:
    return f"{latency_ns / 1e6:.9g}"
