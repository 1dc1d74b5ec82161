"""Search: evaluate every candidate of a space through the pipeline, count the infeasible ones by reason,
and keep the Pareto front of network cost per GPU against the workload's completion time, per GPU count.

Candidates are generated lazily and evaluated on an executor (``topoplan/executors.py``: this process, a
process pool or Dask), at most a few per worker in flight. Each candidate is keyed by a content hash of its
resolved spec and the catalog entries it uses (``candidate_key``), which is also its cache key; results are
merged as they complete and put back in candidate order, so the JSON is the same byte for byte whatever the
executor, the number of workers or the cache. Infeasible candidates are counted by reason and, unless
asked, not kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import sites
from ..catalog import Catalog, load_catalog
from ..errors import Refused, TopoplanError
from ..metrics import objectives
from ..spec import REACH_CLASSES
from .sizing import size_cheapest
from .space import RANK_BY, layout_label
from .space import Space, candidate_specs
from ..cache import EntryDigests, content_key, entries_used
from ..executors import ProcessExecutor, RunStats, Task, run_tasks

DESIGN_OBJECTIVE, COLLECTIVE_OBJECTIVE = objectives()  # the Pareto front's axes


@dataclass
class Outcome:
    name: str
    spec: dict
    figures: dict | None = None     # when feasible
    reason: str = ""                # when not


def evaluate_candidate(catalog, item) -> Outcome:
    """One candidate through the pipeline; infeasible or invalid candidates come back with their reason."""
    from ..pipeline import build, evaluate
    from ..report import build_report
    from ..spec import design_from_data

    name, spec, sizing, weights, constraints, resilience = item
    multi_site = sites.is_multi_site(spec)
    try:
        if sizing is not None:
            place = spec["sites"][0] if multi_site else spec   # every site has the candidate's fabric
            sized = size_cheapest(catalog, place["cluster"]["server"], place["cluster"]["gpus"],
                                  place["fabric"]["planes"], sizing["switches"], sizing["max_ratio"],
                                  sizing["max_tiers"], sizing["cabling"])
            fabric = {**place["fabric"], "switch": sized.models, "tiers": sized.tiers,
                      "leaf_uplinks": sized.leaf_uplinks}
            spec = ({**spec, "sites": [{**site, "fabric": fabric} for site in spec["sites"]]} if multi_site
                    else {**spec, "fabric": fabric})
        if multi_site:
            design = sites.multi_site_from_data(spec, catalog, name)
            built = sites.build(design, catalog)
            structures = [_structure(site.design, *one) for site, one in zip(design.sites, built[0])]
            whole = {**structures[0], "gpus": design.gpus, "cost_per_gpu_usd": round(built[3].total_usd / design.gpus, 2),
                     "power_w": round(built[3].power_w, 1), "diameter_hops": built[2].layout.diameter_hops}
            missed = _violations(whole, constraints)
        else:
            design = design_from_data(spec, catalog, name)
            built = build(design, catalog)
            missed = _violations(_structure(design, *built), constraints)
        if missed:  # pruned: the constraints decide before the flow solver runs
            return Outcome(name, spec, reason="constraint: " + missed[0])
        report = build_report(sites.evaluate(design, catalog) if multi_site else evaluate(design, catalog, built=built))
    except TopoplanError as err:
        return Outcome(name, spec, reason=err.problems[0].message)
    except Refused as err:
        return Outcome(name, spec, reason=f"sizing: {err}")
    per_collective = {c["name"]: COLLECTIVE_OBJECTIVE.get(c) for c in report["collectives"]}
    if any(v is None for v in per_collective.values()):
        return Outcome(name, spec, reason="some collective pairs are unreachable")
    training = report.get("training")
    if training is not None and not training["fits_in_memory"]:
        return Outcome(name, spec, reason="the model does not fit in GPU memory")
    if training is not None and not math.isfinite(training["step_time_s"]):
        return Outcome(name, spec, reason="some collective pairs are unreachable")
    weighted = sum(weights.get(n, 1.0) * v for n, v in per_collective.items())
    if not per_collective and training is not None:   # a training-only space: the time axis is the step
        weighted = training["step_time_s"]
    fabric = spec["sites"][0]["fabric"] if multi_site else spec["fabric"]
    topology = f"{fabric['topology']} x{len(spec['sites'])} sites" if multi_site else report["design"]["topology"]
    figures = {"topology": topology, "gpus": report["design"]["gpus"],
               "server": report["design"]["server"], "switch": switch_label(fabric),
               "oversubscription": (round(sized.leaf_downlinks / sized.leaf_uplinks, 3) if sizing is not None
                                    else fabric.get("oversubscription", 1)),
               "planes": fabric.get("planes", 1),
               "tiers": report["fabric"]["tiers"], "switches": report["fabric"]["switches"]["total"],
               "cost_usd": report["cost"]["total_usd"], DESIGN_OBJECTIVE.key: DESIGN_OBJECTIVE.get(report),
               "cost_by_category_usd": report["cost"]["by_category"],
               "power_w": report["power"]["total_w"], COLLECTIVE_OBJECTIVE.key: weighted,
               "bisection_per_gpu_gbps": report["bisection"]["per_gpu_gbps"],
               "diameter_hops": report["diameter_hops"],
               "busbw_GBps": {c["name"]: c["busbw_GBps"] for c in report["collectives"]}}
    if multi_site:
        figures.update({"sites": len(spec["sites"]), "wan_gbps": report["wan"]["total_gbps"],
                        "sync": report["wan"]["sync"], "wan_utilization": training["cross_site"]["utilization"]})
    if resilience is not None:
        figures.update(goodput_figures(built[0], report, weighted, resilience))
    if training is not None:
        cluster_usd = report["cost"]["total_usd"] + report["cost"]["servers_usd"]
        figures.update({"layout": layout_label({k: v for k, v in training["parallelism"].items()
                                                if k != "dp" and (v > 1 or k == "tp")}),
                        "step_time_s": training["step_time_s"], "mfu": training["mfu"],
                        "tokens_per_s": training["tokens_per_s"], "usd_per_mtok": training["usd_per_mtok"],
                        "tokens_per_s_per_musd": round(training["tokens_per_s"] / (cluster_usd / 1e6), 6)})
    return Outcome(name, spec, figures)


def goodput_figures(topology, report: dict, weighted_time_s: float, resilience: dict) -> dict:
    """Interruptions a day (NIC-link and ToR failures counted where they stop the job), goodput at Daly's
    interval, the cluster's price with its servers, and goodput-adjusted workload runs per second per
    million USD: ``goodput / weighted time / (cluster USD / 1e6)``."""
    from .. import reliability
    from ..failures import component_counts, single_failure_stop_fractions
    from ..resilience import goodput_of
    from ..spec import FailurePolicy

    rates = tuple(rate for name in resilience["rates"] for rate in reliability.RATE_SETS[name]())
    interruptions = reliability.interruptions(rates, component_counts(topology), single_failure_stop_fractions(topology))
    policy = FailurePolicy(rates=resilience["rates"], checkpoint_s=resilience["checkpoint_s"],
                           restart_s=resilience["restart_s"])
    goodput = goodput_of(interruptions, int(topology.gpus.size), policy)
    fraction = 1.0 if goodput is None else goodput.goodput
    cluster_usd = report["cost"]["total_usd"] + report["cost"]["servers_usd"]
    per_s = fraction / weighted_time_s if weighted_time_s > 0 else 0.0
    return {"interruptions_per_day": round(interruptions.per_day, 6), "goodput": round(fraction, 6),
            "cluster_usd": cluster_usd, "goodput_per_s_per_musd": round(per_s / (cluster_usd / 1e6), 6)
            if cluster_usd > 0 else None}


def switch_label(fabric: dict) -> str:
    """The switch models of a candidate in one string: one id, ``leaf / spine [/ core]``, or the OCS."""
    if fabric["topology"] == "railx":
        return fabric["railx"]["ocs"]
    switch = fabric["switch"]
    if isinstance(switch, dict):
        return " / ".join(switch[t] for t in ("leaf", "spine", "core") if t in switch)
    return switch


def _structure(design, topology, bom) -> dict:
    """What the constraints look at, from the topology and its bill of materials (as the report rounds)."""
    layout = topology.layout
    used = [tier for tier in topology.links_by_tier() if tier in design.fabric.cabling]
    return {"gpus": design.gpus, "cost_per_gpu_usd": round(bom.total_usd / design.gpus, 2),
            "power_w": round(bom.power_w, 1), "tiers": layout.tiers,
            "diameter_hops": layout.diameter_hops,
            "reach": {tier: design.fabric.cabling[tier] for tier in used}}


def _violations(f: dict, constraints: dict) -> list[str]:
    out = []
    if "max_cable_reach" in constraints:
        limit = REACH_CLASSES.index(constraints["max_cable_reach"])
        beyond = [f"{tier} links need {reach}" for tier, reach in f["reach"].items()
                  if REACH_CLASSES.index(reach) > limit]
        if beyond:
            out.append(f"cabling beyond {constraints['max_cable_reach']}: " + ", ".join(beyond))
    if "max_cost_per_gpu_usd" in constraints and f["cost_per_gpu_usd"] > constraints["max_cost_per_gpu_usd"]:
        out.append(f"cost per GPU above {constraints['max_cost_per_gpu_usd']:,.0f} USD")
    if "max_power_per_gpu_w" in constraints and f["power_w"] / f["gpus"] > constraints["max_power_per_gpu_w"]:
        out.append(f"network power per GPU above {constraints['max_power_per_gpu_w']:,.0f} W")
    if "max_tiers" in constraints and f["tiers"] > constraints["max_tiers"]:
        out.append(f"more than {constraints['max_tiers']} switch tiers")
    if "max_diameter_hops" in constraints and f["diameter_hops"] > constraints["max_diameter_hops"]:
        out.append(f"diameter above {constraints['max_diameter_hops']} hops")
    return out


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats in both coordinates (lower is better in both); of
    identical points, the first."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1], i))
    front, best_second = [], float("inf")
    for i in order:
        if points[i][1] < best_second:
            front.append(i)
            best_second = points[i][1]
    return sorted(front)


@dataclass
class SearchResult:
    space: Space
    outcomes: list = field(default_factory=list)   # feasible ones (and infeasible ones when kept), in order
    reasons: dict = field(default_factory=dict)    # infeasibility reason -> count
    failures: list = field(default_factory=list)   # (candidate name, TaskError): tasks that raised
    stats: object = None                            # executors.RunStats: tasks, evaluated, cached, failed

    @property
    def feasible(self) -> list:
        return [o for o in self.outcomes if o.figures is not None]

    def pareto(self) -> list[str]:
        """Pareto-optimal candidate names, per GPU count, on the two objectives (``metrics.objectives``: cost
        per GPU against the weighted completion time)."""
        names = []
        axes = (DESIGN_OBJECTIVE, COLLECTIVE_OBJECTIVE)
        for gpus in sorted({o.figures["gpus"] for o in self.feasible}):
            group = [o for o in self.feasible if o.figures["gpus"] == gpus]
            front = pareto_front([tuple(m.ranked(o.figures[m.key]) for m in axes) for o in group])
            names += [group[i].name for i in front]
        return names

    def infeasible(self) -> dict:
        reasons = self.reasons
        return {"count": sum(reasons.values()), "reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))}

    def ranking(self) -> list[str]:
        """With the space's ``training`` block: feasible candidate names, per GPU count, best by its
        ``rank_by`` first; with a ``resilience`` block, best goodput-adjusted throughput per dollar first
        (ties in candidate order); else empty."""
        if self.space.training is not None:
            key = self.space.training["rank_by"]
            sign = 1 if RANK_BY[key] == "lower" else -1
            return [o.name for o in sorted(self.feasible, key=lambda o: (o.figures["gpus"], sign * o.figures[key]))]
        if self.space.resilience is None:
            return []
        ranked = [o for o in self.feasible if o.figures.get("goodput_per_s_per_musd") is not None]
        return [o.name for o in sorted(ranked, key=lambda o: (o.figures["gpus"], -o.figures["goodput_per_s_per_musd"]))]

    def best_layouts(self) -> dict:
        """With layouts to search: per fabric (the candidate name without its layout), the best layout's
        candidate by ``rank_by``."""
        if self.space.training is None or self.space.training["layouts"] == [None]:
            return {}
        best = {}
        for name in self.ranking():
            fabric = name.rsplit("-", 1)[0]
            best.setdefault(fabric, name)
        return best

    def to_json(self) -> dict:
        out = {"space": self.space.name, "candidates": [{"name": o.name, **o.figures} for o in self.feasible],
               "pareto": self.pareto(), "ranking": self.ranking(), "infeasible": self.infeasible()}
        if self.space.training is not None:
            out["rank_by"] = self.space.training["rank_by"]
            out["best_layouts"] = self.best_layouts()
        if self.failures:   # tasks that raised (bugs), so that a partial result never passes for a whole one
            out["failed"] = [{"name": name, "error": str(err)} for name, err in self.failures]
        return out


def candidate_tasks(space: Space, catalog: Catalog):
    """The space's candidates, lazily, as ``executors.Task``s keyed by content."""
    digests = EntryDigests(catalog)
    for index, (name, spec, sizing) in enumerate(candidate_specs(space)):
        item = (name, spec, sizing, space.weights, space.constraints, space.resilience)
        data = {"spec": spec, "sizing": sizing, "weights": space.weights, "constraints": space.constraints,
                "resilience": space.resilience}
        key = content_key("optimize-candidate", data, digests(entries_used(spec, sizing, catalog)))
        yield Task(index, key, name, item)


