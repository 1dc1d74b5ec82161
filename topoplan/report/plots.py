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
    """One panel per link tier: how many links run at each utilization, one histogram per collective."""
    results = evaluation.collectives
    tiers = [t for t in ARC_CLASSES if any(t in p.samples for r in results for p in r.phases)]
    fig, axes = plt.subplots(1, max(1, len(tiers)), figsize=(4 * max(1, len(tiers)), 3.6), squeeze=False)
    for axis, tier in zip(axes[0], tiers):
        values = [np.concatenate([p.samples[tier] for p in r.phases if tier in p.samples] or [np.zeros(0)])
                  for r in results]
        top = max([1.1] + [1.05 * v.max() for v in values if v.size])
        bins = np.linspace(0.0, top, 41)
        for result, data in zip(results, values):
            if data.size:
                axis.hist(data, bins=bins, histtype="step", linewidth=1.5, label=result.plan.collective.name)
        axis.set_xlim(0.0, top)
        axis.set_title(f"{tier} links")
        axis.set_xlabel("utilization (1 = injection-bound)")
        axis.set_ylabel("links (sampled)")
    if tiers:
        axes[0][0].legend(fontsize="small")
    fig.suptitle(f"Link utilization by tier: {evaluation.design.name}")
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
    axis.set_xlabel("size (bytes)")
    axis.set_ylabel("busbw (GB/s)")
    axis.grid(True, which="major", alpha=0.3)
    axis.legend(fontsize="small")
    axis.set_title(f"Collective bus bandwidth by size: {sweeps[0]['design']}")
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
    """Cost per GPU against the workload's completion time: every candidate, markers by topology, and
    the Pareto front of each GPU count as a line."""
    fig, axis = plt.subplots(figsize=(8, 5.5))
    candidates = result["candidates"]
    front = set(result["pareto"])
    for topology in sorted({c["topology"] for c in candidates}):
        group = [c for c in candidates if c["topology"] == topology]
        axis.scatter([c["time_s"] for c in group], [c["cost_per_gpu_usd"] for c in group], label=topology,
                     marker=_MARKERS.get(topology, "o"), alpha=0.55)
    for gpus in sorted({c["gpus"] for c in candidates}):
        best = sorted((c for c in candidates if c["name"] in front and c["gpus"] == gpus), key=lambda c: c["time_s"])
        if best:
            axis.plot([c["time_s"] for c in best], [c["cost_per_gpu_usd"] for c in best], "-o", color="black",
                      linewidth=1.2, markersize=11, markerfacecolor="none")
            axis.annotate(f"{gpus:,} GPUs", (best[0]["time_s"], best[0]["cost_per_gpu_usd"]), fontsize="small",
                          xytext=(4, 4), textcoords="offset points")
    if candidates:
        times = [c["time_s"] for c in candidates]
        costs = [c["cost_per_gpu_usd"] for c in candidates]
        if max(times) > 10 * min(times):
            axis.set_xscale("log")
        if max(costs) > 10 * min(costs):
            axis.set_yscale("log")
    axis.set_xlabel("workload completion time per step (s, weighted sum of collectives)")
    axis.set_ylabel("network cost per GPU (USD, catalog estimates)")
    axis.set_title(f"Cost vs completion time: {result['space']} (black: Pareto front per GPU count)")
    axis.legend(title="topology", fontsize="small")
    fig.tight_layout()
    return fig


def cost_breakdown_figure(result: dict):
    """Stacked bars of network cost per GPU by category, for each Pareto design."""
    chosen = [c for c in result["candidates"] if c["name"] in set(result["pareto"])]
    chosen.sort(key=lambda c: (c["gpus"], c["cost_per_gpu_usd"]))
    categories = [k for k in ("switches", "nics", "transceivers", "cables", "ocs")
                  if any(c["cost_by_category_usd"].get(k, 0) for c in chosen)]
    fig, axis = plt.subplots(figsize=(8, 1.2 + 0.55 * max(1, len(chosen))))
    left = np.zeros(len(chosen))
    for category in categories:
        widths = np.array([c["cost_by_category_usd"].get(category, 0) / c["gpus"] for c in chosen])
        axis.barh([c["name"] for c in chosen], widths, left=left, label=category)
        left += widths
    axis.invert_yaxis()
    axis.set_xlabel("network cost per GPU (USD, catalog estimates)")
    axis.set_title(f"Cost by category, Pareto designs: {result['space']}")
    axis.legend(fontsize="small", loc="lower right")
    fig.tight_layout()
    return fig
