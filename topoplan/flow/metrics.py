"""Metrics: from link loads to completion time, nccl-tests bandwidths and utilization.

A phase takes ``steps * alpha + max over arcs (load / capacity)``: every flow of the phase runs at once
(fluid model) and the most loaded link, relative to its capacity, sets the pace. ``alpha`` is the
per-step latency of the slowest link class the phase uses (catalog: NVLink and PCIe per server,
network per NIC). A collective's phases run one after another.

Utilization of a link = its load / capacity, divided by the same ratio on the busiest endpoint link
(a NIC's or chip's own network link): 1.0 means the link is as busy as the injection bottleneck, 4.0
means it would need 4x the time the NICs need (a 4:1 oversubscribed uplink under a cross-leaf
permutation). Phases without network traffic are referred to their own busiest link.

algbw = size / time and busbw = algbw * factor, with nccl-tests' size conventions and factors, so the
predictions can be held against ``*_perf`` output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..catalog import Catalog
from ..spec import Design
from ..topology import KIND, LINK_TIER, MEDIUM, Topology
from . import RouteRequest, select_engine
from .algorithms import plan_workload
from .traffic import CollectivePlan, apply_pxn

ARC_CLASSES = ("nvlink", "pcie", "leaf", "spine", "core", "ocs")
MAX_SAMPLES = 5000  # utilization values kept per tier and phase, evenly strided, for histograms


def arc_classes(topology: Topology) -> np.ndarray:
    """Per arc, an index into ``ARC_CLASSES``: host links by medium, network links by tier."""
    classes = np.empty(topology.num_arcs, dtype=np.int8)
    host = topology.link_tier == LINK_TIER["host"]
    classes[host] = np.where(topology.medium[host] == MEDIUM["pcie"], 1, 0)
    classes[~host] = topology.link_tier[~host] + 1  # leaf=1 -> 2, spine -> 3, core -> 4, ocs -> 5
    return classes


def alpha_by_class(design: Design, catalog: Catalog, scale: float = 1.0) -> np.ndarray:
    """Per-step latency in seconds for each arc class."""
    server = catalog.servers[design.cluster.server]
    nic = catalog.nics[server.nic]
    network = nic.alpha_us
    return np.array([server.nvlink_alpha_us, server.pcie_alpha_us] + [network] * 4) * 1e-6 * scale


@dataclass
class PhaseResult:
    label: str
    steps: int
    latency_s: float
    bandwidth_s: float | None
    max_utilization: float
    p99_utilization: float
    bottleneck: str
    utilization_by_tier: dict
    unreachable_pairs: int = 0
    samples: dict = field(default_factory=dict)  # tier -> utilization of up to MAX_SAMPLES loaded links (plots)

    @property
    def time_s(self) -> float | None:
        return None if self.bandwidth_s is None else self.latency_s + self.bandwidth_s


@dataclass
class CollectiveResult:
    plan: CollectivePlan
    engine: str
    phases: list
    seed_times: list = field(default_factory=list)        # ecmp-hash: time per seed
    seed_max_utilization: list = field(default_factory=list)

    @property
    def time_s(self) -> float | None:
        times = [p.time_s for p in self.phases]
        return None if any(t is None for t in times) else float(sum(times))

    @property
    def algbw_GBps(self) -> float | None:
        t = self.time_s
        return None if not t else self.plan.collective.size_bytes / t / 1e9

    @property
    def busbw_GBps(self) -> float | None:
        a = self.algbw_GBps
        return None if a is None else a * self.plan.busbw_factor

    @property
    def max_link_utilization(self) -> float:
        return max(p.max_utilization for p in self.phases)

    @property
    def p99_link_utilization(self) -> float:
        return max(p.p99_utilization for p in self.phases)

    @property
    def bottleneck(self) -> str:
        if any(p.time_s is None for p in self.phases):
            return "unreachable"
        return max(self.phases, key=lambda p: p.bandwidth_s).bottleneck

    @property
    def utilization_by_tier(self) -> dict:
        out: dict[str, float] = {}
        for phase in self.phases:
            for tier, value in phase.utilization_by_tier.items():
                out[tier] = max(out.get(tier, 0.0), value)
        return {t: out[t] for t in ARC_CLASSES if t in out}

    @property
    def unreachable_pairs(self) -> int:
        return sum(p.unreachable_pairs for p in self.phases)


def phase_result(topology: Topology, classes: np.ndarray, alpha: np.ndarray, load: np.ndarray, label: str,
                 steps: int, unreachable: int = 0) -> PhaseResult:
    seconds = load / (topology.capacity_gbps * 1e9 / 8)      # time each arc needs for its bytes
    used = load > 0
    if not used.any():
        return PhaseResult(label, steps, 0.0, 0.0, 0.0, 0.0, "none", {}, unreachable)
    endpoint = (np.isin(topology.kind[topology.src], (KIND["nic"], KIND["gpu"])) |
                np.isin(topology.kind[topology.dst], (KIND["nic"], KIND["gpu"])))
    injection = used & endpoint & (topology.link_tier != LINK_TIER["host"])
    reference = seconds[injection].max() if injection.any() else seconds.max()
    utilization = seconds / reference
    worst = int(np.argmax(seconds))
    by_tier, samples = {}, {}
    for index in np.unique(classes[used]):
        values = utilization[used & (classes == index)]
        by_tier[ARC_CLASSES[index]] = float(values.max())
        samples[ARC_CLASSES[index]] = values[:: max(1, values.size // MAX_SAMPLES)]
    latency = steps * float(alpha[np.unique(classes[used])].max())
    bandwidth = None if unreachable else float(seconds[worst])
    return PhaseResult(label, steps, latency, bandwidth, float(utilization[worst]),
                       float(np.percentile(utilization[used], 99)), ARC_CLASSES[classes[worst]], by_tier,
                       unreachable, samples)


def evaluate_plan(topology: Topology, plan: CollectivePlan, alpha: np.ndarray, engine: str = "ecmp",
                  seeds: int = 8, qps: int = 1, arc_mask: np.ndarray | None = None) -> CollectiveResult:
    classes = arc_classes(topology)
    chosen = select_engine(topology, RouteRequest(engine, qps=qps, arc_mask=arc_mask))
    pxn = topology.layout.pxn
    demands = [apply_pxn(topology, phase.demand) if pxn else phase.demand for phase in plan.phases]
    per_seed = []
    for seed in range(seeds) if chosen.seeded else (0,):
        request = RouteRequest(chosen.name, seed=seed, qps=qps, arc_mask=arc_mask)
        phases = []
        for phase, demand in zip(plan.phases, demands):
            routed = chosen.route(topology, demand, request)
            phases.append(phase_result(topology, classes, alpha, routed.load, phase.label, phase.steps,
                                       routed.unreachable_pairs))
        per_seed.append(CollectiveResult(plan, chosen.name, phases))
    if not chosen.seeded:
        return per_seed[0]
    # report the median seed (by time); keep every seed's time and utilization
    times = [r.time_s if r.time_s is not None else np.inf for r in per_seed]
    median = per_seed[int(np.argsort(times)[len(times) // 2])]
    median.seed_times = [None if t == np.inf else t for t in times]
    median.seed_max_utilization = [r.max_link_utilization for r in per_seed]
    return median


def evaluate_workload(topology: Topology, design: Design, catalog: Catalog, alpha_scale: float = 1.0,
                      arc_mask: np.ndarray | None = None) -> list[CollectiveResult]:
    alpha = alpha_by_class(design, catalog, alpha_scale)
    routing = design.routing
    return [evaluate_plan(topology, plan, alpha, routing.engine, routing.seeds, routing.qps, arc_mask)
            for plan in plan_workload(topology, design)]
