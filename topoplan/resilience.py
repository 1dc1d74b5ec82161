"""Resilience: failure scenarios of a design, evaluated degraded, and what failures cost in goodput (issue 16).

One stage of the pipeline (``topology -> resilience``), no printing, no files:

* ``elements(topology, kind)`` are the failure units a scenario names (a switch of a tier, a network link
  of a tier, a NIC, a server, a plane, an OCS), each as the links and nodes that go down with it;
* a ``Scenario`` of the spec (``failures.scenarios``) expands to failure sets: explicit elements, seeded
  random samples of ``count`` elements, or *every* single element of a kind, which is evaluated once per
  symmetry class (``symmetry_classes``) and checked on a second member of each class;
* ``evaluate_failure`` is one degraded run: the blast radius (``failures.py``); unless the job stops, every
  collective re-routed with the failed arcs masked (ECMP re-spreads over the surviving paths) and the
  degraded bisection, all relative to healthy;
* ``assess`` runs a design's scenarios (on an executor: this process, a process pool or Dask; same
  results) and adds the interruption rates and goodput (``reliability.py``); a unit's rate counts only
  the share of its failures that stop the job where an exhaustive scenario of that kind measured it.

Symmetry classes are colour-refinement (1-WL) classes of the topology graph whose arcs are coloured by
capacity and by their healthy loads under every phase of the workload, so elements that the fabric's
structure or the job's traffic tells apart never share a class. Colour refinement can merge elements no
automorphism maps onto each other (it cannot tell some regular graphs apart), so every class of more than
one element is evaluated twice, on its first and on another member; where the two outcomes differ the
class is evaluated member by member, and the result says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import failures as _failures
from . import reliability
from .flow import route as _route
from .flow.bisection import bisection, degraded_bisection
from .flow.algorithms import plan_workload
from .flow.metrics import evaluate_workload
from .flow.traffic import apply_pxn
from .spec import FailurePolicy, Scenario
from .topology import KIND, LINK_TIER, SWITCH_TIERS, Topology

# evaluating a class member by member when its two samples disagree stops past this many runs
MAX_BRUTE_FORCE_RUNS = 512
# explicit and random runs a spec may ask for at once: a degraded run takes seconds at 16k GPUs, so past
# this the assessment would take hours; refused before any routing, with the count
MAX_SCENARIO_RUNS = 2_000

# the failure units of ``reliability`` rates whose failures an exhaustive scenario of this element kind
# covers: its stop fraction scales their interruptions
UNIT_OF_ELEMENT = {"leaf-link": "nic_link", "leaf": "leaf_switch", "switch": "switch", "link": "link"}

DEFAULT_SCENARIOS = (Scenario("every-switch", "switch", "every"), Scenario("every-link", "link", "every"))


@dataclass(frozen=True)
class Element:
    label: str
    links: np.ndarray
    nodes: np.ndarray


def element_count(topology: Topology, kind: str) -> int:
    return len(_element_ids(topology, kind))


def _element_ids(topology: Topology, kind: str) -> np.ndarray:
    switch = topology.kind == KIND["switch"]
    if kind == "switch":
        return np.flatnonzero(switch)
    if kind in SWITCH_TIERS:
        return np.flatnonzero(switch & (topology.tier == SWITCH_TIERS.index(kind)))
    if kind == "link":
        return np.flatnonzero(topology.link_tier[0::2] != LINK_TIER["host"])
    if kind.endswith("-link"):
        return np.flatnonzero(topology.link_tier[0::2] == LINK_TIER[kind[:-len("-link")]])
    if kind in ("nic", "ocs"):
        return topology.nodes_of(kind)
    if kind == "server":
        return np.unique(topology.server[topology.gpus])
    if kind == "plane":
        return np.unique(topology.plane[switch]) if switch.any() else np.zeros(0, dtype=np.int64)
    raise ValueError(f"unknown element kind {kind!r}")


def elements(topology: Topology, kind: str, picks) -> list[Element]:
    """The ``picks``-th elements (positions in ``_element_ids`` order) of ``kind``, as what goes down."""
    ids = _element_ids(topology, kind)
    out = []
    none = np.zeros(0, dtype=np.int64)
    for pick in np.asarray(picks, dtype=np.int64).tolist():
        item = int(ids[pick])
        if kind.endswith("link"):
            a, b = topology.src[2 * item], topology.dst[2 * item]
            out.append(Element(f"link {topology.node_name(a)} - {topology.node_name(b)}", np.array([item]), none))
        elif kind == "server":
            out.append(Element(f"server {item}", none, np.flatnonzero(topology.server == item)))
        elif kind == "plane":
            nodes = np.flatnonzero((topology.kind == KIND["switch"]) & (topology.plane == item))
            out.append(Element(f"plane {item}", none, nodes))
        else:
            out.append(Element(topology.node_name(item), none, np.array([item])))
    return out


# --- symmetry -----------------------------------------------------------------------------------------

def _dense(values: np.ndarray) -> np.ndarray:
    """Small consecutive ids for the distinct rows (or values) of ``values``."""
    if values.ndim == 1:
        return np.unique(values, return_inverse=True)[1].reshape(-1)
    return np.unique(values, axis=0, return_inverse=True)[1].reshape(-1)


def healthy_arc_colours(topology: Topology, design) -> np.ndarray:
    """Per arc, an id of (capacity, healthy load under every phase of every candidate plan)."""
    columns = [np.round(topology.capacity_gbps, 6)]
    pxn = topology.layout.pxn
    for plans in plan_workload(topology, design):
        for plan in plans:
            for phase in plan.phases:
                if phase.load is not None:
                    load = phase.load
                else:
                    demand = apply_pxn(topology, phase.demand) if pxn else phase.demand
                    load = _route(topology, demand, design.routing.engine).load
                scale = float(np.abs(load).max(initial=0.0)) or 1.0
                columns.append(np.round(load / scale, 9))
    return _dense(np.stack(columns, axis=1))


def node_colours(topology: Topology, arc_colour: np.ndarray, rounds: int = 64) -> np.ndarray:
    """Colour refinement: start from (kind, tier), and give nodes new colours by the multiset of (arc colour,
    neighbour colour) over their out-arcs and in-arcs until the partition stops splitting."""
    rng = np.random.default_rng(0)
    colour = _dense(np.stack([topology.kind.astype(np.int64), topology.tier.astype(np.int64)], axis=1))
    n = topology.num_nodes
    src, dst = topology.src, topology.dst
    count = np.unique(colour).size
    for _ in range(rounds):
        signature = [colour]
        for tail, head in ((src, dst), (dst, src)):
            code = _dense(np.stack([arc_colour, colour[head]], axis=1))
            weights = rng.integers(1, 2**62, size=int(code.max(initial=0)) + 1, dtype=np.int64)
            # a multiset hash: the wrap-around sum of one random word per member
            total = np.zeros(n, dtype=np.int64)
            np.add.at(total, tail, weights[code])
            signature.append(total)
        refined = _dense(np.stack(signature, axis=1))
        if np.unique(refined).size == count:
            return refined
        colour, count = refined, np.unique(refined).size
    return colour


def symmetry_classes(topology: Topology, kind: str, node_colour: np.ndarray, arc_colour: np.ndarray) -> list:
    """The elements of ``kind`` (positions) grouped into classes, each a sorted array, largest first."""
    ids = _element_ids(topology, kind)
    if kind.endswith("link"):
        a, b = topology.src[2 * ids], topology.dst[2 * ids]
        ca, cb = node_colour[a], node_colour[b]
        forward, backward = arc_colour[2 * ids], arc_colour[2 * ids + 1]
        flip = ca > cb
        key = np.stack([np.where(flip, cb, ca), np.where(flip, ca, cb),
                        np.where(flip, backward, forward), np.where(flip, forward, backward)], axis=1)
    elif kind == "server":
        nodes = np.flatnonzero(topology.server >= 0)
        per_server = np.zeros((int(topology.server.max(initial=0)) + 1, np.unique(node_colour).size), dtype=np.int64)
        np.add.at(per_server, (topology.server[nodes], node_colour[nodes]), 1)
        key = per_server[ids]
    elif kind == "plane":
        switches = np.flatnonzero(topology.kind == KIND["switch"])
        per_plane = np.zeros((int(topology.plane.max(initial=0)) + 1, np.unique(node_colour).size), dtype=np.int64)
        np.add.at(per_plane, (topology.plane[switches], node_colour[switches]), 1)
        key = per_plane[ids]
    else:
        key = node_colour[ids]
    label = _dense(key)
    order = np.argsort(label, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(label[order])) + 1) if ids.size else []
    return sorted(groups, key=lambda g: (-g.size, int(g[0])))


# --- one degraded run ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class CollectiveOutcome:
    name: str
    time_s: float | None        # None: not routable (some pair has no path) or the job stopped
    busbw_GBps: float | None
    slowdown: float | None      # degraded time / healthy time


@dataclass(frozen=True)
class Outcome:
    """One set of failed elements and what it does."""

    label: str
    failed_links: int
    stopped_gpus: int
    degraded_servers: int
    worst_server_fraction: float
    bisection_gbps: float | None
    collectives: tuple

    @property
    def job_stops(self) -> bool:
        return self.stopped_gpus > 0

    @property
    def worst_slowdown(self) -> float | None:
        values = [c.slowdown for c in self.collectives if c.slowdown is not None]
        return max(values) if values else None

    def same_as(self, other: "Outcome") -> bool:
        """Same effect (the labels aside), to 1e-9 relative."""
        def close(a, b):
            return (a is None) == (b is None) and (a is None or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15))
        return (self.failed_links == other.failed_links and self.stopped_gpus == other.stopped_gpus
                and self.degraded_servers == other.degraded_servers
                and close(self.worst_server_fraction, other.worst_server_fraction)
                and close(self.bisection_gbps, other.bisection_gbps)
                and all(close(a.time_s, b.time_s) for a, b in zip(self.collectives, other.collectives)))


@dataclass(frozen=True)
class Healthy:
    bisection_gbps: float
    collectives: tuple   # CollectiveOutcome with slowdown 1


def healthy_state(topology: Topology, design, catalog) -> Healthy:
    results = evaluate_workload(topology, design, catalog)
    return Healthy(bisection(topology).gbps, tuple(
        CollectiveOutcome(r.plan.collective.name, r.time_s, r.busbw_GBps, 1.0) for r in results))


def evaluate_failure(topology: Topology, design, catalog, healthy: Healthy, element_set: list[Element],
                     label: str = "") -> Outcome:
    links = np.concatenate([e.links for e in element_set]) if element_set else np.zeros(0, dtype=np.int64)
    nodes = np.concatenate([e.nodes for e in element_set]) if element_set else np.zeros(0, dtype=np.int64)
    radius = _failures.blast_radius(topology, links, nodes)
    label = label or ", ".join(e.label for e in element_set)
    common = dict(label=label, failed_links=radius.failed_links, stopped_gpus=int(radius.stopped_gpus.size),
                  degraded_servers=radius.degraded_servers, worst_server_fraction=radius.worst_server_fraction)
    if radius.job_stops:
        return Outcome(**common, bisection_gbps=None, collectives=tuple(
            CollectiveOutcome(c.name, None, None, None) for c in healthy.collectives))
    mask = _failures.arc_mask(_failures.link_down_mask(topology, links, nodes))
    results = evaluate_workload(topology, design, catalog, arc_mask=mask)
    collectives = []
    for base, r in zip(healthy.collectives, results):
        time_s = r.time_s
        slowdown = None if time_s is None or not base.time_s else time_s / base.time_s
        collectives.append(CollectiveOutcome(base.name, time_s, r.busbw_GBps, slowdown))
    return Outcome(**common, bisection_gbps=degraded_bisection(topology, mask, healthy.bisection_gbps),
                   collectives=tuple(collectives))


# --- scenarios ----------------------------------------------------------------------------------------

@dataclass
class ScenarioResult:
    """A scenario's runs: ``outcomes`` with how many elements (every) or samples (random) each stands for."""

    scenario: Scenario
    elements: int                  # elements of the kind in this topology
    outcomes: list = field(default_factory=list)   # (Outcome, weight)
    classes: int = 0               # every: symmetry classes
    runs: int = 0                  # degraded evaluations made
    split_classes: int = 0         # every: classes whose two samples differed, evaluated member by member

    @property
    def weight(self) -> int:
        return sum(w for _, w in self.outcomes)

    @property
    def stop_fraction(self) -> float:
        return sum(w for o, w in self.outcomes if o.job_stops) / self.weight if self.outcomes else 0.0

    def worst(self, key):
        values = [key(o) for o, _ in self.outcomes if key(o) is not None]
        return max(values) if values else None


