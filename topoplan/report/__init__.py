"""Reports: the metrics of an evaluated design as one plain dict, and writers for it.

``build_report(evaluation)`` returns the dict whose keys are the JSON contract (DESIGN section 9);
``writers.render(report, fmt)`` turns it into table, markdown or JSON text. Nothing here computes a
model figure: every number comes from the topology, the bill of materials or the flow solver.
"""

from __future__ import annotations

import numpy as np

from .. import __version__
from ..cost import CATEGORIES
from ..flow import ENGINES
from ..topology import KIND, LINK_TIERS


def _pods(layout) -> dict | None:
    """Pods under the core of a three-tier tree (per plane): how many, leaves in the largest, and whether
    every rail has cores of its own (rail-only); None for fabrics without a core tier."""
    plan = layout.tree.plan if layout.tree is not None else None
    if plan is None or plan.tiers < 3:
        return None
    return {"count": plan.pods, "leaves_per_pod": plan.leaves_per_pod, "cores_per_rail": plan.core_islands > 1}


def _money(x: float) -> float:
    return round(float(x), 2)


def _num(x):
    """Nine significant digits: stable across platforms, free of float noise like 1.0000000000000002."""
    return None if x is None else float(f"{float(x):.9g}")


def _per(usd: float, gbps: float):
    """Dollars per Gb/s (None when there is no bandwidth to price)."""
    return _num(usd / gbps) if gbps > 0 else None


def _collective(result) -> dict:
    c = result.plan.collective
    chosen, protocol = result.chosen, result.protocol
    latencies = chosen.phase_latencies_s(protocol)
    bandwidths = chosen.phase_bandwidths_s(protocol, c.size_bytes) if chosen.reachable else [None] * len(latencies)
    out = {
        "name": c.name, "op": c.op, "algorithm": result.algorithm, "protocol": protocol,
        "algorithm_requested": c.algorithm, "channels": result.channels, "group": c.group,
        "group_size": result.plan.group_size, "groups": result.plan.groups, "size_bytes": c.size_bytes,
        "time_s": _num(result.time_s), "latency_s": _num(result.latency_s),
        "algbw_GBps": _num(result.algbw_GBps), "busbw_GBps": _num(result.busbw_GBps),
        "max_link_utilization": _num(result.max_link_utilization),
        "p99_link_utilization": _num(result.p99_link_utilization),
        "bottleneck": result.bottleneck,
        "utilization_by_tier": {t: _num(v) for t, v in result.utilization_by_tier.items()},
        "engine": result.engine, "engine_label": ENGINES[result.engine].label,
        "unreachable_pairs": result.unreachable_pairs,
        "phases": [{"label": p.label, "steps": p.steps, "latency_s": _num(lat),
                    "time_s": None if bw is None else _num(lat + bw),
                    "max_utilization": _num(p.max_utilization), "bottleneck": p.bottleneck,
                    "flows_per_receiver": p.flows_per_receiver, "oversubscription": _num(p.oversubscription),
                    "flows": _flows(result, index, protocol), "flows_note": p.flows_note}
                   for index, (p, lat, bw) in enumerate(zip(result.phases, latencies, bandwidths))],
        "alternatives_time_s": {k: _num(v) for k, v in result.alternatives().items()},
    }
    if result.seed_times:
        out["seeds"] = {"time_s": [_num(t) for t in result.seed_times],
                        "max_link_utilization": [_num(u) for u in result.seed_max_utilization],
                        "time_s_over_seeds": _spread(result.seed_times)}
    return out


def _spread(values) -> dict | None:
    """min / median / max of per-seed figures (None when some seed has none)."""
    if not values or any(v is None for v in values):
        return None
    return {"min": _num(min(values)), "median": _num(float(np.median(values))), "max": _num(max(values))}


