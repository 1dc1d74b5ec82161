"""What ``topoplan host`` reports, computed: path classes, bandwidths, the GPU-NIC assignment, the ring and
warnings, as one JSON-able dict (``report/host.py`` formats it)."""

from __future__ import annotations

from .graph import HostGraph, assign_nics, best_ring, concurrent_GBps, ring_busbw


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
