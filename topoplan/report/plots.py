"""Charts for ``report --plots DIR`` (matplotlib, Agg backend): link utilization by tier and time per
collective. Functions return the figure, so that tests can read its data; ``to_bytes`` renders it and the
CLI writes the file."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..flow.metrics import ARC_CLASSES  # noqa: E402


def utilization_figure(evaluation):
    """Per link tier, grouped by collective: the busiest link's utilization (light bar) and the 99th
    percentile of the loaded links (dark bar), against the injection bound (1.0, dashed)."""
    results = [r for r in evaluation.collectives if r.chosen.reachable]
    tiers = [t for t in ARC_CLASSES if any(t in p.samples for r in results for p in r.phases)]
    fig, axis = plt.subplots(figsize=(max(6.0, 1.6 * len(tiers) * max(1, len(results)) ** 0.5 + 3), 4.2))
    width = 0.8 / max(1, len(results))
    x = np.arange(len(tiers))
    for i, result in enumerate(results):
        highest = [result.utilization_by_tier.get(t, 0.0) for t in tiers]
        p99 = [float(np.percentile(np.concatenate([p.samples[t] for p in result.phases if t in p.samples]), 99))
               if any(t in p.samples for p in result.phases) else 0.0 for t in tiers]
        offset = x - 0.4 + width * (i + 0.5)
        bars = axis.bar(offset, highest, width * 0.95, alpha=0.4, label=f"{result.plan.collective.name} (max)")
        axis.bar(offset, p99, width * 0.55, color=bars.patches[0].get_facecolor()[:3] if bars.patches else None,
                 label=f"{result.plan.collective.name} (p99)")
    axis.axhline(1.0, color="black", linestyle="--", linewidth=1)
    axis.set_xticks(x, [f"{t} links" for t in tiers])
    axis.set_ylabel("utilization (1 = as busy as the NICs)")
    axis.set_title(f"Link utilization by tier: {evaluation.design.name}")
    axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def collective_times_figure(report: dict):
    """Horizontal bars: each collective's time, split into per-step latency and bandwidth time."""
    rows = [c for c in report["collectives"] if c["time_s"] is not None]
    fig, axis = plt.subplots(figsize=(8, 1 + 0.6 * max(1, len(rows))))
    names = [c["name"] for c in rows]
    latency = np.array([c["latency_s"] * 1e3 for c in rows])
    total = np.array([c["time_s"] * 1e3 for c in rows])
    axis.barh(names, latency, color="#c44e52", label="latency (NCCL's model)")
    axis.barh(names, total - latency, left=latency, color="#4c72b0", label="bandwidth (busiest link)")
    for y, c in enumerate(rows):
        axis.annotate(f" {c['busbw_GBps']:.1f} GB/s busbw, {c['algorithm']}/{c['protocol']}, {c['bottleneck']}",
                      (total[y], y), va="center",
                      fontsize="small")
    axis.set_xlabel("time per collective (ms)")
    axis.set_xlim(0, (total.max() if rows else 1) * 1.6)
    axis.invert_yaxis()
    axis.legend(loc="lower right", fontsize="small")
    axis.set_title(f"Collective completion time: {report['design']['name']} ({report['design']['gpus']:,} GPUs)")
    fig.tight_layout()
    return fig


def sweep_figure(sweeps: list):
    """Busbw against size (log scale), predicted per sweep, and measured where a log was given."""
    fig, axis = plt.subplots(figsize=(8, 5))
    for sweep in sweeps:
        rows = [r for r in sweep["rows"] if r["busbw_GBps"] is not None]
        label = f"{sweep['op']} over {sweep['group']} ({sweep['group_size']:,} ranks)"
        line, = axis.plot([r["size_bytes"] for r in rows], [r["busbw_GBps"] for r in rows], "-o", markersize=3,
                          label=f"predicted: {label}")
        if sweep["log"]:
            got = [r for r in sweep["rows"] if r.get("measured_busbw_GBps") is not None]
            axis.plot([r["size_bytes"] for r in got], [r["measured_busbw_GBps"] for r in got], "x--",
                      color=line.get_color(), label=f"measured: {sweep['log'].rsplit('/', 1)[-1]}")
    axis.set_xscale("log", base=2)
    sizes = [r["size_bytes"] for sweep in sweeps for r in sweep["rows"]]
    ticks = [2**k for k in range(0, 51, 4) if min(sizes) / 2 <= 2**k <= max(sizes) * 2]
    names = {0: "B", 10: "KiB", 20: "MiB", 30: "GiB", 40: "TiB", 50: "PiB"}
    axis.set_xticks(ticks, [f"{2**(k.bit_length() - 1 - (k.bit_length() - 1) // 10 * 10)} "
                            f"{names[(k.bit_length() - 1) // 10 * 10]}" for k in ticks])
    axis.set_xlabel("size")
    axis.set_ylabel("busbw (GB/s)")
    axis.grid(True, which="major", alpha=0.3)
    axis.legend(fontsize="small")
    axis.set_title(f"Collective bus bandwidth by size: {sweeps[0]['design']}")
    fig.tight_layout()
    return fig


