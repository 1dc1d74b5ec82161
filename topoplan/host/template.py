"""Host graphs from server templates (``host:`` in ``catalogs/servers.yaml``).

Contract: one CPU node per socket; each PCIe switch of the template under its socket, with an uplink of
``lanes`` at its generation; the GPUs and NICs listed under a switch hang from it on x16 links of the
same generation; a GPU or NIC listed under no switch hangs from a socket root port at the server's
``pcie_gen`` (GPUs and NICs spread over sockets in order). With ``nvlinks`` > 0 every GPU pair is
``NV<nvlinks>`` through the NVLink domain at the server's per-GPU NVLink rate. Bandwidths follow NCCL's
model, the same rules the NCCL XML importer applies, so a template and a dump of the same machine agree.
Counts: ``sockets`` CPUs, ``len(switches)`` PCIe switches, the server's GPUs and NICs.
"""

from __future__ import annotations

from ..catalog import Catalog, Server
from .graph import HostGraph

# NCCL's per-lane figure (100 Mb/s units) by PCIe generation; GB/s = lanes * figure / 80
_LANE = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480, 7: 960}
# NCCL's inter-socket bandwidth for GPU traffic, GB/s
INTER_SOCKET_GBPS = {"intel-skl": 10.0, "intel-spr": 22.0, "intel-emr": 40.0, "amd": 16.0}


def pcie_GBps(gen: int, lanes: int = 16) -> float:
    return lanes * _LANE[gen] / 80


def host_graph(server: Server, catalog: Catalog) -> HostGraph:
    """The host graph of ``server``; a server without a template gets one socket with every device on it."""
    template = server.host or {"sockets": 1, "cpu": "intel-spr", "nvlinks": 0, "switches": []}
    nic = catalog.nics[server.nic]
    graph = HostGraph(source=f"catalog template {server.id}")
    sockets = [graph.add("cpu", f"cpu{s}", -1, None) for s in range(template["sockets"])]
    graph.inter_cpu_GBps = INTER_SOCKET_GBPS[template["cpu"]] if template["sockets"] > 1 else None
    placed_gpus, placed_nics = {}, {}
    for index, switch in enumerate(template["switches"]):
        node = graph.add("pci", f"switch{index}", sockets[switch["socket"]], pcie_GBps(switch["gen"], switch["lanes"]))
        for g in switch["gpus"]:
            placed_gpus[g] = (node, switch["gen"])
        for n in switch["nics"]:
            placed_nics[n] = (node, switch["gen"])
    gpus = []
    for g in range(server.gpus):
        parent, gen = placed_gpus.get(g, (sockets[g * len(sockets) // server.gpus], server.pcie_gen))
        gpus.append(graph.add("gpu", f"GPU{g}", parent, pcie_GBps(gen)))
    for n in range(server.nics):
        parent, gen = placed_nics.get(n, (sockets[n * len(sockets) // server.nics], server.pcie_gen))
        node = graph.add("nic", f"NIC{n}", parent, pcie_GBps(gen))
        graph.nic_GBps[node] = nic.ports * nic.port_speed_gbps / 8
    if template["nvlinks"] and server.nvlink_gbps > 0:
        for a in gpus:
            graph.nvlink_GBps[a] = server.nvlink_gbps / 8
            for b in gpus:
                if a != b:
                    graph.nvlink[(a, b)] = template["nvlinks"]
    return graph