def run_count(topology: Topology, scenario: Scenario, classes: int | None = None) -> int:
    """Degraded evaluations a scenario will take at most (before class splits)."""
    if scenario.mode == "index":
        return 1
    if scenario.mode == "random":
        return scenario.samples
    return 2 * classes if classes is not None else element_count(topology, scenario.element)


class Runner:
    """Evaluates failure sets of one design on an executor (``executors.py``: this process, a process pool of
    ``workers``, or Dask), which gets the topology once as its context; results come back in order, so
    they do not depend on where they ran. ``step(label)`` is called as each run finishes. Use as a context
    manager."""

    def __init__(self, topology: Topology, design, catalog, healthy: Healthy, workers: int = 1, step=None,
                 executor=None):
        from .executors import ProcessExecutor

        self.state = (topology, design, catalog, healthy)
        self.step = step
        self.executor = executor if executor is not None else ProcessExecutor(workers)

    def __enter__(self):
        self.executor.__enter__()
        return self

    def __exit__(self, kind, *rest):
        self.executor.__exit__(kind, *rest)

    def map(self, kind: str, runs: list, prefix: str = "") -> list:
        """``runs``: (element picks, label) pairs of element ``kind``; their outcomes, in order."""
        jobs = ((index, (kind, list(picks), label)) for index, (picks, label) in enumerate(runs))
        outcomes: dict = {}
        for index, ok, outcome in self.executor.imap(_evaluate_job, self.state, jobs):
            if not ok:   # a failure set the model cannot evaluate is a bug, not an outcome
                raise RuntimeError(f"failure run {runs[index][1]!r} raised {outcome}")
            outcomes[index] = outcome
            if self.step is not None:
                self.step(f"{prefix}{outcome.label}")
        return [outcomes[index] for index in range(len(runs))]


