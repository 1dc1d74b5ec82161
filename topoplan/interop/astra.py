"""ASTRA-sim inputs for its analytical network back end: ``network.yml``, ``system.json``,
``remote_memory.json`` and ``NOTES.md`` (what the model cannot express here), in one directory.

ASTRA-sim's analytical model is symmetric and multi-dimensional: NPUs form ``npus_count[0] x
npus_count[1] x ...`` and dimension ``d`` joins the NPUs that differ only in coordinate ``d``, by a
``Ring``, ``FullyConnected`` or ``Switch`` of ``bandwidth[d]`` GB/s per NPU and ``latency[d]`` ns. A
tree-structured topoplan fabric maps to:

* dimension 0, the server's GPUs (when more than one): ``Switch`` over the NVLink domain at the GPU's
  one-direction NVLink rate, or over PCIe at the GPU-NIC PCIe rate when the server has no NVLink;
* dimension 1, the servers (when more than one): ``Switch`` at the GPU's network injection rate (every
  NIC port of every plane), latency the propagation and switch cut-through across the fabric's diameter.

What this cannot express, and ``NOTES.md`` says so for the design at hand: oversubscription (the model's
switch is non-blocking), the rails (dimension 1 joins GPUs of one local index across servers: exact on a
rail-only fabric, while on a fat-tree or rail-optimized fabric any GPU reaches any other directly or over
PXN), planes and per-tier speeds. A RailX grid or an imported fabric that is not a tree is refused: its
dimensions do not have one bandwidth each. The system JSON carries the design's collective algorithms
(ring, direct, double binary tree; NCCL-only algorithms fall back to ring, with a note).
"""

from __future__ import annotations

import json

from ..catalog import Catalog, pcie_gbps
from ..spec import Design
from ..topology import Topology
from .base import Export, ExportOptions, network_links

# topoplan algorithm -> ASTRA-sim collective implementation
IMPLEMENTATION = {"ring": "ring", "hierarchical": "ring", "direct": "direct", "tree": "doubleBinaryTree"}
OP_KEYS = {"allreduce": "all-reduce-implementation", "allgather": "all-gather-implementation",
           "reducescatter": "reduce-scatter-implementation", "alltoall": "all-to-all-implementation"}
# topoplan's stress ops (flow/algorithms.py): no collective implementation to choose, so nothing is written
POINT_TO_POINT = ("permutation", "incast")


def dimensions(topology: Topology, design: Design, catalog: Catalog) -> tuple[list, list]:
    """([(topology, npus, GB/s, ns), ...] innermost first, notes); ``InfeasibleDesign`` when the fabric has no
    symmetric multi-dimensional form."""
    layout = topology.layout
    if layout.family == "railx":
        raise design.infeasible("fabric.topology", "astra-sim's analytical model gives each dimension one ring, "
                                "full mesh or switch; a RailX grid's rails form several rings per row and column "
                                "(one per rail), which it cannot express", "export RailX to simai or infragraph")
    if layout.family != "clos":
        raise design.infeasible("fabric.topology", "astra-sim's analytical model needs a symmetric fabric; this "
                                "imported fabric is not a tree whose tiers are wired alike",
                                "export it to simai or infragraph, which list every link")
    server = catalog.servers[design.cluster.server]
    g, servers = server.gpus, design.cluster.servers
    dims, notes = [], []
    if g > 1:
        if server.nvlink_gbps > 0:
            dims.append(("Switch", g, server.nvlink_gbps / 8, 0.0))
            notes.append("dimension 0 (NVLink domain): latency 0 ns, as the catalog has no NVSwitch latency; "
                         "set a measured one (ASTRA-sim's validated HGX-H100 file uses 936.25 ns)")
        else:
            dims.append(("Switch", g, pcie_gbps(server.pcie_gen, server.pcie_lanes) / 8, 0.0))
            notes.append("dimension 0: the server has no NVLink, so its GPUs meet over PCIe at the GPU-NIC rate")
    if servers > 1:
        dims.append(("Switch", servers, layout.injection_gbps_per_gpu / 8, _diameter_latency_ns(topology, catalog)))
    if not dims:
        raise design.infeasible("cluster", "a single GPU has no network to simulate", "")
    over = design.fabric.oversubscription
    if servers > 1 and (over["leaf"] > 1 or over["spine"] > 1):
        notes.append(f"oversubscription (leaf {over['leaf']:g}:1, spine {over['spine']:g}:1) is not expressed: "
                     "the model's switch is non-blocking, so cross-leaf traffic runs at the full injection rate")
    if servers > 1 and g > 1:
        aggregation = layout.tree.aggregation if layout.tree is not None else ""
        if aggregation == "rail-only":
            notes.append("rails: dimension 1 joins the GPUs of one local index across servers, exactly this "
                         "rail-only fabric's rails")
        else:
            notes.append("rails: dimension 1 joins only GPUs of the same local index across servers; here any "
                         "GPU reaches any other over the fabric, which the model routes through dimension 0 first")
    if design.fabric.planes > 1:
        notes.append(f"the {design.fabric.planes} planes are folded into dimension 1's bandwidth")
    if len(set(topology.link_gbps_by_tier().values())) > 1:
        notes.append("per-tier link speeds are not expressed; dimension 1 runs at the GPU's injection rate")
    return dims, notes


