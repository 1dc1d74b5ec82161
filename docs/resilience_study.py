"""Regenerate docs/resilience.md and docs/resilience.png: what single failures do to one- vs two-plane
fat-trees and to rail-optimized vs rail-only fabrics at 16k and 131k GPUs, and what failures cost in
interruptions and goodput.

    python docs/resilience_study.py [--workers N]    writes docs/resilience.md and docs/resilience.png
                                                     (about 4 minutes on 2 cores)

Every figure comes from `topoplan resilience`'s model (``resilience.assess``): exhaustive single
failures of every switch, every network link, every NIC port and every leaf, one run per symmetry
class (checked on a second member), each re-routing the whole workload with the element down; the
interruption rates are Llama 3's non-network causes plus HPN's per-element network rates, the latter
scaled by the share of those failures that stop the job. This script only chooses the designs and lays
out the tables.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from topoplan.catalog import load_catalog  # noqa: E402
from topoplan.pipeline import build  # noqa: E402
from topoplan.report.resilience import resilience_report  # noqa: E402
from topoplan.report.writers import table  # noqa: E402
from topoplan.resilience import assess  # noqa: E402
from topoplan.spec import design_from_data  # noqa: E402

COLLECTIVES = [{"name": "grad-sync", "op": "allreduce", "group": "dp", "size": "1GiB", "algorithm": "ring"},
               {"name": "moe-dispatch", "op": "alltoall", "group": "ep", "size": "256MiB"},
               {"name": "pp-activations", "op": "sendrecv", "group": "pp", "size": "64MiB"}]
WORKLOADS = {16_384: {"parallelism": {"tp": 8, "pp": 8, "dp": 256, "ep": 64}, "collectives": COLLECTIVES},
             131_072: {"parallelism": {"tp": 8, "pp": 16, "dp": 1024, "ep": 64}, "collectives": COLLECTIVES}}
FAILURES = {"rates": ["llama3-non-network", "hpn-network"], "checkpoint_s": 100, "restart_s": 600,
            "scenarios": [{"name": "every-switch", "fail": "switch", "every": True},
                          {"name": "every-link", "fail": "link", "every": True},
                          {"name": "every-nic-port", "fail": "leaf-link", "every": True},
                          {"name": "every-leaf", "fail": "leaf", "every": True}]}
SWITCH = {16_384: "nvidia-sn5600", 131_072: "broadcom-th6-64x1600g"}
SCALABLE_UNIT = {16_384: 32, 131_072: 64}  # a leaf per rail per unit fills the switch's ports

# (comparison, label, cluster, fabric without the switch)
DESIGNS = [
    ("planes", "fat-tree, one plane (800G NIC)", {"server": "dgx-b300-xdr"}, {"topology": "fat-tree", "tiers": 3}),
    ("planes", "fat-tree, two planes (2x400G NIC)", {"server": "hgx-b300"},
     {"topology": "fat-tree", "tiers": 3, "planes": 2}),
    ("rails", "rail-optimized", {"server": "dgx-b300-xdr"}, {"topology": "rail-optimized", "tiers": 3}),
    ("rails", "rail-only", {"server": "dgx-b300-xdr"}, {"topology": "rail-only"}),
]


ORACLES = ['## What each figure is held against',
           '',
           '| Figure | Oracle | Test |',
           '| --- | --- | --- |',
           '| Loads after failures (`clos-failed`) | the generic `ecmp` engine on the same graph with its structure hidden, random link, NIC-port and switch failures on every tree fabric | `tests/test_degraded.py` (hypothesis; a 300-case run in this session: no difference) |',
           '| Flows left to the healthy closed form under a failure | `ecmp` under the failure on those flows alone, and zero load on the failed arcs | `tests/test_degraded.py` |',
           '| A spine of S lost on a non-blocking two-tier fat-tree | bisection (S-1)/S of healthy; ring and all-to-all times against the closed form | `tests/test_resilience.py`, `tests/test_degraded.py` |',
           '| Exhaustive single failures by symmetry class | brute force over every element on a small fabric, outcome histograms equal | `tests/test_resilience.py` |', "| Blast radius | HPN's 15/16 for a dual-ToR port; networkx connected components on random failure sets | `tests/test_failures.py` |", "| Interruptions per day | Llama 3's 419 in 54 days on 16,384 GPUs (7.76 a day); Young's 1,492 s for C = 100 s, M = 11,135 s | `tests/test_reliability.py`, `tests/test_failures.py` |", '| Stop fractions without routing (optimizer) | the exhaustive `resilience` scenarios of every NIC link and every leaf on five fabrics | `tests/test_resilience.py` |',
           '| Workers | one worker against two, outcome by outcome | `tests/test_resilience.py` |',
           '', "Not validated against a measurement: no public log gives a fabric's slowdown after a given link or switch", 'failure, so the degraded times rest on the routing oracle above, not on data. Plain ECMP is modelled',
           '(no weighted ECMP, no adaptive routing), which over-states what a failed link costs on fabrics that',
           're-weight.',
           '']


def spec_of(gpus: int, label: str, cluster: dict, fabric: dict) -> dict:
    fabric = {**fabric, "switch": SWITCH[gpus]}
    if fabric["topology"].startswith("rail"):
        fabric["scalable_unit"] = SCALABLE_UNIT[gpus]
    name = "".join(ch if ch.isalnum() else "-" for ch in f"{label} {gpus // 1000}k".lower())
    return {"name": "-".join(part for part in name.split("-") if part), "cluster": {**cluster, "gpus": gpus}, "fabric": fabric,
            "workload": WORKLOADS[gpus], "failures": FAILURES}


def study(gpus: int, comparison: str, label: str, cluster: dict, fabric: dict, catalog, workers: int) -> dict:
    design = design_from_data(spec_of(gpus, label, cluster, fabric), catalog)
    topology, bom = build(design, catalog)
    assessment = assess(topology, design, catalog, design.failures, workers=workers)
    report = resilience_report(design, topology, assessment, "")
    by_name = {s["name"]: s for s in report["scenarios"]}
    network_units = ("NIC-ToR link", "ToR switch")
    causes = {c["cause"]: c["per_day"] for c in report["interruptions"]["by_cause"]}
    return {"gpus": gpus, "comparison": comparison, "label": label, "report": report, "scenarios": by_name,
            "switches": sum(topology.switches_by_tier().values()), "usd_per_gpu": bom.total_usd / gpus,
            "network_per_day": sum(causes[c] for c in network_units),
            "unscaled_network_per_day": _unscaled_network(assessment)}


def _unscaled_network(assessment) -> float:
    """HPN's network interruptions if every such failure stopped the job (a single-homed fabric)."""
    return sum(r.rate_per_unit_day * assessment.counts.get(r.unit, 0) for r in assessment.rates
               if r.unit in ("nic_link", "leaf_switch"))


