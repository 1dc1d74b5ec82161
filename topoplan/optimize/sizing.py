"""CP-SAT sizing of fat-tree candidates: the switch model of each tier and the uplinks per leaf.

Given a GPU count, a server, the planes and a limit on the leaf's oversubscription, choose the leaf,
spine (and core) models among a list of switches, and the leaf's uplinks ``u1``, so that the network
costs least as the bill of materials prices it (switches, NICs, transceivers per cage, fibres), under the
sizing rules of the fat-tree generator (``generators/clos.py``), per plane of ``E`` NIC ports at link speed:

* leaf: ``d1`` ports down and ``u1`` up, ``d1 + u1`` = its radix, ``d1 <= ratio * u1``;
  leaves ``L = ceil(E / d1)``;
* two tiers: spines ``S = ceil(u1 / floor(radix_spine / L))`` (``clos.upper_tier``: every spine takes
  the same number of links from every leaf);
* three tiers: spines split half down, half up (``d2``, ``u2``); leaves per pod ``min(L, d2)``, pods
  ``ceil(L / per pod)``, spines ``pods * u1``; cores ``ceil(u1 * u2 / floor(radix_core / pods))`` (the
  same rule over the pods).

The products of counts make this a small integer program, which OR-Tools CP-SAT solves exactly (one
worker, so the answer is deterministic). ``plan_cost`` prices any plan the same way without a solver:
tests hold the solver's optimum to a brute force over every model choice and uplink count, and the
priced plan to the bill of materials of the generated design.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ..catalog import Catalog
from ..errors import Refused
from ..cost import REACH_REQUIRED_M, cage_of, choose_optics, connector_ports, copper_assembly
from ..generators.clos import TIER_NAMES, plan_clos, split_ports
from ..generators.hosts import link_speed
from ..spec import DEFAULT_CABLING
from ..topology import KIND

CENTS = 100
_TIME_LIMIT_S = 60.0


@dataclass(frozen=True)
class Sizing:
    tiers: int
    models: dict        # tier name -> switch id
    leaf_uplinks: int
    leaf_downlinks: int
    leaves: int         # per plane
    spines: int
    cores: int
    cost_usd: float     # network cost, all planes, as the bill of materials counts it


@dataclass(frozen=True)
class _Choice:
    """Everything that depends on the choice of models: radices at the link speed and optics prices."""

    models: tuple           # (leaf, spine, core) ids
    link_gbps: float
    radix: tuple
    prices_cents: tuple     # per switch, by tier
    tier_optics: tuple      # per link tier: (cable cents, [(part cents, cage ports num, den, ends per link)])


@dataclass(frozen=True)
class _TierOptics:
    """What one link tier's cabling costs per choice of models, in the bill of materials' terms: a fibre
    per link and per-cage modules ``(part cents, cage ports numerator, denominator, ends per link)``, or
    (copper) one assembly per connector at the end whose connectors are fewer, ``copper_sides`` holding
    each end's (numerator, denominator) of links per connector."""

    per_link_cents: int
    modules: tuple = ()
    copper_cents: int = 0
    copper_sides: tuple = ()


def _optics(catalog: Catalog, reach: str, ends: list, speed: float):
    """The cabling of one link tier of ``reach`` whose two ends are ``ends`` ((kind, model id) each, lower
    end first), priced as the bill of materials prices it; None when the catalog has no parts for it."""
    need_m = REACH_REQUIRED_M[reach]
    if reach == "in-rack":
        sides = tuple(connector_ports(KIND[kind], model, speed, catalog, "copper") for kind, model in ends)
        cable, _tails = copper_assembly(catalog, need_m, speed, list(sides))
        return None if cable is None else _TierOptics(0, (), round(cable.price_usd * CENTS), sides)
    distinct = list(dict.fromkeys(ends))
    cages = [cage_of(KIND[kind], model, speed, catalog) for kind, model in distinct]
    chosen = choose_optics(catalog, need_m, cages)
    if chosen is None:
        return None
    fibre, parts = chosen
    out = []
    for (kind, model), part in zip(distinct, parts):
        if kind == "switch":
            switch = catalog.switches[model]
            numerator, denominator = switch.radix_at(speed)[0], switch.cages
        else:
            nic = catalog.nics[model]
            numerator, denominator = nic.ports, nic.cages
        share = ends.count((kind, model))  # ends per link at this model: 1, or 2 when both ends are it
        out.append((round(part.price_usd * CENTS), numerator, denominator, share))
    return _TierOptics(round(fibre.price_usd * CENTS), tuple(out))


