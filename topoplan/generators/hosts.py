"""The server side every fabric generator shares: GPUs, the NVLink domain, NICs and their ports.

Per server (``g`` GPUs, ``n`` NICs of ``p`` ports each):

* ``g`` GPU nodes (group ``rail`` = the index of the NIC serving the GPU), one ``nvswitch`` node standing for
  the server's NVLink domain when the server has NVLink (one GPU-NVSwitch link per GPU at the GPU's
  one-direction NVLink rate; the switch itself is non-blocking), and ``n`` NIC nodes (``rail`` = NIC index);
* one PCIe link from each GPU to the NIC that serves it (``gpu_nics`` in the catalog), at the raw
  payload rate of the server's GPU-NIC PCIe path;
* NIC port ``j`` belongs to plane ``j mod planes``: the fabric sees ``S * n * p / planes`` endpoints per
  plane, ordered by server, then NIC, then port.

Totals: ``S*g`` GPUs, ``S*n`` NICs, ``S`` NVLink domains (if any), ``S*g`` PCIe links, ``S*g`` NVLink links.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..catalog import Catalog, Nic, Server, pcie_gbps
from ..spec import Design
from ..topology import TopologyBuilder

# Typical cable runs by reach class, for propagation delay (about 5 ns per metre in fibre and copper).
REACH_M = {"in-rack": 2.0, "in-row": 30.0, "cross-row": 150.0}
NS_PER_M = 5.0
# Arrays beyond this many arcs would not fit in memory next to the flow solver's working set.
MAX_ARCS = 120_000_000


def check_fits_in_memory(design: Design, arcs: int, where: str = "cluster",
                         hint: str = "model one pod or plane of it") -> None:
    """The one memory-size guard of the generators: refuse, before any array is allocated, a fabric of more
    than ``MAX_ARCS`` arcs."""
    if arcs > MAX_ARCS:
        raise design.infeasible(where, f"this fabric has {arcs // 2:,} links, more than topoplan holds in "
                                f"memory ({MAX_ARCS // 2:,})", hint)


def medium_for(reach_class: str) -> str:
    return "copper" if reach_class == "in-rack" else "optical"


def cable_latency_ns(reach_class: str) -> float:
    return REACH_M[reach_class] * NS_PER_M


@dataclass
class Hosts:
    server: Server
    nic: Nic
    servers: int
    endpoints: np.ndarray        # NIC node id of each fabric-facing port of a plane, in order
    link_gbps: float             # rate of every NIC-switch link

    @property
    def injection_gbps_per_gpu(self) -> float:
        return self.nic.ports * self.server.nics * self.link_gbps / self.server.gpus


def check_nic_planes(design: Design, catalog: Catalog) -> None:
    server = catalog.servers[design.cluster.server]
    nic = catalog.nics[server.nic]
    planes = design.fabric.planes
    if nic.ports % planes:
        raise design.infeasible("fabric.planes", f"{planes} planes need the NIC's ports to split evenly over "
                                f"them, but {nic.id} has {nic.ports} port(s)",
                                "use a NIC with a port per plane (e.g. nvidia-connectx-8-2x400g for 2 planes)")


def add_hosts(builder: TopologyBuilder, design: Design, catalog: Catalog, link_gbps: float) -> Hosts:
    """Add every server's GPUs, NVLink domain and NICs; return the fabric-facing endpoints per plane."""
    check_nic_planes(design, catalog)
    server = catalog.servers[design.cluster.server]
    nic = catalog.nics[server.nic]
    S, g, n, p, planes = design.cluster.servers, server.gpus, server.nics, nic.ports, design.fabric.planes
    gpu_server = np.repeat(np.arange(S, dtype=np.int32), g)
    # a GPU's rail is the NIC (index in its server) that serves it
    gpus = builder.add_nodes("gpu", S * g, "gpu", model=None, server=gpu_server,
                             rail=np.tile(np.asarray(server.gpu_nics, dtype=np.int32), S))
    if server.nvlink_gbps > 0:
        domains = builder.add_nodes("nvswitch", S, "nvlink", server=np.arange(S, dtype=np.int32))
        builder.add_links(gpus, domains[gpu_server], server.nvlink_gbps, 0.0, "nvlink", "host")
    nic_server = np.repeat(np.arange(S, dtype=np.int32), n)
    nics = builder.add_nodes("nic", S * n, "nic", model=nic.id, server=nic_server,
                             rail=np.tile(np.arange(n, dtype=np.int32), S))
    if design.cluster.expand_hosts:
        _add_pcie_trees(builder, design, server, gpus, nics)
    else:
        nic_of_gpu = nics[gpu_server * n + np.tile(np.asarray(server.gpu_nics, dtype=np.int64), S)]
        builder.add_links(gpus, nic_of_gpu, pcie_gbps(server.pcie_gen, server.pcie_lanes), 0.0, "pcie", "host")

    # every plane sees the same endpoints: each NIC's ports of that plane, server-major, then NIC, then port
    endpoints = np.repeat(nics, p // planes)
    return Hosts(server=server, nic=nic, servers=S, endpoints=endpoints, link_gbps=link_gbps)


def _add_pcie_trees(builder: TopologyBuilder, design: Design, server: Server, gpus, nics) -> None:
    """``cluster.expand_hosts``: every server's PCIe tree from its catalog template (CPU sockets, PCIe
    switches, the inter-socket link) in place of direct GPU-NIC links, at NCCL-model rates, so GPUs that
    share a switch or a NIC share its links. Same layout as ``host/template.py``."""
    from ..host.template import INTER_SOCKET_GBPS, pcie_GBps

    template = server.host
    if not template:
        raise design.infeasible("cluster.expand_hosts", f"server '{server.id}' has no PCIe template (host:) in the "
                                "catalog", "add one with --catalog FILE, or set expand_hosts: false")
    S, k, switches = design.cluster.servers, template["sockets"], template["switches"]
    m = len(switches)
    per_server = np.arange(S, dtype=np.int64)
    cpus = builder.add_nodes("cpu", S * k, "cpu", server=np.repeat(per_server, k))
    if k > 1:
        hub = cpus[per_server * k]
        for socket in range(1, k):
            builder.add_links(hub, cpus[per_server * k + socket], INTER_SOCKET_GBPS[template["cpu"]] * 8, 0.0,
                              "pcie", "host")
    if m:
        boxes = builder.add_nodes("pcie_switch", S * m, "pcie-switch", server=np.repeat(per_server, m))
        socket_of = np.array([sw["socket"] for sw in switches])
        uplink = np.array([pcie_GBps(sw["gen"], sw["lanes"]) * 8 for sw in switches])
        builder.add_links(boxes, cpus[np.repeat(per_server * k, m) + np.tile(socket_of, S)], np.tile(uplink, S), 0.0,
                          "pcie", "host")
    for devices, count, key in ((gpus, server.gpus, "gpus"), (nics, server.nics, "nics")):
        # per local device: (parent is a switch?, index of the switch or socket, link Gb/s)
        under, index, rate = np.zeros(count, bool), np.zeros(count, np.int64), np.zeros(count)
        for i in range(count):
            index[i], rate[i] = i * k // count, pcie_GBps(server.pcie_gen) * 8
        for j, sw in enumerate(switches):
            for i in sw[key]:
                under[i], index[i], rate[i] = True, j, pcie_GBps(sw["gen"]) * 8
        local = np.tile(np.arange(count), S)
        owner = np.repeat(per_server, count)
        parent = np.where(under[local], 0, cpus[owner * k + index[local]])
        if m:
            parent = np.where(under[local], boxes[owner * m + index[local]], parent)
        builder.add_links(devices, parent, rate[local], 0.0, "pcie", "host")


def link_speed(nic, leaf) -> tuple[float, float]:
    """(rate of the NIC-switch links, the leaf port speed they run on): the NIC port speed, unless the
    leaf switch's ports are slower."""
    _ports, port_speed = leaf.radix_at(nic.port_speed_gbps)
    return min(nic.port_speed_gbps, port_speed), port_speed


def tier_speeds(design: Design, catalog: Catalog, nic_link_gbps: float) -> tuple[tuple, tuple]:
    """Link speed per link tier (leaf = the NIC links, spine, core) and the lanes each takes at the switch
    below it: ``((leaf, spine, core) Gb/s, (spine / leaf, core / spine))``. ``fabric.link_gbps`` sets spine
    and core; a missing one runs at the speed of the tier below. Raises ``InfeasibleDesign`` when a speed is
    not a whole multiple of the one below, or a switch at either end has no port mode at that speed."""
    asked = design.fabric.link_gbps
    speeds = [nic_link_gbps]
    for tier, below, above in (("spine", "leaf", "spine"), ("core", "spine", "core")):
        speed = float(asked.get(tier, speeds[-1]))
        if tier in asked:
            lanes = speed / speeds[-1]
            if lanes < 1 or abs(lanes - round(lanes)) > 1e-9:
                raise design.infeasible(f"fabric.link_gbps.{tier}", f"{speed:g} Gb/s is not a whole multiple of the "
                                        f"{speeds[-1]:g} Gb/s links below it",
                                        f"use {speeds[-1]:g} Gb/s or a multiple of it")
            for end in (below, above):
                switch = catalog.switches[design.fabric.switch[end]]
                if switch.radix_at(speed)[1] != speed:
                    modes = ", ".join(f"{m.port_speed_gbps:g}" for m in switch.modes())
                    raise design.infeasible(f"fabric.link_gbps.{tier}", f"the {end} switch {switch.id} has no "
                                            f"{speed:g} Gb/s ports (its modes: {modes} Gb/s)",
                                            "use one of its port speeds")
        speeds.append(speed)
    return tuple(speeds), (round(speeds[1] / speeds[0]), round(speeds[2] / speeds[1]))


def resolve_link_speed(design: Design, catalog: Catalog, warnings: list) -> float:
    """``link_speed`` of the design's NIC and leaf, with a warning when either runs below its speed."""
    server = catalog.servers[design.cluster.server]
    nic = catalog.nics[server.nic]
    leaf = catalog.switches[design.fabric.switch["leaf"]]
    link, port_speed = link_speed(nic, leaf)
    if link < nic.port_speed_gbps:
        warnings.append(f"{nic.id} ports ({nic.port_speed_gbps:g} Gb/s) run at {link:g} Gb/s, the fastest "
                        f"port speed of {leaf.id}")
    elif port_speed > link:
        warnings.append(f"{leaf.id} has no {link:g} Gb/s port mode; links run at {link:g} Gb/s on its "
                        f"{port_speed:g} Gb/s ports")
    return link