def _goodput_with_restart(row: dict, restart_s: float) -> float:
    """The same interruptions and checkpoint cost with another restart time (Daly's interval)."""
    from topoplan import reliability

    mtbf_s = row["report"]["interruptions"]["mtbf_h"] * reliability.SECONDS_PER_HOUR
    checkpoint_s = FAILURES["checkpoint_s"]
    interval = reliability.daly_interval_s(checkpoint_s, mtbf_s)
    return 1.0 - reliability.waste_fraction(interval, checkpoint_s, mtbf_s, restart_s)


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _ratio(x) -> str:
    return "-" if x is None else f"{x:.3f}x"


def _running_worst(scenario: dict, collective: str | None = None) -> float | None:
    values = [c["slowdown"] for o in scenario["outcomes"] if not o["job_stops"] for c in o["collectives"]
              if c["slowdown"] is not None and (collective is None or c["name"] == collective)]
    return max(values) if values else None


def summary_table(rows: list) -> list:
    headers = ["GPUs", "Design", "Switches", "Cost per GPU", "Switch failures that stop the job",
               "Link failures that stop the job", "NIC-port failures that stop the job",
               "Worst slowdown, single switch", "Worst slowdown, single link"]
    body = []
    for r in rows:
        s = r["scenarios"]
        body.append((f"{r['gpus']:,}", r["label"], f"{r['switches']:,}", f"${r['usd_per_gpu']:,.0f}",
                     _pct(s["every-switch"]["stop_fraction"]), _pct(s["every-link"]["stop_fraction"]),
                     _pct(s["every-nic-port"]["stop_fraction"]), _ratio(_running_worst(s["every-switch"])),
                     _ratio(_running_worst(s["every-link"]))))
    return table(headers, body, True, right=(0, 2, 3, 4, 5, 6, 7, 8))