def _choices(catalog: Catalog, server_id: str, switches: list, tiers: int, cabling: dict) -> list[_Choice]:
    server = catalog.servers[server_id]
    nic = catalog.nics[server.nic]
    out = []
    for models in itertools.product(switches, repeat=tiers):
        models = tuple(models) + (models[-1],) * (3 - tiers)  # unused tiers take the top model (not built)
        speed, _port_speed = link_speed(nic, catalog.switches[models[0]])
        radix = tuple(catalog.switches[m].radix_at(speed)[0] for m in models)
        ends = [[("nic", nic.id), ("switch", models[0])], [("switch", models[0]), ("switch", models[1])],
                [("switch", models[1]), ("switch", models[2])]]
        optics = [_optics(catalog, cabling[tier], tier_ends, speed)
                  for tier, tier_ends in zip(TIER_NAMES[:tiers], ends)]
        if any(o is None for o in optics):
            continue
        prices = tuple(round(catalog.switches[m].price_usd * CENTS) for m in models)
        out.append(_Choice(models, speed, radix, prices, tuple(optics)))
    return out


def _endpoints(catalog: Catalog, server_id: str, gpus: int, planes: int) -> tuple[int, int, float]:
    """(NIC ports per plane, NICs, NIC cost in cents) of ``gpus`` GPUs on ``server_id`` servers."""
    server = catalog.servers[server_id]
    nic = catalog.nics[server.nic]
    if gpus % server.gpus:
        raise Refused(f"{gpus:,} GPUs is not a whole number of {server_id} servers")
    nics = gpus // server.gpus * server.nics
    if (nics * nic.ports) % planes:
        raise Refused(f"{nic.id} ports do not split evenly over {planes} planes")
    return nics * nic.ports // planes, nics, nics * round(nic.price_usd * CENTS)


