"""The ``topoplan host`` report: path classes, bandwidths, the GPU-NIC assignment and warnings."""

from __future__ import annotations

import json

from ..hostgraph import HostGraph, assign_nics, best_ring, concurrent_GBps, ring_busbw
from .writers import _heading, table


def host_report(graph: HostGraph) -> dict:
    gpus, nics = graph.gpus(), graph.nics()
    name = graph.label
    assignment = assign_nics(graph)
    pairs = []
    for a in gpus:
        for b in gpus + nics:
            if a != b:
                pairs.append({"a": name[a], "b": name[b], "class": graph.path_class(a, b),
                              "GBps": graph.path_GBps(a, b)})
    warnings = list(graph.notes)
    cross = sorted({(name[p_a], name[p_b]) for p_a in gpus for p_b in gpus
                    if p_a < p_b and graph.path_class(p_a, p_b) == "SYS"})
    if cross:
        warnings.append(f"{len(cross)} GPU pairs cross the CPU sockets (SYS): NCCL uses GPU peer-to-peer only up "
                        "to PXB, so these stage through host memory")
    far = [name[g] for g, n in assignment.items() if graph.path_class(g, n) in ("PHB", "NODE", "SYS")]
    if far:
        warnings.append(f"GPUs whose NIC is beyond their PCIe switch (GPUDirect RDMA needs PXB or closer): "
                        f"{', '.join(far)}")
    loads: dict[int, int] = {}
    for nic in assignment.values():
        loads[nic] = loads.get(nic, 0) + 1
    under_load, load_why = concurrent_GBps(graph, list(assignment.items())) if graph.has_bandwidth else ([], "")
    ring = None
    if graph.has_bandwidth and len(gpus) > 1:
        naive_busbw, naive_why = ring_busbw(graph, gpus)
        order, busbw, why = best_ring(graph)
        ring = {"naive_order": [name[g] for g in gpus], "naive_busbw_GBps": naive_busbw, "naive_bottleneck": naive_why,
                "best_order": [name[g] for g in order], "best_busbw_GBps": busbw, "best_bottleneck": why}
    return {
        "source": graph.source,
        "gpus": len(gpus), "nics": len(nics),
        "cpus": len(graph.of_kind("cpu")) if graph.has_bandwidth else None,
        "pci_switches": len(graph.of_kind("pci")) if graph.has_bandwidth else None,
        "numa": {name[g]: graph.affinity[g]["numa"] for g in gpus if g in graph.affinity},
        "bandwidth_known": graph.has_bandwidth,
        "inter_cpu_GBps": graph.inter_cpu_GBps,
        "assignment": [{"gpu": name[g], "nic": name[n], "class": graph.path_class(g, n),
                        "GBps": graph.path_GBps(g, n), "GBps_all_at_once": under_load[i] if under_load else None,
                        "gpus_on_nic": loads[n]} for i, (g, n) in enumerate(assignment.items())],
        "injection_bottleneck": load_why,
        "ring": ring,
        "pairs": pairs,
        "warnings": warnings,
    }


def render_host(report: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(report, indent=2) + "\n"
    markdown = fmt == "markdown"
    out = _heading(f"topoplan host: {report['source']}", markdown, 1)
    if report["cpus"] is None:
        numa = ", ".join(f"{g}: {n}" for g, n in report["numa"].items())
        out += [f"{report['gpus']} GPUs, {report['nics']} NICs (path classes only)."
                + (f" NUMA node per GPU: {numa}." if numa else ""), ""]
    else:
        out += [f"{report['gpus']} GPUs, {report['nics']} NICs, {report['cpus']} CPU socket(s), "
                f"{report['pci_switches']} PCIe bridges/switches.", ""]
    out += _heading("GPU to NIC", markdown)
    rows = [(a["gpu"], a["nic"], a["class"], "-" if a["GBps"] is None else f"{a['GBps']:g}",
             "-" if a["GBps_all_at_once"] is None else f"{a['GBps_all_at_once']:g}", a["gpus_on_nic"])
            for a in report["assignment"]]
    out += table(["GPU", "NIC", "Path", "GB/s alone", "GB/s all at once", "GPUs on NIC"], rows, markdown,
                 right=(3, 4, 5))
    if report["injection_bottleneck"]:
        out += ["", f"All GPUs sending through their NICs at once: {report['injection_bottleneck']}."]
    out.append("")
    ring = report["ring"]
    if ring:
        out += _heading("Intra-host ring AllReduce", markdown)
        out += table(["Order", "GPUs", "busbw GB/s", "Bottleneck"],
                     [("naive", " ".join(ring["naive_order"]), f"{ring['naive_busbw_GBps']:g}", ring["naive_bottleneck"]),
                      ("best found", " ".join(ring["best_order"]), f"{ring['best_busbw_GBps']:g}",
                       ring["best_bottleneck"])], markdown, right=(2,))
        out.append("")
    gpu_names = [a["gpu"] for a in report["assignment"]] or sorted({p["a"] for p in report["pairs"]})
    by_pair = {(p["a"], p["b"]): p["class"] for p in report["pairs"]}
    out += _heading("GPU to GPU paths", markdown)
    rows = [[a] + [("X" if a == b else by_pair.get((a, b), "?")) for b in gpu_names] for a in gpu_names]
    out += table([""] + gpu_names, rows, markdown)
    if report["warnings"]:
        out += [""] + _heading("Warnings", markdown) + [f"- {w}" for w in report["warnings"]]
    return "\n".join(out).rstrip() + "\n"