def goodput_table(rows: list) -> list:
    headers = ["GPUs", "Design", "Network interruptions / day (if all stopped)", "All interruptions / day",
               "Job MTBF", "Daly interval", "Goodput", "GPU-hours lost / day", "Cost per GPU / goodput"]
    body = []
    for r in rows:
        i, g = r["report"]["interruptions"], r["report"]["goodput"]
        body.append((f"{r['gpus']:,}", r["label"],
                     f"{r['network_per_day']:.3f} ({r['unscaled_network_per_day']:.3f})", f"{i['per_day']:.2f}",
                     f"{i['mtbf_h']:.2f} h", f"{g['daly_interval_s']:,.0f} s", _pct(g["goodput"]),
                     f"{g['lost_gpu_hours_per_day']:,.0f}", f"${r['usd_per_gpu'] / g['goodput']:,.0f}"))
    return table(headers, body, True, right=(0, 2, 3, 4, 5, 6, 7, 8))


def classes_table(row: dict) -> list:
    """Every class of one design's link scenario: what it is, how many, what it does."""
    s = row["scenarios"]["every-link"]
    names = [c["name"] for c in row["report"]["healthy"]["collectives"]]
    body = []
    for o in s["outcomes"]:
        cells = [_ratio(c["slowdown"]) for c in o["collectives"]]
        body.append((o["label"], f"{o['weight']:,}", "stops" if o["job_stops"] else "runs",
                     f"{o['stopped_gpus']:,}", _pct(o["worst_server_fraction"]), _pct(o["bisection_fraction"]),
                     *cells))
    return table(["Failed link (class representative)", "Links", "Job", "GPUs stopped", "Worst host bandwidth",
                  "Bisection", *[f"{n} slowdown" for n in names]], body, True, right=tuple(range(1, 6 + len(names))))