def wan_figure(report: dict):
    """A multi-site report's utilisation (step speed with this WAN over with a free one) against the total
    WAN bandwidth, one line per synchronisation scheme, the design's WAN and target marked."""
    need = report["wan_requirement"]
    fig, axis = plt.subplots(figsize=(8, 5))
    gbps = np.array(need["curve"]["wan_gbps"])
    for label, values in need["curve"]["utilization"].items():
        axis.plot(gbps, 100 * np.array(values), "-", label=label)
    axis.axvline(report["wan"]["total_gbps"], color="0.4", linestyle=":", label="this design's WAN")
    axis.axhline(100 * need["target_utilization"], color="0.6", linestyle="--",
                 label=f"target {100 * need['target_utilization']:g}%")
    axis.set_xscale("log")
    axis.set_ylim(0, 101)
    axis.set_xlabel("total WAN bandwidth (Gb/s)")
    axis.set_ylabel("utilisation (% of the step speed with a free WAN)")
    axis.grid(True, which="major", alpha=0.3)
    axis.legend(fontsize="small", loc="lower right")
    axis.set_title(f"WAN bandwidth vs utilisation: {report['design']['name']}")
    fig.tight_layout()
    return fig


def to_bytes(fig, fmt: str = "png") -> bytes:
    """The chart as a file's bytes (the CLI writes them); the figure is closed."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=120)
    plt.close(fig)
    return buffer.getvalue()


_MARKERS = {"fat-tree": "o", "rail-optimized": "s", "rail-only": "^", "railx": "D"}


def pareto_figure(result: dict):
    """Cost per GPU against the workload's completion time, one panel per GPU count: every candidate,
    markers by topology, the Pareto front as a line with its designs labelled; log axes where a panel's
    costs or times span more than 3x (one costly design would otherwise squash the rest)."""
    candidates = result["candidates"]
    front = set(result["pareto"])
    counts = sorted({c["gpus"] for c in candidates}) or [0]
    fig, axes = plt.subplots(1, len(counts), figsize=(5.2 * len(counts) + 2.2, 5.0), squeeze=False)
    topologies = sorted({c["topology"] for c in candidates})
    for axis, gpus in zip(axes[0], counts):
        group = [c for c in candidates if c["gpus"] == gpus]
        for topology in topologies:
            mine = [c for c in group if c["topology"] == topology]
            axis.scatter([c["time_s"] * 1e3 for c in mine], [c["cost_per_gpu_usd"] for c in mine],
                         marker=_MARKERS.get(topology, "o"), alpha=0.6, label=topology)
        best = sorted((c for c in group if c["name"] in front), key=lambda c: c["time_s"])
        if best:
            axis.plot([c["time_s"] * 1e3 for c in best], [c["cost_per_gpu_usd"] for c in best], "-o",
                      color="black", linewidth=1.2, markersize=11, markerfacecolor="none")
            # numbers at the points, the designs they stand for listed in a corner (labels never collide)
            for i, c in enumerate(best, 1):
                axis.annotate(str(i), (c["time_s"] * 1e3, c["cost_per_gpu_usd"]), fontsize="small",
                              fontweight="bold", xytext=(7, 5), textcoords="offset points")
            listing = "\n".join(f"{i}  {c['topology']}, ${c['cost_per_gpu_usd']:,.0f}/GPU, {c['time_s'] * 1e3:,.1f} ms"
                                 for i, c in enumerate(best, 1))
            axis.text(0.02, 0.98, listing, transform=axis.transAxes, fontsize="x-small", va="top", ha="left",
                      bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85, "edgecolor": "lightgrey"})
        costs = [c["cost_per_gpu_usd"] for c in group]
        times = [c["time_s"] for c in group]
        if costs and max(costs) > 3 * max(min(costs), 1e-9):
            axis.set_yscale("log")
        if times and max(times) > 3 * max(min(times), 1e-12):
            axis.set_xscale("log")
        axis.set_title(f"{gpus:,} GPUs")
        axis.set_xlabel("completion time per step (ms)")
        axis.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("network cost per GPU (USD, catalog estimates)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, title="topology", fontsize="small", loc="center right")
    fig.suptitle(f"Cost vs completion time: {result['space']} (black: the Pareto front)")
    fig.tight_layout(rect=(0, 0, 1 - 1.6 / fig.get_figwidth(), 1))
    return fig


def cost_breakdown_figure(result: dict):
    """Stacked bars of network cost per GPU by category, for each Pareto design."""
    chosen = [c for c in result["candidates"] if c["name"] in set(result["pareto"])]
    chosen.sort(key=lambda c: (c["gpus"], c["cost_per_gpu_usd"]))
    categories = [k for k in ("switches", "nics", "transceivers", "cables", "ocs")
                  if any(c["cost_by_category_usd"].get(k, 0) for c in chosen)]
    fig, axis = plt.subplots(figsize=(11, 1.6 + 0.55 * max(1, len(chosen))))
    left = np.zeros(len(chosen))
    for category in categories:
        widths = np.array([c["cost_by_category_usd"].get(category, 0) / c["gpus"] for c in chosen])
        axis.barh([c["name"] for c in chosen], widths, left=left, label=category)
        left += widths
    axis.invert_yaxis()
    axis.set_xlabel("network cost per GPU (USD, catalog estimates)")
    fig.suptitle(f"Cost by category, Pareto designs: {result['space']}")
    axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def resilience_figure(result: dict):
    """Per scenario class (or explicit failure), the worst collective slowdown (bar) against healthy (1.0,
    dashed); failures that stop the job are red bars marked "job stops". Random scenarios show their
    worst sample."""
    rows = []
    for s in result["scenarios"]:
        outcomes = s["outcomes"]
        if s["mode"] == "random" and len(outcomes) > 1:
            running = [max((c["slowdown"] or 0.0) for c in o["collectives"]) if o["collectives"] else 1.0
                       for o in outcomes if not o["job_stops"]]
            rows.append((f"{s['name']} (worst of {len(outcomes)})", max(running, default=0.0),
                         s["stop_fraction"] == 1.0))
            continue
        for o in outcomes:
            worst = max((c["slowdown"] or 0.0 for c in o["collectives"]), default=1.0)
            count = f" x{o['weight']:,}" if o["weight"] > 1 else ""
            rows.append((f"{s['name']}: {o['label']}{count}", worst, o["job_stops"]))
    fig, axis = plt.subplots(figsize=(8.5, max(2.5, 0.32 * len(rows) + 1.4)))
    y = np.arange(len(rows))
    top = max([r[1] for r in rows if not r[2]] + [1.0])
    values = [top * 1.05 if stops else value for _, value, stops in rows]
    colours = ["#d62728" if stops else "#1f77b4" for _, _, stops in rows]
    axis.barh(y, values, color=colours, alpha=0.85)
    for yi, (_, value, stops) in zip(y, rows):
        axis.text(top * 1.06 if stops else value, yi, " job stops" if stops else f" {value:.3f}x", va="center",
                  fontsize="small")
    axis.axvline(1.0, color="black", linestyle="--", linewidth=1)
    axis.set_yticks(y, [r[0] for r in rows], fontsize="small")
    axis.invert_yaxis()
    axis.set_xlim(0, top * 1.3)
    axis.set_xlabel("worst collective time / healthy")
    axis.set_title(f"Single and random failures: {result['design']}")
    fig.tight_layout()
    return fig


def budget_figure(studies: list):
    """At equal capital budgets, per fabric: tokens/s against the budget (left), and MFU (middle) and
    scaling efficiency (right) against the GPUs the budget bought. Points a budget cannot buy are left out."""
    fig, (money, mfu, efficiency) = plt.subplots(1, 3, figsize=(15, 4.2))
    for study in studies:
        points = [p for p in study["points"] if p["gpus"]]
        if not points:
            continue
        gpus = [p["gpus"] for p in points]
        money.plot([p["budget_usd"] / 1e9 for p in points], [p["tokens_per_s"] / 1e6 for p in points],
                   marker="o", label=study["topology"])
        mfu.plot(gpus, [100 * p["mfu"] for p in points], marker="o", label=study["topology"])
        efficiency.plot(gpus, [100 * p["scaling_efficiency"] for p in points], marker="o", label=study["topology"])
    money.set_xscale("log")
    money.set_yscale("log")
    money.set_xlabel("budget: servers + network (US$ billions)")
    money.set_ylabel("tokens/s (millions)")
    for axis, name in ((mfu, "MFU (% of BF16 peak)"), (efficiency, "scaling efficiency (%)")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("GPUs the budget buys")
        axis.set_ylabel(name)
    for axis in (money, mfu, efficiency):
        axis.grid(True, alpha=0.3)
    money.legend(fontsize="small")
    fig.suptitle("The same money on each fabric")
    fig.tight_layout()
    return fig


def scale_figure(studies: list):
    """MFU (left) and scaling efficiency (right) against GPU count, one line per design; sizes that could
    not run are left out of the lines."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for study in studies:
        points = [p for p in study["points"] if not p["infeasible"]]
        if not points:
            continue
        x = [p["gpus"] for p in points]
        label = f"{study['design']} ({study['topology']})"
        left.plot(x, [100 * p["mfu"] for p in points], marker="o", label=label)
        right.plot(x, [100 * p["scaling_efficiency"] for p in points], marker="o", label=label)
    sizes = sorted({p["gpus"] for study in studies for p in study["points"] if not p["infeasible"]})
    for axis, name in ((left, "MFU (% of BF16 peak)"), (right, "scaling efficiency (%)")):
        axis.set_xscale("log", base=2)
        if sizes:
            axis.set_xticks(sizes, [f"{n // 1024}k" if n % 1024 == 0 else f"{n:,}" for n in sizes])
            axis.minorticks_off()
        axis.set_xlabel("GPUs")
        axis.set_ylabel(name)
        axis.grid(True, alpha=0.3)
    left.legend(fontsize="small")
    fig.suptitle("Training step as the cluster grows")
    fig.tight_layout()
    return fig