def _modules_cents(links: int, optics: _TierOptics) -> int:
    copper = min((-(-links * den // num) for num, den in optics.copper_sides), default=0)
    return (links * optics.per_link_cents + optics.copper_cents * copper
            + sum(-(-share * links * den // num) * part for part, num, den, share in optics.modules))


def _cabling(cabling: dict | None) -> dict:
    return {**DEFAULT_CABLING, **(cabling or {})}


def plan_cost(catalog: Catalog, server_id: str, gpus: int, planes: int, models: dict, tiers: int,
              leaf_uplinks: int, cabling: dict | None = None) -> tuple[float, object]:
    """(network cost in USD, the generator's plan) of one explicit choice, priced as the bill of
    materials prices it. Raises ``ValueError`` when the generator cannot build it."""
    endpoints, _nics, nic_cents = _endpoints(catalog, server_id, gpus, planes)
    wanted = tuple(models[t] for t in TIER_NAMES[:tiers])
    matching = [c for c in _choices(catalog, server_id, list(dict.fromkeys(wanted)), tiers, _cabling(cabling))
                if c.models[:tiers] == wanted]
    if not matching:
        raise ValueError("the catalog has no optics for these models")
    choice = matching[0]
    plan = plan_clos(endpoints, choice.radix, (1.0, 1.0), tiers, leaf_uplinks)
    cents = nic_cents + planes * (plan.leaves * choice.prices_cents[0] + plan.spines * choice.prices_cents[1]
                                  + plan.cores * choice.prices_cents[2])
    links = [endpoints, plan.leaves * plan.up[0], plan.spines * plan.up[1]]
    for tier in range(tiers):
        cents += _modules_cents(planes * links[tier], choice.tier_optics[tier])
    return cents / CENTS, plan


def size_fat_tree(catalog: Catalog, server_id: str, gpus: int, planes: int, switches: list, max_ratio: float,
                  tiers: int, cabling: dict | None = None) -> Sizing:
    """The cheapest fat-tree of ``tiers`` tiers (2 or 3) for these GPUs, by CP-SAT. Raises ``Refused``."""
    endpoints, _nics, nic_cents = _endpoints(catalog, server_id, gpus, planes)
    choices = _choices(catalog, server_id, list(dict.fromkeys(switches)), tiers, _cabling(cabling))
    if not choices:
        raise Refused("the catalog has no optics for any choice of these switches")
    model = cp_model.CpModel()
    top = max(max(c.radix) for c in choices)
    E = endpoints

    def var(low, high, name):
        return model.new_int_var(low, high, name)

    pick = [model.new_bool_var(f"choice{i}") for i in range(len(choices))]
    model.add_exactly_one(pick)
    up1, down1 = var(1, top, "leaf_up"), var(1, top, "leaf_down")
    leaves = var(1, E, "leaves")
    leaf_ports = var(0, E * top, "leaves_x_down")
    model.add_multiplication_equality(leaf_ports, [leaves, down1])
    model.add(leaf_ports >= E)
    model.add(leaf_ports - down1 <= E - 1)   # leaves = ceil(E / down1)
    ratio_milli = round(max_ratio * 1000)
    model.add(1000 * down1 <= ratio_milli * up1)
    leaf_links = var(0, E * top, "leaf_links")
    model.add_multiplication_equality(leaf_links, [leaves, up1])
    spines, cores = var(1, E * top, "spines"), var(0, E * top, "cores")
    spine_links = var(0, E * top * top, "core_links")
    def fewest_above(switches, units, uplinks, name):
        """The generator's ``upper_tier`` count: switches = ceil(uplinks / cap), where cap = floor(R / units)
        is the most links one switch of the tier above can take from each unit (R fixed per choice below)."""
        cap, cap_units = var(1, top, f"{name}_cap"), var(1, top * E, f"{name}_cap_x_units")
        model.add_multiplication_equality(cap_units, [cap, units])
        switches_cap = var(0, E * top * top, f"{name}_x_cap")
        model.add_multiplication_equality(switches_cap, [switches, cap])
        model.add(switches_cap >= uplinks)
        model.add(switches_cap - cap <= uplinks - 1)
        return cap_units, units

    if tiers == 2:
        per_leaf = fewest_above(spines, leaves, up1, "spines")
        model.add(cores == 0)
        model.add(spine_links == 0)
    else:
        down2, up2 = var(1, top, "spine_down"), var(1, top, "spine_up")
        per_pod = var(1, E, "leaves_per_pod")
        model.add_min_equality(per_pod, [leaves, down2])
        pods = var(1, E, "pods")
        pod_ports = var(0, E * top, "pods_x_per_pod")
        model.add_multiplication_equality(pod_ports, [pods, per_pod])
        model.add(pod_ports >= leaves)
        model.add(pod_ports - per_pod <= leaves - 1)     # pods = ceil(leaves / per_pod)
        model.add_multiplication_equality(spines, [pods, up1])
        pod_up = var(0, E * top, "pod_uplinks")            # every pod has up1 spines of up2 uplinks
        model.add_multiplication_equality(pod_up, [up1, up2])
        per_pod = fewest_above(cores, pods, pod_up, "cores")
        model.add_multiplication_equality(spine_links, [spines, up2])
    cost = var(0, 10**15, "cost_cents")
    for choice, chosen in zip(choices, pick):
        radix = choice.radix
        model.add(down1 + up1 == radix[0]).only_enforce_if(chosen)
        above = radix[1] if tiers == 2 else radix[2]
        cap_units, units = per_leaf if tiers == 2 else per_pod
        model.add(cap_units <= above).only_enforce_if(chosen)           # cap = floor(R / units)
        model.add(cap_units + units >= above + 1).only_enforce_if(chosen)
        if tiers == 3:
            d2, u2 = split_ports(radix[1], 1.0)
            model.add(down2 == d2).only_enforce_if(chosen)
            model.add(up2 == u2).only_enforce_if(chosen)
        terms = [planes * (choice.prices_cents[0] * leaves + choice.prices_cents[1] * spines
                           + choice.prices_cents[2] * cores)]
        for links, optics in zip([E, leaf_links, spine_links][:tiers], choice.tier_optics):
            terms.append(planes * optics.per_link_cents * links)
            for part, num, den, share in optics.modules:   # modules = ceil(share * planes * links * den / num)
                modules = var(0, 2**40, "modules")
                model.add(modules * num >= share * planes * den * links)
                terms.append(part * modules)
            if optics.copper_sides:   # assemblies = the fewer of the two ends' connectors (each a ceiling)
                ends = [var(0, 2**40, "connectors") for _ in optics.copper_sides]
                for connectors, (num, den) in zip(ends, optics.copper_sides):
                    model.add(connectors * num >= planes * den * links)
                assemblies = var(0, 2**40, "assemblies")
                model.add_min_equality(assemblies, ends)
                terms.append(optics.copper_cents * assemblies)
        model.add(cost == nic_cents + sum(terms)).only_enforce_if(chosen)
    model.minimize(cost)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = _TIME_LIMIT_S
    status = solver.solve(model)
    if status == cp_model.INFEASIBLE:
        raise Refused(f"no {tiers}-tier fat-tree of these switches fits {gpus:,} GPUs at "
                          f"{max_ratio:g}:1 or less")
    if status != cp_model.OPTIMAL:
        raise Refused(f"CP-SAT found no proven optimum in {_TIME_LIMIT_S:g} s")
    choice = choices[[solver.value(p) for p in pick].index(1)]
    return Sizing(tiers, dict(zip(TIER_NAMES[:tiers], choice.models)), solver.value(up1), solver.value(down1),
                  solver.value(leaves), solver.value(spines), solver.value(cores), solver.value(cost) / CENTS)


def size_cheapest(catalog: Catalog, server_id: str, gpus: int, planes: int, switches: list, max_ratio: float,
                  max_tiers: int = 3, cabling: dict | None = None) -> Sizing:
    """The cheapest of the two- and three-tier sizings that exist (up to ``max_tiers``)."""
    found, reasons = [], []
    for tiers in range(2, max_tiers + 1):
        try:
            found.append(size_fat_tree(catalog, server_id, gpus, planes, switches, max_ratio, tiers, cabling))
        except Refused as err:
            reasons.append(str(err))
    if not found:
        raise Refused(reasons[-1] if reasons else f"sizing needs at least 2 tiers, not {max_tiers}")
    return min(found, key=lambda s: (s.cost_usd, s.tiers))