def _evaluate_job(state, job) -> Outcome:
    (topology, design, catalog, healthy), (kind, picks, label) = state, job
    return evaluate_failure(topology, design, catalog, healthy, elements(topology, kind, picks), label)


def run_scenario(topology: Topology, design, catalog, healthy: Healthy, scenario: Scenario, colours=None,
                 step=None, runner: Runner | None = None) -> ScenarioResult:
    """``colours``: (node colours, arc colours) for ``every`` scenarios; ``step(label)`` after each run;
    ``runner``: where the runs go (default: this process)."""
    if runner is None:
        with Runner(topology, design, catalog, healthy, 1, step) as own:
            return run_scenario(topology, design, catalog, healthy, scenario, colours, runner=own)
    total = element_count(topology, scenario.element)
    result = ScenarioResult(scenario, total)
    kind = scenario.element

    def run(runs):
        result.runs += len(runs)
        return runner.map(kind, runs, f"{scenario.name}: ")

    if scenario.mode == "index":
        result.outcomes.append((run([(scenario.indices, "")])[0], 1))
        return result
    if scenario.mode == "random":
        rng = np.random.default_rng(scenario.seed)
        picks = [np.sort(rng.choice(total, size=scenario.count, replace=False)) for _ in range(scenario.samples)]
        outcomes = run([(p, f"sample {i}") for i, p in enumerate(picks)])
        result.outcomes.extend((o, 1) for o in outcomes)
        return result
    node_colour, arc_colour = colours
    groups = symmetry_classes(topology, kind, node_colour, arc_colour)
    result.classes = len(groups)
    # each class on its first member and, if it has more, on one in the middle
    samples = [(members[0], members[members.size // 2]) if members.size > 1 else (members[0],) for members in groups]
    outcomes = iter(run([([m], "") for sample in samples for m in sample]))
    firsts = [tuple(next(outcomes) for _ in sample) for sample in samples]
    split = []
    for members, sampled in zip(groups, firsts):
        if len(sampled) == 1 or sampled[0].same_as(sampled[1]):
            result.outcomes.append((sampled[0], int(members.size)))
            continue
        result.split_classes += 1
        if result.runs + sum(m.size for m in split) + members.size > MAX_BRUTE_FORCE_RUNS:
            raise ValueError(f"scenario {scenario.name}: a class of {members.size:,} elements is not "
                             f"symmetric and would take more than {MAX_BRUTE_FORCE_RUNS} runs")
        result.outcomes.extend([(sampled[0], 1), (sampled[1], 1)])
        split.append(np.delete(members, [0, members.size // 2]))
    rest = run([([m], "") for members in split for m in members])
    result.outcomes.extend((o, 1) for o in rest)
    return result


# --- the whole assessment -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Goodput:
    checkpoint_s: float
    restart_s: float
    young_interval_s: float
    daly_interval_s: float
    waste_fraction: float        # at Daly's interval
    goodput: float
    lost_gpu_hours_per_day: float
    lost_usd_per_day: float | None


@dataclass
class Assessment:
    healthy: Healthy
    scenarios: list          # ScenarioResult
    counts: dict             # failure units (failures.component_counts)
    rates: tuple             # reliability.ComponentRate
    interruptions: reliability.Interruptions
    goodput: Goodput | None  # None when nothing interrupts
    stop_fractions: dict = field(default_factory=dict)  # unit -> share of its failures that stop the job

    @property
    def worst_single_failure_slowdown(self) -> float | None:
        values = [r.worst(lambda o: o.worst_slowdown) for r in self.scenarios
                  if r.scenario.mode == "every" or (r.scenario.mode == "index" and len(r.scenario.indices) == 1)]
        values = [v for v in values if v is not None]
        return max(values) if values else None


def goodput_of(interruptions: reliability.Interruptions, gpus: int, policy: FailurePolicy) -> Goodput | None:
    if interruptions.per_day <= 0:
        return None
    mtbf_s = interruptions.mtbf_h * reliability.SECONDS_PER_HOUR
    young = reliability.young_interval_s(policy.checkpoint_s, mtbf_s)
    daly = reliability.daly_interval_s(policy.checkpoint_s, mtbf_s)
    waste = reliability.waste_fraction(daly, policy.checkpoint_s, mtbf_s, policy.restart_s)
    lost = waste * gpus * 24.0
    usd = None if policy.gpu_hour_usd is None else lost * policy.gpu_hour_usd
    return Goodput(policy.checkpoint_s, policy.restart_s, young, daly, waste, 1.0 - waste, lost, usd)


def check_scenarios(topology: Topology, design, policy: FailurePolicy) -> None:
    """``InfeasibleDesign`` (pointing into the spec) for a scenario this topology cannot have, or for more
    explicit and random runs than ``MAX_SCENARIO_RUNS``."""
    asked = sum(run_count(topology, s) for s in policy.scenarios if s.mode != "every")
    if asked > MAX_SCENARIO_RUNS:
        raise design.infeasible("failures.scenarios", f"the scenarios ask for {asked:,} degraded runs, more than "
                                f"the {MAX_SCENARIO_RUNS:,} topoplan runs at once (each routes the whole workload)",
                                "use fewer random samples, or split them over several specs")
    for position, s in enumerate(policy.scenarios):
        path = f"failures.scenarios.{position}"
        have = element_count(topology, s.element)
        if s.mode == "index" and max(s.indices) >= have:
            raise design.infeasible(f"{path}.index", f"index {max(s.indices):,} is past the {have:,} "
                                    f"{s.element} element(s) of this fabric",
                                    f"use 0..{have - 1:,}" if have else f"this fabric has no {s.element}")
        if s.mode == "random" and s.count > have:
            raise design.infeasible(f"{path}.random.count", f"{s.count:,} {s.element} failures at once, but this "
                                    f"fabric has {have:,}", f"use a count of at most {have:,}" if have else
                                    f"this fabric has no {s.element}")


def plan_runs(topology: Topology, design, policy: FailurePolicy) -> tuple[list, tuple | None, int]:
    """The scenarios to run, the symmetry colours exhaustive ones need (or None), and the degraded runs
    they will take before any class splits; ``InfeasibleDesign`` past ``MAX_SCENARIO_RUNS``."""
    check_scenarios(topology, design, policy)
    scenarios = list(policy.scenarios or DEFAULT_SCENARIOS)
    scenarios = [s for s in scenarios if element_count(topology, s.element) or s.mode != "every"]
    colours, classes = None, {}
    if any(s.mode == "every" for s in scenarios):
        arc_colour = healthy_arc_colours(topology, design)
        colours = (node_colours(topology, arc_colour), arc_colour)
        classes = {s.name: len(symmetry_classes(topology, s.element, *colours)) for s in scenarios
                   if s.mode == "every"}
    runs = sum(run_count(topology, s, classes.get(s.name)) for s in scenarios)
    if runs > MAX_SCENARIO_RUNS:
        every = f" ({', '.join(f'{name}: {n:,} classes' for name, n in classes.items())})" if classes else ""
        raise design.infeasible("failures.scenarios", f"the scenarios take {runs:,} degraded runs{every}, more "
                                f"than the {MAX_SCENARIO_RUNS:,} topoplan runs at once (each routes the whole "
                                "workload)", "name a tier (spine, leaf-link, ...) instead of every switch or "
                                "link, or split the scenarios over several specs")
    return scenarios, colours, runs


def assess(topology: Topology, design, catalog, policy: FailurePolicy, progress=None, workers: int = 1,
           executor=None) -> Assessment:
    """Every scenario of ``policy`` and the design's interruption rates and goodput. ``progress``
    (optional) gets ``begin(total runs)`` once and ``step(label)`` after each run; ``workers`` processes,
    or ``executor`` (``executors.py``), share the runs (the result does not depend on how many or where)."""
    scenarios, colours, runs = plan_runs(topology, design, policy)
    healthy = healthy_state(topology, design, catalog)
    if progress is not None:
        progress.begin(runs)
    step = None if progress is None else progress.step
    with Runner(topology, design, catalog, healthy, workers, step, executor) as runner:
        results = [run_scenario(topology, design, catalog, healthy, s, colours, runner=runner) for s in scenarios]
    counts = _failures.component_counts(topology)
    rates = tuple(rate for name in policy.rates for rate in reliability.RATE_SETS[name]())
    stops = stop_fractions(results)
    interruptions = reliability.interruptions(rates, counts, stops)
    return Assessment(healthy, results, counts, rates, interruptions,
                      goodput_of(interruptions, int(topology.gpus.size), policy), stops)


def stop_fractions(results: list) -> dict[str, float]:
    """Per failure unit of the rates, the share of its single failures that stop the job, from the
    exhaustive scenarios of the matching element kind (units without one count every failure)."""
    return {UNIT_OF_ELEMENT[r.scenario.element]: r.stop_fraction for r in results
            if r.scenario.mode == "every" and r.scenario.element in UNIT_OF_ELEMENT and r.weight}