def _diameter_latency_ns(topology: Topology, catalog: Catalog) -> float:
    """One way across the fabric's diameter: the slowest cable of each tier crossed twice (up and down) and
    the cut-through latency of every switch on the way."""
    nic_links, switch_links = network_links(topology)
    tiers = topology.layout.tiers
    cable = float(nic_links.latency_ns.max(initial=0.0))
    for tier in range(tiers - 1):
        up = topology.tier[switch_links.lower] == tier
        cable += float(switch_links.latency_ns[up].max(initial=0.0))
    switches = topology.nodes_of("switch")
    per_tier = []
    for tier in range(tiers):
        models = {topology.model_of(int(n)) for n in switches[topology.tier[switches] == tier][:1]}
        per_tier.append(max((catalog.switches[m].latency_ns for m in models if m in catalog.switches), default=0.0))
    through = 2 * sum(per_tier[:-1]) + (per_tier[-1] if per_tier else 0.0)
    return 2 * cable + through


def _implementations(design: Design, ndims: int) -> tuple[dict, list]:
    keys, notes = {}, []
    for c in design.workload.collectives:
        key = OP_KEYS.get(c.op)
        if c.op in POINT_TO_POINT:
            notes.append(f"collective {c.name}: {c.op} is a pattern of point-to-point flows, not an ASTRA-sim "
                         "collective; system.json has no setting for it (write its sends in the Chakra workload)")
        if key is None or key in keys:
            continue
        chosen = IMPLEMENTATION.get(c.algorithm)
        if chosen is None:
            chosen = "direct" if c.op == "alltoall" else "ring"
            notes.append(f"collective {c.name}: topoplan's '{c.algorithm}' has no ASTRA-sim counterpart; {chosen} is "
                         "written")
        keys[key] = [chosen] * ndims
    for op, key in OP_KEYS.items():
        keys.setdefault(key, ["direct" if op == "alltoall" else "ring"] * ndims)
    return keys, notes


def write(topology: Topology, design: Design, catalog: Catalog, options: ExportOptions) -> Export:
    """The analytical network YAML, system JSON, remote-memory JSON and NOTES.md of ``design``."""
    dims, notes = dimensions(topology, design, catalog)
    server = catalog.servers[design.cluster.server]
    gpu = catalog.gpus.get(server.gpu.lower())
    implementations, more = _implementations(design, len(dims))
    notes += more

    def row(values, fmt):
        return "[ " + ", ".join(fmt(v) for v in values) + " ]"

    network = "\n".join([
        f"# ASTRA-sim analytical network for {design.name} ({design.gpus:,} NPUs), written by topoplan; see NOTES.md",
        "topology: " + row([d[0] for d in dims], str),
        "npus_count: " + row([d[1] for d in dims], str),
        "bandwidth: " + row([d[2] for d in dims], lambda v: f"{v:.1f}") + "  # GB/s",
        "latency: " + row([d[3] for d in dims], lambda v: f"{v:.2f}") + "  # ns",
    ]) + "\n"
    system = {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
              "preferred-dataset-splits": 4, **implementations, "collective-optimization": "localBWAware",
              "local-mem-bw": round(gpu.hbm_tbps * 1000) if gpu is not None and gpu.hbm_tbps else 1600,
              "boost-mode": 0}
    if gpu is None or not gpu.hbm_tbps:
        notes.append("local-mem-bw 1600 GB/s is a placeholder: the catalog has no HBM bandwidth for this GPU")
    readme = "\n".join([f"# ASTRA-sim export of {design.name}", "",
                        f"{design.gpus:,} NPUs in {len(dims)} dimension(s): "
                        + " x ".join(f"{d[1]} ({d[0]}, {d[2]:.1f} GB/s, {d[3]:.0f} ns)" for d in dims) + ".", "",
                        "Run with `--network-configuration=network.yml --system-configuration=system.json "
                        "--remote-memory-configuration=remote_memory.json` and your Chakra workload.", "",
                        "What the symmetric multi-dimensional model does not express here:", ""]
                       + [f"- {n}" for n in notes]) + "\n"
    files = (("network.yml", network.encode()),
             ("system.json", (json.dumps(system, indent=4) + "\n").encode()),
             ("remote_memory.json", b'{\n    "memory-type": "NO_MEMORY_EXPANSION"\n}\n'),
             ("NOTES.md", readme.encode()))
    return Export(files=files, notes=tuple(notes),
                  summary=" x ".join(str(d[1]) for d in dims) + f" NPUs, {len(notes)} note(s)")