def _flows(result, phase: int, protocol: str) -> dict | None:
    """A phase's fair-share flow completion times (bandwidth part, at the collective's size and protocol):
    the reported seed's distribution, and the last and mean flow over seeds."""
    chosen = result.chosen
    stats = chosen.phases[phase].flows
    if stats is None:
        return None
    scale = 1.0 / chosen.factor(protocol, phase)   # flows are routed at the collective's size
    out = {"count": stats.flows, "on_hottest_link": stats.on_hottest_arc, "lockstep": stats.lockstep,
           "completion_s": {k: _num(v) for k, v in stats.scaled(scale).items()}}
    per_seed = [flows[phase] for flows in result.seed_phase_flows]
    if len(per_seed) > 1 and all(f is not None for f in per_seed):
        out["over_seeds"] = {"last_s": _spread([f.last_s * scale for f in per_seed]),
                             "mean_s": _spread([f.mean_s * scale for f in per_seed])}
    return out


def switch_counts(topology) -> dict:
    """Packet and circuit switches: total, per tier and per catalog model."""
    mask = (topology.kind == KIND["switch"]) | (topology.kind == KIND["ocs"])
    by_model: dict[str, int] = {}
    if mask.any():
        models, counts = np.unique(topology.model[mask], return_counts=True)
        by_model = {topology.models[m]: int(c) for m, c in zip(models, counts)}
    return {"total": int(mask.sum()), "by_tier": topology.switches_by_tier(), "by_model": dict(sorted(by_model.items()))}


def cost_section(bom, gpus: int, injection_gbps_per_gpu: float, bisection_gbps: float, servers_usd: float,
                 note: str) -> dict:
    """The report's ``cost``: the network's bill of materials in total, per GPU and per unit of bandwidth."""
    return {
        "total_usd": _money(bom.total_usd),
        "per_gpu_usd": _money(bom.total_usd / gpus),
        "per_injection_gbps_usd": _per(bom.total_usd, gpus * injection_gbps_per_gpu),
        "per_bisection_gbps_usd": _per(bom.total_usd, bisection_gbps),
        "per_gpu_bisection_gbps_usd": _per(bom.total_usd / gpus, bisection_gbps / (gpus / 2) if gpus > 1 else 0.0),
        "by_category": {c: _money(v) for c, v in bom.by_category().items()},
        "servers_usd": _money(servers_usd),
        "note": note,
    }


def build_report(evaluation) -> dict:
    if evaluation.topology.layout.family == "multi-site":
        from .sites import build_sites_report

        return build_sites_report(evaluation)
    design, topology, bom = evaluation.design, evaluation.topology, evaluation.bom
    layout = topology.layout
    links_by_tier = topology.links_by_tier()
    gpus = design.gpus
    cut = evaluation.bisection
    report = {
        "topoplan_version": __version__,
        "design": {
            "name": design.name,
            "description": design.description,
            "topology": design.fabric.topology,
            "gpus": gpus,
            "servers": design.cluster.servers,
            "server": design.cluster.server,
        },
        "fabric": {
            "tiers": layout.tiers,
            "planes": design.fabric.planes,
            "link_gbps": float(layout.link_gbps),
            "link_gbps_by_tier": topology.link_gbps_by_tier(),
            "injection_gbps_per_gpu": float(layout.injection_gbps_per_gpu),
            "oversubscription": dict(design.fabric.oversubscription),
            "pods": _pods(layout),
            "switches": switch_counts(topology),
            "links": {"total": int(sum(links_by_tier.values())), "by_tier": links_by_tier},
        },
        "cost": cost_section(bom, gpus, layout.injection_gbps_per_gpu, cut.gbps, bom.server_price_usd * bom.servers,
                             "network only (switches, NICs, optics, cables, OCS); prices are catalog estimates"),
        "power": {"total_w": round(bom.power_w, 1), "per_gpu_w": round(bom.power_w / gpus, 2)},
        "bisection": {
            "gbps": _num(cut.gbps),
            "per_gpu_gbps": _num(cut.gbps / (gpus / 2)) if gpus > 1 else 0.0,
            "method": cut.method,
            "permutation_per_gpu_gbps": _num(cut.permutation_gbps_per_gpu),
            "permutation_note": cut.permutation_note,
        },
        "diameter_hops": int(layout.diameter_hops),
        "routing": {"engine": design.routing.engine},
        "collectives": [_collective(r) for r in evaluation.collectives],
        "bom": [
            {"category": l.category, "item": l.item, "tier": l.tier, "quantity": l.quantity,
             "unit_price_usd": _money(l.unit_price_usd), "price_usd": _money(l.price_usd),
             "power_w": round(l.power_w, 1)}
            for l in sorted(bom.lines, key=lambda l: (CATEGORIES.index(l.category), _tier_order(l.tier), l.item))
        ],
        "cabling": [
            {"tier": l.tier, "link_gbps": l.link_gbps, "links": l.links, "cables": l.cables, "medium": l.medium,
             "fibres": l.fibres,
             "transceivers": sum(b.quantity for b in bom.lines if b.category == "transceivers" and b.tier == l.tier)}
            for l in bom.links
        ],
        "warnings": list(layout.warnings),
    }
    if evaluation.training is not None:
        report["training"] = _training(evaluation)
        if not evaluation.training.memory.fits:
            report["warnings"].append(f"training: {design.workload.training.model.id} does not fit in memory: "
                                      f"{evaluation.training.memory.describe()}; raise zero, tp or pp, recompute "
                                      "more, or use a smaller micro_batch")
    return report