def figure(rows: list, path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    labels = [f"{r['gpus'] // 1000}k {r['label']}" for r in rows]
    y = np.arange(len(rows))
    link_stop = [r["scenarios"]["every-link"]["stop_fraction"] * 100 for r in rows]
    switch_stop = [r["scenarios"]["every-switch"]["stop_fraction"] * 100 for r in rows]
    left.barh(y - 0.2, switch_stop, 0.4, label="a switch", color="#d62728", alpha=0.8)
    left.barh(y + 0.2, link_stop, 0.4, label="a network link", color="#ff9896")
    for yi, a, b in zip(y, switch_stop, link_stop):
        if a == b == 0:
            left.text(0.5, yi, " none stops it", va="center", fontsize="small")
    left.set_yticks(y, labels, fontsize="small")
    left.invert_yaxis()
    left.set_xlabel("single failures that stop the job (%)")
    left.legend(fontsize="small")
    worst = [max(v for v in (_running_worst(r["scenarios"]["every-switch"]), _running_worst(r["scenarios"]["every-link"]),
                             1.0) if v is not None) for r in rows]
    right.barh(y, worst, color="#1f77b4", alpha=0.85)
    for yi, value in zip(y, worst):
        right.text(value, yi, f" {value:.2f}x", va="center", fontsize="small")
    right.axvline(1.0, color="black", linestyle="--", linewidth=1)
    right.set_yticks(y, [""] * len(rows))
    right.invert_yaxis()
    right.set_xlim(0, max(worst) * 1.25)
    right.set_xlabel("worst collective slowdown while the job runs on")
    fig.suptitle("Single failures: stop the job, or run on slower")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def page(rows: list, seconds: float) -> str:
    by = {(r["gpus"], r["label"]): r for r in rows}
    one, two = by[(131_072, DESIGNS[0][1])], by[(131_072, DESIGNS[1][1])]
    out = ["# Failures: one vs two planes, rail-optimized vs rail-only", "",
           "Generated by `python docs/resilience_study.py` (this run: "
           f"{seconds / 60:.1f} min on 2 workers); every number comes from `topoplan resilience`'s model.",
           "", "![Single failures per design](resilience.png)", "",
           "## What was run", "",
           "Eight designs, 16,384 and 131,072 GPUs of B300: one-plane fat-trees of 800G NICs (DGX B300 with "
           "ConnectX-8 XDR ports) against two-plane fat-trees of the same NIC split in 2 x 400G (HGX B300), and "
           "rail-optimized against rail-only fabrics of the one-plane servers, on Spectrum-4 SN5600 "
           "(64 x 800G) at 16k and Tomahawk 6 (64 x 1.6T) at 131k. The workload is the shipped designs' "
           "(ring all-reduce over DP, all-to-all over EP, pipeline send/recv). For each design, "
           "`resilience.assess` fails every switch, every network link, every NIC port and every leaf, one "
           "at a time, one run per symmetry class (checked on a second member), re-routes all three "
           "collectives with ECMP over what survives, and reports whether the job stops and each "
           "collective's slowdown against healthy.", "",
           "Interruption rates: Llama 3's per-GPU and per-host causes without its network cause "
           "(`llama3-non-network`), plus HPN's per-element network rates (`hpn-network`: NIC-ToR link 0.057% "
           "a month, ToR 0.051% a month), each scaled by the share of those failures that stop the job "
           "measured by the exhaustive scenarios. A failure that does not stop the job is not an "
           "interruption here: the job runs on at the slowdown shown until the part is replaced.", "",
           "## Single failures", ""]
    out += summary_table(rows) + [""]
    out += ["## Interruptions and goodput", "",
            "Checkpoint write 100 s, restart 600 s, interval by Daly's formula; network interruptions are "
            "those of HPN's rates after scaling, with the unscaled figure (every such failure stops the "
            "job) in brackets.", ""]
    out += goodput_table(rows) + [""]
    small_one = by[(16_384, DESIGNS[0][1])]
    rail, rail_only = by[(16_384, DESIGNS[2][1])], by[(16_384, DESIGNS[3][1])]
    big_rail, big_rail_only = by[(131_072, DESIGNS[2][1])], by[(131_072, DESIGNS[3][1])]
    worst_link = max((o for o in small_one["scenarios"]["every-link"]["outcomes"] if not o["job_stops"]),
                     key=lambda o: max(c["slowdown"] for c in o["collectives"]))
    port = two["scenarios"]["every-nic-port"]
    out += ["## Reading the results", "",
            f"* **Two planes turn stops into slowdowns.** On one plane every NIC-port and every leaf failure "
            f"stops the job (the host is single-homed), and so do "
            f"{_pct(one['scenarios']['every-link']['stop_fraction'])} of all single network-link failures; on "
            f"two planes no single failure stops it. At 131k GPUs HPN's rates then give "
            f"{one['network_per_day']:.3f} network interruptions a day on one plane and none on two, for "
            f"${two['usd_per_gpu'] - one['usd_per_gpu']:,.0f} more per GPU (twice the NIC links and optics).",
            f"* **A lost port is a job-wide slowdown.** Synchronous collectives run at the pace of the slowest "
            f"rank: with one 400G port of a two-port NIC down, that NIC keeps half its bandwidth and the "
            f"all-to-all takes {_ratio(_running_worst(port, 'moe-dispatch'))} as long for every GPU, the ring "
            f"all-reduce {_ratio(_running_worst(port, 'grad-sync'))}. Two planes trade a stop for that until "
            f"the port is repaired; HPN's dual-ToR hosts, with 16 ports, keep 15/16 instead.",
            f"* **Plain ECMP does not re-weight.** On the 16k one-plane fat-tree the worst running single link "
            f"({worst_link['label'][5:]}, "
            f"{_ratio(max(c['slowdown'] for c in worst_link['collectives']))}) costs more than the worst single "
            f"switch that leaves the job running ({_ratio(_running_worst(small_one['scenarios']['every-switch']))}): "
            f"the switches upstream keep splitting evenly over their next hops, so a next hop that lost a link "
            f"carries the same traffic on fewer links. Weighted ECMP would re-balance it; topoplan models ECMP "
            f"as switches run it by default.",
            f"* **Goodput at 131k GPUs is a restart problem.** Llama 3's per-GPU rates scaled to 131k GPUs give "
            f"an interruption every {one['report']['interruptions']['mtbf_h'] * 60:.0f} minutes; with a 10-minute "
            f"restart and 100 s checkpoints the job keeps {_pct(one['report']['goodput']['goodput'])} of its "
            f"time on one plane and {_pct(two['report']['goodput']['goodput'])} on two. The fabric moves that "
            f"by a few points; a 1-minute restart (in-job recovery from spare nodes) would keep "
            f"{_pct(_goodput_with_restart(one, 60))} on one plane.",
            f"* **Rail-optimized against rail-only.** At these sizes the three-tier rail-optimized fabric has "
            f"the fat-tree's switch and link counts and, the workload being non-blocking, the same failure "
            f"figures; its leaves differ (one rail of {SCALABLE_UNIT[16_384]} servers per leaf instead of "
            f"whole servers). Rail-only drops the tiers above the rails: at 16k GPUs "
            f"{rail_only['switches']:,} switches instead of {rail['switches']:,} "
            f"(${rail_only['usd_per_gpu']:,.0f} against ${rail['usd_per_gpu']:,.0f} per GPU), more of its "
            f"single switch failures stop the job ({_pct(rail_only['scenarios']['every-switch']['stop_fraction'])}"
            f" against {_pct(rail['scenarios']['every-switch']['stop_fraction'])}: leaves are a larger share of "
            f"its switches), and those that do not cost little. At 131k GPUs a rail of 16,384 NICs needs three "
            f"tiers of Tomahawk 6 itself, so rail-only has the same {big_rail_only['switches']:,} switches as "
            f"rail-optimized ({big_rail['switches']:,}) and keeps only its cross-rail restriction.", "",
            "## Every single link failure, 16k one-plane fat-tree", ""]
    out += classes_table(small_one) + [""]
    out += ["## Every single link failure, 131k two-plane fat-tree", ""]
    out += classes_table(two) + [""]
    out += ORACLES + ["## What is still weak", "",
            "* HPN gives rates for NIC-ToR links and ToRs only; spine and core switches and their links have "
            "no per-element rate here (Llama 3's network cause, per GPU, is left out so as not to count "
            "twice), so the network interruptions are a lower bound for the upper tiers.",
            "* The slowdowns are collective times (nccl-tests units), not training-step times: with compute "
            "overlap a 1.99x ring can cost much less of a step (the step model of issue 15).",
            "* Failures that do not stop the job still cost throughput until repair; the goodput above "
            "counts only stops. With a repair time per element the expected degraded time would add in.",
            "* Every scenario is a single failure; `failures.scenarios` takes random multi-failure samples "
            "(`random: {count, samples, seed}`) for the correlated cases.", ""]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    catalog = load_catalog(())
    start = time.perf_counter()
    rows = []
    for gpus in (16_384, 131_072):
        for comparison, label, cluster, fabric in DESIGNS:
            print(f"{gpus:,} GPUs, {label} ...", file=sys.stderr, flush=True)
            rows.append(study(gpus, comparison, label, cluster, fabric, catalog, args.workers))
    seconds = time.perf_counter() - start
    figure(rows, ROOT / "docs" / "resilience.png")
    (ROOT / "docs" / "resilience.md").write_text(page(rows, seconds))
    print("wrote docs/resilience.md, docs/resilience.png", file=sys.stderr)


if __name__ == "__main__":
    main()
