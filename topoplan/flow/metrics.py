"""Metrics: from link loads to completion time, nccl-tests bandwidths and utilization.

A collective is timed as NCCL times it (``flow/nccl.py``), with the bandwidth taken from routed loads:
each phase's bandwidth time is ``max over arcs (load / capacity)``, NVLink counted at NCCL's own per-link
figure (``nccl.nvlink_efficiency``); every flow of the phase runs at once (fluid model) and the most
loaded link sets the pace. NCCL's protocol factor and cap scale it, and
NCCL's latency formula adds the per-step latencies. Phases run one after another, or, for pipelined
algorithms, overlap by chunks. Each candidate algorithm (one, or the tuner's set under ``auto``) is
routed once; since every demand is proportional to the size, the time at any other size (``at``) needs
no new routing.

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

from .. import transport
from ..catalog import Catalog
from ..spec import Design
from ..topology import KIND, LINK_TIER, MEDIUM, Topology
from ..errors import EngineRefused
from . import RouteRequest, Routed, crowding, ecmp, fairshare, nccl, select_engine
from .algorithms import BY_KEY, Algorithm, plan_workload
from .traffic import CollectivePlan, apply_pxn

ARC_CLASSES = ("nvlink", "pcie", "leaf", "spine", "core", "ocs")
MAX_SAMPLES = 5000  # utilization values kept per tier and phase, evenly strided, for histograms
HOTTEST_ARCS = 8    # the busiest arcs kept per phase (arc index, utilization), for the HTML report


def arc_classes(topology: Topology) -> np.ndarray:
    """Per arc, an index into ``ARC_CLASSES``: host links by medium, network links by tier."""
    classes = np.empty(topology.num_arcs, dtype=np.int8)
    host = topology.link_tier == LINK_TIER["host"]
    classes[host] = np.where(topology.medium[host] == MEDIUM["pcie"], 1, 0)
    classes[~host] = topology.link_tier[~host] + 1  # leaf=1 -> 2, spine -> 3, core -> 4, ocs -> 5
    return classes


@dataclass(frozen=True)
class Timing:
    """What turns routed loads into time: NCCL's latencies (times ``latency_scale``; 0 = bandwidth only),
    how a server's GPUs talk (``nvlink`` or ``pcie``), the GPU architecture for NCCL's caps, and the NCCL
    channels of a communicator that spans servers."""

    latency_scale: float = 1.0
    intra: str = "nvlink"
    arch: str = "other"
    channels: int = 2
    network_step_extra_us: float = 0.0   # calibration (catalog, ``nccl --fit``)
    intra_step_extra_us: float = 0.0
    bandwidth_efficiency: float = 1.0
    network_goodput: float = 1.0         # payload share of a fabric link (``transport.goodput``)

    def capacity_gbps(self, topology: Topology, classes: np.ndarray) -> np.ndarray:
        """Link capacities as NCCL plans with them: NVLink at NCCL's own per-link figure, fabric links at the
        transport's payload share, everything times the calibrated bandwidth efficiency."""
        capacity = topology.capacity_gbps * self.bandwidth_efficiency
        efficiency = nccl.nvlink_efficiency(self.arch)
        if efficiency != 1.0:
            capacity = np.where(classes == ARC_CLASSES.index("nvlink"), capacity * efficiency, capacity)
        if self.network_goodput != 1.0:
            fabric = classes >= ARC_CLASSES.index("leaf")    # leaf, spine, core and circuit links
            capacity = np.where(fabric, capacity * self.network_goodput, capacity)
        return capacity


def timing_for(design: Design, catalog: Catalog, latency_scale: float = 1.0,
               topology: Topology | None = None) -> Timing:
    """NCCL's channels: one ring per NIC found by its topology search, then duplicated (``connect.cc``). The
    fabric's transport is that of the switches the NICs plug into (the first tier's)."""
    server = catalog.servers[design.cluster.server]
    return Timing(latency_scale, "nvlink" if server.nvlink_gbps > 0 else "pcie", nccl.gpu_arch(server.gpu),
                  channels=2 * max(1, server.nics), network_step_extra_us=server.network_step_extra_us,
                  intra_step_extra_us=server.intra_step_extra_us, bandwidth_efficiency=server.bandwidth_efficiency,
                  network_goodput=network_goodput(design, catalog, topology))


