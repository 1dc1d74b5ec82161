"""htsim fat-tree ``.topo`` (the file ASTRA-sim's htsim back end takes with ``--htsim_opts -topo FILE``).

Header ``Nodes N``, ``Tiers T``, ``Podsize P``; then a block per tier ``Tier t`` with
``Downlink_speed_Gbps`` (the links below tier t), ``Radix_Down`` (ports down per switch), ``Radix_Up``
(ports up; absent on the top tier), ``Downlink_Latency_ns``, ``Switch_Latency_ns`` and, above tier 0,
``Bundle`` (parallel links between a switch and each switch below it that it reaches).

htsim nodes are the NIC ports of one plane in leaf order: node ``h`` is the ``h % Radix_Down``-th port of
leaf ``h // Radix_Down`` (on a rail fabric that is not server order). Only what htsim's regular fat-tree
holds is written: two or three tiers, whole pods, the same whole number of parallel links
between every pair of adjacent switches that meet, every leaf serving the same number of NIC ports (htsim
has no empty ports), one tree for all nodes. Anything else (rail-only and
same-rail fabrics, spread wiring, partial builds, RailX, imported fabrics that are not trees) is refused
with the reason. A multi-plane design is written as one of its identical planes, with a note.
"""

from __future__ import annotations

import numpy as np

from ..catalog import Catalog
from ..spec import Design
from ..topology import Topology
from .base import Export, ExportOptions, network_links


def _refuse(design: Design, why: str, hint: str = ""):
    return design.infeasible("fabric", f"htsim's fat-tree cannot hold this design: {why}", hint)


def write(topology: Topology, design: Design, catalog: Catalog, options: ExportOptions) -> Export:
    """The ``.topo`` of one plane of a regular folded Clos."""
    tree = topology.layout.tree
    if topology.layout.family != "clos" or tree is None:
        raise _refuse(design, "it is not a folded Clos", "export it to simai or infragraph")
    plan = tree.plan
    if plan.tiers < 2:
        raise _refuse(design, "a single switch is not a fat-tree of two or three tiers", "")
    if tree.aggregation in ("rail-only", "same-rail") or plan.core_islands > 1:
        raise _refuse(design, f"a {tree.aggregation} fabric is a separate Clos per rail, not one fat-tree",
                      "export it to simai or infragraph")
    if not plan.leaf_spine_links or (plan.tiers == 3 and not plan.spine_core_links):
        raise _refuse(design, "its switches do not all have the same whole number of links to each switch above",
                      "choose a leaf uplink count the spine count divides")
    nic_links, switch_links = network_links(topology)
    plane0 = topology.plane[nic_links.upper] == 0
    per_leaf = np.bincount(np.unique(nic_links.upper[plane0], return_inverse=True)[1])
    if per_leaf.min() != per_leaf.max() or plan.endpoints != plan.leaves * per_leaf.max():
        raise _refuse(design, f"its leaves serve different numbers of NIC ports ({per_leaf.min()} to "
                      f"{per_leaf.max()})", "use a cluster that fills every leaf alike")
    down0 = int(per_leaf[0])      # ports in use: htsim has no empty ports
    pod_size = plan.endpoints if plan.tiers == 2 else plan.leaves_per_pod * down0
    if plan.tiers == 3 and plan.leaves % plan.leaves_per_pod:
        raise _refuse(design, "its last pod is partial", f"use a multiple of {pod_size} NIC ports per plane")
    speeds = [float(nic_links.gbps[plane0].max())]
    latencies = [float(nic_links.latency_ns[plane0].max())]
    for tier in range(plan.tiers - 1):
        up = (topology.tier[switch_links.lower] == tier) & (topology.plane[switch_links.lower] == 0)
        speeds.append(float(switch_links.gbps[up].max()))
        latencies.append(float(switch_links.latency_ns[up].max()))
    radix_down = [down0, plan.leaves_per_pod * plan.leaf_spine_links]
    if plan.tiers == 3:
        radix_down.append(plan.pods * plan.spine_core_links)
    radix_up = [plan.up[0], plan.up[1]] if plan.tiers == 3 else [plan.up[0]]
    bundles = [None, plan.leaf_spine_links, plan.spine_core_links]
    lines = [f"Nodes {plan.endpoints}", f"Tiers {plan.tiers}", f"Podsize {pod_size}"]
    for tier in range(plan.tiers):
        model = catalog.switches.get(tree.switch_models[tier])
        lines += ["", f"Tier {tier}", f"Downlink_speed_Gbps {speeds[tier]:g}", f"Radix_Down {radix_down[tier]}"]
        if tier < plan.tiers - 1:
            lines.append(f"Radix_Up {radix_up[tier]}")
        lines.append(f"Downlink_Latency_ns {latencies[tier]:g}")
        lines.append(f"Switch_Latency_ns {model.latency_ns if model is not None else 0:g}")
        if tier:
            lines.append(f"Bundle {bundles[tier]}")
    notes = ["htsim node h is NIC port h % Radix_Down of leaf h // Radix_Down (leaf order, plane 0)"]
    if topology.layout.planes > 1:
        notes.append(f"one of the design's {topology.layout.planes} identical planes: each carries "
                     f"1/{topology.layout.planes} of a NIC's traffic")
    return Export(files=(("", ("\n".join(lines) + "\n").encode()),), notes=tuple(notes),
                  summary=f"{plan.endpoints:,} nodes, {plan.tiers} tiers, pods of {pod_size:,}")