def _encode(outcome: Outcome) -> dict:
    return {"name": outcome.name, "spec": outcome.spec, "figures": outcome.figures, "reason": outcome.reason}


def _decode(data: dict) -> Outcome:
    return Outcome(data["name"], data["spec"], data["figures"], data["reason"])


def search(space: Space, catalog_files=(), workers: int = 1, progress=None, executor=None, cache=None,
           keep_infeasible: bool = True, catalog: Catalog | None = None) -> SearchResult:
    """Evaluate every candidate; ``progress(done, total)`` is called as results arrive (for the CLI; total
    is None when the space was not counted). ``executor`` (``executors.make_executor``) defaults to the
    process executor with ``workers``; ``cache`` is a ``cache.Cache`` or None. With ``keep_infeasible``
    False, infeasible candidates are only counted by reason (bounded memory for large spaces)."""
    catalog = catalog if catalog is not None else load_catalog(tuple(catalog_files))
    executor = executor if executor is not None else ProcessExecutor(workers)
    result = SearchResult(space, stats=RunStats())
    kept: dict = {}
    done = [0]

    def step(_task, _ok):
        done[0] += 1
        if progress:
            progress(done[0], None)

    with executor:
        for task, ok, value in run_tasks(executor, evaluate_candidate, catalog, candidate_tasks(space, catalog),
                                         cache, _encode, _decode, step, result.stats):
            if not ok:
                result.failures.append((task.index, task.label, value))
                continue
            if value.figures is None:
                result.reasons[value.reason] = result.reasons.get(value.reason, 0) + 1
                if not keep_infeasible:
                    continue
            kept[task.index] = value
    result.outcomes = [kept[i] for i in sorted(kept)]
    result.failures = [(label, err) for _, label, err in sorted(result.failures, key=lambda f: f[0])]
    return result