def network_goodput(design: Design, catalog: Catalog, topology: Topology | None = None) -> float:
    """The payload share of the design's fabric links: its first-tier switch's transport at its NIC's MTU (1.0
    for fabrics without packet switches). The switch model is read off ``topology`` when given (an imported
    fabric names its own), else off the spec."""
    first = None
    if topology is not None:
        leaves = np.flatnonzero((topology.kind == KIND["switch"]) & (topology.tier == 0))
        first = topology.model_of(int(leaves[0])) if leaves.size else None
    else:
        switches = getattr(design.fabric, "switch", None) or {}
        first = switches.get("leaf") or next(iter(switches.values()), None)
    if first is None or first not in catalog.switches:
        return 1.0
    nic = catalog.nics.get(catalog.servers[design.cluster.server].nic)
    return transport.goodput(catalog.switches[first].transport, nic.mtu_bytes if nic else transport.DEFAULT_MTU_BYTES)


@dataclass
class PhaseResult:
    label: str
    intra_steps: int
    inter_steps: int
    bandwidth_s: float | None      # at the plan's size, Simple protocol; None when some pair is unreachable
    max_utilization: float
    p99_utilization: float
    bottleneck: str
    utilization_by_tier: dict
    unreachable_pairs: int = 0
    samples: dict = field(default_factory=dict)  # tier -> utilization of up to MAX_SAMPLES loaded links (plots)
    hottest: tuple = ()  # ((arc, utilization), ...) of the HOTTEST_ARCS busiest arcs, busiest first
    flows_per_receiver: int = 0     # the most network flows into one GPU (incast degree)
    oversubscription: float = 1.0   # the highest oversubscription among the tiers the phase climbs
    flows: crowding.FlowStats | None = None   # fair-share completion times (engines with per-flow paths)
    flows_note: str = ""            # why ``flows`` is missing under such an engine

    @property
    def steps(self) -> int:
        return self.intra_steps + self.inter_steps


