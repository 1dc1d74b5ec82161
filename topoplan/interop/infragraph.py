"""InfraGraph infrastructure (Keysight's OpenAPI schema, ``infragraph`` 3.x): ``devices``, ``links``,
``instances`` and ``edges``, as JSON (default) or YAML (an output ending in ``.yaml``/``.yml``).

* one server device (the catalog server): components ``xpu`` (its GPUs), ``nic`` (its NICs), ``nicport``
  (their ports, when a NIC has more than one), ``nvlsw`` (its NVLink domain, when it has NVLink); device
  edges: every ``xpu`` to ``nvlsw`` over ``nvlink``, each ``xpu`` to the ``nic`` serving it over ``pcie``,
  each ``nic`` to its ports;
* one switch device per switch model, with ``port`` components (the catalog's port count at the link
  speed, at least the ports used);
* instances: ``server`` (count = servers), then ``leaf``, ``spine`` and ``core`` (all planes, plane-major);
* one infrastructure edge (``one2one``) per network link, ``server[s]`` / ``nic[i]`` (or ``nicport[k]``)
  to ``leaf[l]`` / ``port[p]``, ports numbered in link order on every switch; RailX circuits join
  ``server[s]`` / ``xpu[i]`` directly. Links are named by tier and speed (``leaf-400g``) and carry
  ``physical.bandwidth.gigabits_per_second`` and ``physical.latency.ns``.

Links inside a server (NVLink, PCIe) are the device's edges, not repeated per server; OCS devices carry no
packets and are not listed (their circuits are). ``expand_hosts`` PCIe trees are summarised by the
GPU-NIC edges of the catalog's ``gpu_nics``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import yaml

from ..catalog import Catalog
from ..spec import Design
from ..topology import KIND, LINK_TIER, LINK_TIERS, SWITCH_TIERS, Topology
from .base import Export, ExportOptions


def _component(name: str, count: int, choice: str, description: str = "") -> dict:
    out = {"name": name, "description": description, "count": int(count), "choice": choice}
    out[choice] = {"type": name} if choice == "custom" else {}
    return out


def _link(name: str, gbps: float, latency_ns: float, description: str = "") -> dict:
    return {"name": name, "description": description,
            "physical": {"bandwidth": {"choice": "gigabits_per_second", "gigabits_per_second": float(gbps)},
                         "latency": {"choice": "ns", "ns": float(latency_ns)}}}


def _edge(ep1: tuple, ep2: tuple, link: str, scheme: str = "one2one", device: bool = False) -> dict:
    if device:
        return {"ep1": {"component": ep1}, "ep2": {"component": ep2}, "scheme": scheme, "link": link}
    return {"ep1": {"instance": ep1[0], "component": ep1[1]}, "ep2": {"instance": ep2[0], "component": ep2[1]},
            "scheme": scheme, "link": link}


def server_device(server, nic) -> dict:
    g, n, p = server.gpus, server.nics, nic.ports
    components = [_component("xpu", g, "xpu", server.gpu), _component("nic", n, "nic", nic.id)]
    links = [_link("pcie", _pcie_gbps(server), 0.0, f"PCIe Gen{server.pcie_gen} x{server.pcie_lanes}")]
    edges = [_edge(f"xpu[{i}]", f"nic[{server.gpu_nics[i]}]", "pcie", device=True) for i in range(g)]
    if p > 1:
        components.append(_component("nicport", n * p, "port", f"{p} ports per NIC"))
        links.append(_link("nic-port", nic.port_speed_gbps, 0.0, "a NIC to its ports"))
        edges += [_edge(f"nic[{i}]", f"nicport[{i * p}:{(i + 1) * p}]", "nic-port", "many2many", device=True)
                  for i in range(n)]
    if server.nvlink_gbps > 0:
        components.append(_component("nvlsw", 1, "switch", "NVLink domain"))
        links.append(_link("nvlink", server.nvlink_gbps, 0.0, "one direction per GPU"))
        edges.append(_edge("xpu", "nvlsw", "nvlink", "many2many", device=True))
    return {"name": server.id, "description": server.description, "components": components, "links": links,
            "edges": edges}


def _pcie_gbps(server) -> float:
    from ..catalog import pcie_gbps

    return pcie_gbps(server.pcie_gen, server.pcie_lanes)


def _port_numbers(ends: np.ndarray) -> np.ndarray:
    """Per link end, its port on its node: 0, 1, ... in link order."""
    order = np.argsort(ends, kind="stable")
    first = np.searchsorted(ends[order], ends[order], side="left")
    port = np.empty(ends.size, np.int64)
    port[order] = np.arange(ends.size) - first
    return port


@dataclass
class EdgeColumns:
    """The infrastructure edges as columns of strings (one row per network link)."""

    instance1: list
    component1: list
    instance2: list
    component2: list
    link: list

    def as_dicts(self) -> list:
        return [_edge((i1, c1), (i2, c2), link) for i1, c1, i2, c2, link in
                zip(self.instance1, self.component1, self.instance2, self.component2, self.link)]

    def as_json(self) -> str:
        return ",".join(f'{{"ep1":{{"instance":"{i1}","component":"{c1}"}},"ep2":{{"instance":"{i2}",'
                        f'"component":"{c2}"}},"scheme":"one2one","link":"{link}"}}' for i1, c1, i2, c2, link in
                        zip(self.instance1, self.component1, self.instance2, self.component2, self.link))


def infrastructure(topology: Topology, design: Design, catalog: Catalog) -> dict:
    """The InfraGraph ``Infrastructure`` of ``topology`` as plain data, its edges as ``EdgeColumns``."""
    server = catalog.servers[design.cluster.server]
    nic = catalog.nics[server.nic]
    kind = topology.kind
    devices = [server_device(server, nic)]
    instances = [{"name": "server", "device": server.id, "count": design.cluster.servers}]
    # every node's (instance, component, index) for the ends of network links
    instance_of = np.full(topology.num_nodes, -1, np.int64)
    local = np.full(topology.num_nodes, -1, np.int64)
    gpus = topology.gpus
    instance_of[gpus] = topology.server[gpus]
    local[gpus] = np.arange(gpus.size) % server.gpus
    nics = topology.nodes_of("nic")
    instance_of[nics] = topology.server[nics]
    local[nics] = np.arange(nics.size) % server.nics
    network = np.flatnonzero(topology.link_tier[0::2] != LINK_TIER["host"])
    a, b = topology.src[0::2][network].astype(np.int64), topology.dst[0::2][network].astype(np.int64)
    ends = np.concatenate([a, b])
    port = _port_numbers(ends)
    switch_instance, switch_index = {}, np.full(topology.num_nodes, -1, np.int64)
    switches = topology.nodes_of("switch")
    degree = np.bincount(ends, minlength=topology.num_nodes)
    for tier, tier_name in enumerate(SWITCH_TIERS):
        members = switches[topology.tier[switches] == tier]
        if not members.size:
            continue
        models = {topology.model_of(int(m)) for m in members}
        model = sorted(models)[0]
        entry = catalog.switches.get(model)
        ports = max(int(degree[members].max()), entry.ports if entry is not None else 0)
        device_name = f"{model or 'switch'}-{tier_name}" if len(models) == 1 else f"switch-{tier_name}"
        devices.append({"name": device_name, "description": entry.description if entry else "",
                        "components": [_component("asic", 1, "switch"), _component("port", ports, "port")],
                        "links": [{"name": "ic", "description": "switch fabric"}],
                        "edges": [_edge("asic", "port", "ic", "many2many", device=True)]})
        instances.append({"name": tier_name, "device": device_name, "count": int(members.size)})
        switch_instance[tier] = tier_name
        switch_index[members] = np.arange(members.size)
    # each link end as (instance, component) strings; ports numbered per switch (and per NIC) in link order
    instance = [""] * topology.num_nodes
    for node in np.flatnonzero(instance_of >= 0).tolist():
        instance[node] = f"server[{instance_of[node]}]"
    for node in np.flatnonzero(switch_index >= 0).tolist():
        instance[node] = f"{switch_instance[int(topology.tier[node])]}[{switch_index[node]}]"
    p = nic.ports
    kinds, local_l, port_l = kind.tolist(), local.tolist(), port.tolist()
    switch_kind, nic_kind = KIND["switch"], KIND["nic"]

    def component(node: int, on_node: int) -> str:
        k = kinds[node]
        if k == switch_kind:
            return f"port[{on_node}]"
        if k == nic_kind:
            return f"nicport[{local_l[node] * p + on_node}]" if p > 1 else f"nic[{local_l[node]}]"
        return f"xpu[{local_l[node]}]"

    capacity = topology.capacity_gbps[0::2][network]
    latency = topology.latency_ns[0::2][network]
    tiers = topology.link_tier[0::2][network]
    keys, link_of = np.unique(np.stack([tiers, capacity, latency]).T, axis=0, return_inverse=True)
    link_names = [f"{LINK_TIERS[int(t)]}-{c:g}g-{lat:g}ns" for t, c, lat in keys.tolist()]
    links = [_link(name, c, lat, f"{LINK_TIERS[int(t)]} tier") for name, (t, c, lat) in zip(link_names, keys.tolist())]
    m = a.size
    a_l, b_l = a.tolist(), b.tolist()
    edges = EdgeColumns([instance[x] for x in a_l], [component(x, port_l[i]) for i, x in enumerate(a_l)],
                        [instance[y] for y in b_l], [component(y, port_l[m + i]) for i, y in enumerate(b_l)],
                        [link_names[i] for i in link_of.ravel().tolist()])
    return {"name": design.name, "description": design.description or design.name, "devices": devices,
            "links": links, "instances": instances, "edges": edges}


def write(topology: Topology, design: Design, catalog: Catalog, options: ExportOptions) -> Export:
    """The InfraGraph infrastructure of ``design``: JSON, or YAML when the output ends in .yaml/.yml."""
    data = infrastructure(topology, design, catalog)
    edges = data["edges"]
    notes = []
    if (topology.kind == KIND["ocs"]).any():
        notes.append("optical circuit switches carry no packets: their circuits are edges between xpus")
    if design.cluster.expand_hosts:
        notes.append("the servers' PCIe trees are summarised by one GPU-NIC edge per GPU")
    if options.suffix in (".yaml", ".yml"):
        data["edges"] = edges.as_dicts()
        text = yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False, width=120)
    else:
        data["edges"] = []
        head = json.dumps(data, separators=(",", ":"))
        text = head[:-len("[]}")] + "[" + edges.as_json() + "]}"   # the edges, written without a dict each
    return Export(files=(("", text.encode()),), notes=tuple(notes),
                  summary=f"{len(edges.link):,} edges, {sum(i['count'] for i in data['instances']):,} instances")
