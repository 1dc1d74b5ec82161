"""The ``topoplan host`` report as text, markdown or JSON (computed by ``host/analysis.py``)."""

from __future__ import annotations

import json

from .writers import _heading, table


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