@dataclass
class AlgorithmResult:
    """One algorithm's routed phases for a collective; its time under each protocol at any size."""

    plan: CollectivePlan
    algorithm: Algorithm
    shape: nccl.GroupShape
    timing: Timing
    engine: str
    phases: list
    seed_times: list = field(default_factory=list)        # ecmp-hash: time per seed (best protocol)
    seed_max_utilization: list = field(default_factory=list)
    seed_phase_flows: list = field(default_factory=list)  # per seed, per phase: FlowStats or None

    @property
    def reachable(self) -> bool:
        return all(p.bandwidth_s is not None for p in self.phases)

    def steps(self) -> tuple[int, int]:
        """(intra-node steps, network steps) of the whole plan."""
        return sum(p.intra_steps for p in self.phases), sum(p.inter_steps for p in self.phases)

    def extra_latency_s(self) -> float:
        """The calibrated extra per step (catalog), on top of NCCL's constants."""
        intra, inter = self.steps()
        timing = self.timing
        return (intra * timing.intra_step_extra_us + inter * timing.network_step_extra_us) * 1e-6 * timing.latency_scale

    def phase_latencies_s(self, protocol: str) -> list[float]:
        """Each phase's share of the latency; they add up to the collective's latency."""
        latencies = self._nccl_latencies_s(protocol)
        latencies[0] += self.extra_latency_s()
        return latencies

    def _nccl_latencies_s(self, protocol: str) -> list[float]:
        a, shape = self.algorithm, self.shape
        scale = self.timing.latency_scale * 1e-6
        rest = [0.0] * (len(self.phases) - 1)
        if a.nccl and a.family == "tree":
            return [nccl.tree_latency_us(protocol, shape) * scale] + rest
        if a.nccl and a.family == "nvls":
            return [nccl.nvls_latency_us(shape) * scale] + rest
        if a.nccl and a.family == "collnet":
            return [nccl.collnet_latency_us(shape) * scale] + rest
        if a.nccl and a.family == "nvls_tree":
            return [nccl.nvls_tree_latency_us(shape) * scale] + rest
        if a.nccl:
            return [nccl.ring_latency_us(self.plan.collective.op, protocol, shape) * scale] + rest
        base = nccl.phased_latency_us(a.family, protocol, shape, 0, 0)
        return [(nccl.phased_latency_us(a.family, protocol, shape, p.intra_steps, p.inter_steps) - base
                 + (base if i == 0 else 0.0)) * scale for i, p in enumerate(self.phases)]

    def latency_s(self, protocol: str) -> float:
        return float(sum(self.phase_latencies_s(protocol)))

    def factor(self, protocol: str, phase: int = 0) -> float:
        """NCCL's bandwidth factor for a phase: its own family's, else the algorithm's (ring constants for
        plans that are not NCCL's)."""
        family = self.plan.phases[phase].family or (self.algorithm.family if self.algorithm.nccl else "ring")
        return nccl.bandwidth_factor(family, protocol, self.shape)

    def phase_bandwidths_s(self, protocol: str, size: float) -> list[float]:
        scale = size / self.plan.collective.size_bytes if self.plan.collective.size_bytes else 0.0
        return [p.bandwidth_s * scale / self.factor(protocol, i) for i, p in enumerate(self.phases)]

    def bandwidth_s(self, protocol: str, size: float) -> float | None:
        if not self.reachable:
            return None
        stages = self.phase_bandwidths_s(protocol, size)
        total = nccl.pipelined_s(stages, size, self.shape.channels) if self.algorithm.pipelined else sum(stages)
        cap = nccl.bandwidth_cap_GBps(self.algorithm.family, protocol, self.shape) if self.algorithm.nccl else None
        if cap is not None:
            total = max(total, size * self.plan.busbw_factor / (cap * 1e9))
        return float(total)

    def time_s(self, protocol: str, size: float) -> float | None:
        bandwidth = self.bandwidth_s(protocol, size)
        return None if bandwidth is None else self.latency_s(protocol) + bandwidth

    def best(self, size: float) -> tuple[str, float | None]:
        """The protocol NCCL's tuner would take at ``size`` (lowest time) and that time."""
        times = [(self.time_s(p, size), i, p) for i, p in enumerate(self.algorithm.protocols)]
        if times[0][0] is None:
            return self.algorithm.protocols[-1], None
        t, _, protocol = min(times)
        return protocol, t


@dataclass
class CollectiveResult:
    """A collective, timed with every candidate algorithm; the fastest at its size is the one reported."""

    choices: list                   # AlgorithmResult per candidate
    chosen: AlgorithmResult
    protocol: str

    @property
    def plan(self) -> CollectivePlan:
        return self.chosen.plan

    @property
    def engine(self) -> str:
        return self.chosen.engine

    @property
    def phases(self) -> list:
        return self.chosen.phases

    @property
    def algorithm(self) -> str:
        return self.chosen.algorithm.name

    @property
    def channels(self) -> int:
        return self.chosen.shape.channels

    @property
    def seed_times(self) -> list:
        return self.chosen.seed_times

    @property
    def seed_max_utilization(self) -> list:
        return self.chosen.seed_max_utilization

    @property
    def seed_phase_flows(self) -> list:
        return self.chosen.seed_phase_flows

    @property
    def size_bytes(self) -> int:
        return self.plan.collective.size_bytes

    @property
    def latency_s(self) -> float:
        return self.chosen.latency_s(self.protocol)

    @property
    def time_s(self) -> float | None:
        return self.chosen.time_s(self.protocol, self.size_bytes)

    def at(self, size: float) -> tuple[AlgorithmResult, str, float | None]:
        """The tuner's choice at another size, and its time (no new routing: loads scale with size)."""
        best = None
        for order, choice in enumerate(self.choices):
            protocol, t = choice.best(size)
            key = (np.inf if t is None else t, order)
            if best is None or key < best[0]:
                best = (key, choice, protocol, t)
        return best[1], best[2], best[3]

    def alternatives(self) -> dict:
        """``algorithm/protocol`` -> time at the collective's size, for every candidate considered."""
        return {f"{c.algorithm.name}/{p}": c.time_s(p, self.size_bytes) for c in self.choices
                for p in c.algorithm.protocols}

    @property
    def algbw_GBps(self) -> float | None:
        t = self.time_s
        return None if not t else self.size_bytes / t / 1e9

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
        if not self.chosen.reachable:
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