def _training(evaluation) -> dict:
    """The step model's figures (``training.Step``) and what a token costs at the cluster's price."""
    step, price = evaluation.training, evaluation.price
    t = evaluation.design.workload.training
    tokens_per_s = step.tokens_per_s
    out = {
        "model": t.model.id,
        "parallelism": dict(evaluation.design.workload.parallelism),
        "global_batch": t.global_batch, "micro_batch": t.micro_batch, "microbatches": step.microbatches,
        "schedule": t.schedule, "virtual_stages": t.virtual_stages, "recompute": t.recompute, "zero": t.zero,
        "overlap": [p.name for p in t.overlap],
        "step_time_s": _num(step.step_s), "compute_model": step.compute_model,
        "compute_s": _num(step.compute_s), "bubble_s": _num(step.bubble_s), "optimizer_s": _num(step.optimizer_s),
        "exposed_s": {k: _num(v) for k, v in step.exposed_s.items()},
        "unoverlapped_s": {k: _num(v) for k, v in step.unoverlapped_s.items()},
        "policy_compute_s": _num(step.other_s),
        "mfu": _num(step.mfu), "hfu": _num(step.hfu),
        "tokens_per_step": int(step.tokens),
        "tokens_per_s": _num(tokens_per_s), "tokens_per_s_per_gpu": _num(tokens_per_s / step.gpus),
        "model_flops_per_step": _num(step.model_flops),
        "time_to_train_days": _num(t.tokens / tokens_per_s / 86400) if t.tokens else None,
        "usd_per_hour": _money(price.usd_per_hour),
        "usd_per_mtok": _num(price.usd_per_hour / 3600 / tokens_per_s * 1e6),
        "capital_usd": _money(price.capital_usd),
        "memory_gb": {"parameters": _num(step.memory.parameters / 1e9), "gradients": _num(step.memory.gradients / 1e9),
                      "optimizer": _num(step.memory.optimizer / 1e9),
                      "activations": _num(step.memory.activations / 1e9), "total": _num(step.memory.total / 1e9),
                      "hbm": _num(step.memory.hbm / 1e9)},
        "fits_in_memory": step.memory.fits,
        "collectives": [{"class": tr.cls, "op": tr.op, "group": tr.group, "size_bytes": int(tr.size_bytes),
                         "runs": _num(tr.count), "per": tr.per, "time_s": _num(seconds), "choice": label}
                        for tr, seconds, label in step.collectives],
    }
    return out


def _tier_order(tier: str) -> int:
    return LINK_TIERS.index(tier) if tier in LINK_TIERS else -1