_INJECTION: dict = {}


def _injection_arcs(topology: Topology) -> np.ndarray:
    """Network arcs at a NIC or chip (the injection links utilization is referred to), cached per topology."""
    cached = _INJECTION.get(id(topology))
    if cached is None or cached[0] is not topology:
        endpoint = (np.isin(topology.kind[topology.src], (KIND["nic"], KIND["gpu"])) |
                    np.isin(topology.kind[topology.dst], (KIND["nic"], KIND["gpu"])))
        _INJECTION.clear()
        _INJECTION[id(topology)] = cached = (topology, endpoint & (topology.link_tier != LINK_TIER["host"]))
    return cached[1]


def phase_result(topology: Topology, classes: np.ndarray, load: np.ndarray, label: str, intra_steps: int,
                 inter_steps: int, unreachable: int = 0, capacity_gbps: np.ndarray | None = None,
                 flows: crowding.FlowStats | None = None) -> PhaseResult:
    """A phase's times and utilization from its loads; with ``flows`` (fair share over per-flow paths) its
    bandwidth time is the last flow's completion, which equal flows started together finish exactly when
    the hottest arc drains and unequal ones later."""
    capacity = topology.capacity_gbps if capacity_gbps is None else capacity_gbps
    seconds = load / (capacity * 1e9 / 8)      # time each arc needs for its bytes
    used = load > 0
    if not used.any():
        return PhaseResult(label, intra_steps, inter_steps, None if unreachable else 0.0, 0.0, 0.0, "none", {},
                           unreachable)
    injection = used & _injection_arcs(topology)
    reference = seconds[injection].max() if injection.any() else seconds.max()
    utilization = seconds / reference
    worst = int(np.argmax(seconds))
    by_tier, samples = {}, {}
    for index in np.unique(classes[used]):
        values = utilization[used & (classes == index)]
        by_tier[ARC_CLASSES[index]] = float(values.max())
        samples[ARC_CLASSES[index]] = values[:: max(1, values.size // MAX_SAMPLES)]
    bandwidth = None if unreachable else max(float(seconds[worst]), flows.last_s if flows else 0.0)
    top = _hottest(seconds, worst)
    return PhaseResult(label, intra_steps, inter_steps, bandwidth, float(utilization[worst]),
                       float(np.percentile(utilization[used], 99)), ARC_CLASSES[classes[worst]], by_tier,
                       unreachable, samples, tuple((int(a), float(utilization[a])) for a in top if used[a]),
                       oversubscription=crowding.oversubscription_crossed(topology, load), flows=flows)


def _hottest(seconds: np.ndarray, worst: int) -> np.ndarray:
    """The HOTTEST_ARCS busiest arcs, busiest first (ties in arc order), in two passes over the arcs: the
    arcs at the maximum, or else those at or above the HOTTEST_ARCS-th largest of an even sample (a
    superset of the answer), sorted. (``np.argpartition`` on a million mostly equal loads takes ~0.2 s.)"""
    at_max = np.flatnonzero(seconds == seconds[worst])
    if at_max.size >= HOTTEST_ARCS:
        return at_max[:HOTTEST_ARCS]
    sample = seconds[:: max(1, seconds.size // 4096)]
    threshold = np.sort(sample)[-min(HOTTEST_ARCS, sample.size)]
    candidates = np.flatnonzero(seconds >= threshold)
    return candidates[np.argsort(-seconds[candidates], kind="stable")][:HOTTEST_ARCS]


def shape_of(plan: CollectivePlan, timing: Timing) -> nccl.GroupShape:
    return nccl.GroupShape(plan.group_size, plan.servers, timing.intra, timing.channels, timing.arch)


def evaluate_plan(topology: Topology, plan: CollectivePlan, timing: Timing = Timing(), engine: str = "ecmp",
                  seeds: int = 8, qps: int = 1, arc_mask: np.ndarray | None = None,
                  routed_one=None) -> AlgorithmResult:
    """Route one algorithm's phases (every seed of a seeded engine, the median seed kept). ``routed_one``
    (optional) is called with a label after each routing call (progress)."""
    classes = arc_classes(topology)
    chosen = select_engine(topology, RouteRequest(engine, qps=qps, arc_mask=arc_mask))
    pxn = topology.layout.pxn
    demands = [apply_pxn(topology, phase.demand) if pxn else phase.demand for phase in plan.phases]
    algorithm = BY_KEY[(plan.collective.op, plan.algorithm)]
    shape = shape_of(plan, timing)
    capacity = timing.capacity_gbps(topology, classes)
    seed_list = list(range(seeds)) if chosen.seeded else [0]
    request = RouteRequest(chosen.name, qps=qps, arc_mask=arc_mask)
    by_phase = []   # per phase, one Routed per seed
    for phase, demand in zip(plan.phases, demands):
        if phase.load is not None:
            by_phase.append([Routed(phase.load)] * len(seed_list))
            continue
        if chosen.route_seeds is not None:
            by_phase.append(chosen.route_seeds(topology, demand, request, seed_list))
        else:
            by_phase.append([chosen.route(topology, demand, RouteRequest(chosen.name, seed=seed, qps=qps,
                                                                         arc_mask=arc_mask)) for seed in seed_list])
        if routed_one is not None:
            routed_one(f"{plan.collective.name}: {phase.label}")
    receivers = [crowding.flows_per_receiver(topology, demand) for demand in demands]
    per_seed = []
    for index, seed in enumerate(seed_list):
        phases = []
        for phase, routed, demand, into in zip(plan.phases, by_phase, demands, receivers):
            flows, note = None, ""
            if chosen.flow_paths is not None and phase.load is None and not routed[index].unreachable_pairs:
                flows, note = _fair_share(topology, chosen, demand, RouteRequest(chosen.name, seed, qps, arc_mask),
                                          capacity, lockstep=algorithm.name != "direct")
                if flows is not None and routed_one is not None:
                    routed_one(f"{plan.collective.name}: {phase.label}: fair share, seed {seed}")
            result = phase_result(topology, classes, routed[index].load, phase.label, phase.intra_steps,
                                  phase.inter_steps, routed[index].unreachable_pairs, capacity, flows)
            result.flows_per_receiver, result.flows_note = into, note
            phases.append(result)
        per_seed.append(AlgorithmResult(plan, algorithm, shape, timing, chosen.name, phases))
    if not chosen.seeded:
        return per_seed[0]
    # report the median seed (by time); keep every seed's time and utilization
    times = [r.best(plan.collective.size_bytes)[1] for r in per_seed]
    times = [np.inf if t is None else t for t in times]
    median = per_seed[int(np.argsort(times)[len(times) // 2])]
    median.seed_times = [None if t == np.inf else t for t in times]
    median.seed_max_utilization = [max(p.max_utilization for p in r.phases) for r in per_seed]
    median.seed_phase_flows = [[p.flows for p in r.phases] for r in per_seed]
    return median


def _fair_share(topology: Topology, engine, demand, request: RouteRequest, capacity_gbps: np.ndarray,
                lockstep: bool) -> tuple[crowding.FlowStats | None, str]:
    """A phase's flows on their paths, sharing links max-min fairly; None and why when there are too many."""
    entries = fairshare.entries_estimate(topology, demand, request.qps)
    if entries > fairshare.MAX_ENTRIES:
        return None, (f"fair share not computed: {crowding.flow_count(demand, request.qps):,} flows on about "
                      f"{entries:,} links in all, above {fairshare.MAX_ENTRIES:,} (memory); the time is the hottest "
                      "link's load over its capacity (a lower bound)")
    return crowding.fair_share(engine.flow_paths(topology, demand, request), capacity_gbps, lockstep), ""


def evaluate_collective(topology: Topology, plans: list, timing: Timing = Timing(), engine: str = "ecmp",
                        seeds: int = 8, qps: int = 1, arc_mask: np.ndarray | None = None,
                        routed_one=None) -> CollectiveResult:
    """Every candidate algorithm's plan routed; the tuner's choice at the collective's size reported."""
    choices = [evaluate_plan(topology, plan, timing, engine, seeds, qps, arc_mask, routed_one) for plan in plans]
    result = CollectiveResult(choices, choices[0], choices[0].algorithm.protocols[-1])
    chosen, protocol, _ = result.at(plans[0].collective.size_bytes)
    result.chosen, result.protocol = chosen, protocol
    return result


@dataclass(frozen=True)
class RoutingWork:
    """What routing a workload will take, known before any of it starts: the engine that runs, the routing
    calls (one per phase, all seeds at once) and, for the engines that search per destination, their
    multiply-adds (``ecmp.search_ops``, counted on the phases' demands before NCCL's PXN rewrite, which
    keeps their destinations; 0 for the closed forms); for engines with per-flow paths, the fair-share
    solves (one per phase and seed) and their flow x arc entries (``fairshare.entries_estimate``)."""

    engine: str
    routes: int
    search_ops: int
    fair_shares: int = 0
    fair_share_entries: int = 0

    @property
    def steps(self) -> int:
        """Progress steps: each routing call, then each fair-share solve."""
        return self.routes + self.fair_shares

    @property
    def minutes(self) -> float:
        """At the rates the benchmarks measure; 0 for the closed forms, which take seconds at any size."""
        return (self.search_ops / ecmp.MEASURED_OPS_PER_S +
                self.fair_share_entries * fairshare.MEASURED_S_PER_ENTRY) / 60


def routing_work(topology: Topology, plan_sets: list, engine: str = "ecmp", seeds: int = 8, qps: int = 1,
                 arc_mask: np.ndarray | None = None) -> RoutingWork:
    chosen = select_engine(topology, RouteRequest(engine, qps=qps, arc_mask=arc_mask))
    demands = [phase.demand for plans in plan_sets for plan in plans for phase in plan.phases if phase.load is None]
    per_demand = 1 if chosen.route_seeds is not None or not chosen.seeded else seeds
    ops = 0
    if chosen.per_destination:
        push = chosen.route_seeds is None   # ecmp pushes flow back along the distances; ecmp-hash hashes paths
        ops = sum(ecmp.search_ops(topology, d.destinations().size, arc_mask, push) for d in demands) * per_demand
    solves = entries = 0
    if chosen.flow_paths is not None:
        runs = seeds if chosen.seeded else 1
        sizes = [fairshare.entries_estimate(topology, d, qps) for d in demands]
        sizes = [n for n in sizes if n <= fairshare.MAX_ENTRIES]
        solves, entries = len(sizes) * runs, sum(sizes) * runs
    return RoutingWork(chosen.name, len(demands), ops, solves, entries)


def evaluate_workload(topology: Topology, design: Design, catalog: Catalog, latency_scale: float = 1.0,
                      arc_mask: np.ndarray | None = None, progress=None) -> list[CollectiveResult]:
    """Every collective of the design's workload. Refuses (``EngineRefused``) before routing any of it when
    the whole would search past ``ecmp.MAX_SEARCH_OPS``. ``progress`` (optional) gets ``start(RoutingWork)``
    once and ``step(label)`` after each routing call."""
    timing = timing_for(design, catalog, latency_scale, topology)
    routing = design.routing
    plan_sets = plan_workload(topology, design)
    work = routing_work(topology, plan_sets, routing.engine, routing.seeds, routing.qps, arc_mask)
    refused = ecmp.too_much_search(work.engine, work.search_ops)
    if refused is not None:
        raise EngineRefused(refused)
    if progress is not None:
        progress.start(work)
    step = None if progress is None else progress.step
    return [evaluate_collective(topology, plans, timing, routing.engine, routing.seeds, routing.qps, arc_mask, step)
            for plans in plan_sets]
