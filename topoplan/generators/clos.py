"""Folded Clos / fat-tree generator (``fabric.topology: fat-tree``).

Contract
--------
Each plane is a folded Clos of 1 to 3 switch tiers built from logical ports of ``R`` (the switch's port
count at the link speed, after breakout). A non-top switch with oversubscription ``o`` has
``d = floor(R*o/(1+o))`` ports down and ``u = R - d`` up; the top tier points all ``R`` ports down.
Endpoints (NIC ports of the plane, ordered server, NIC, port) fill leaves in order: endpoint ``e`` is on
leaf ``e // d1``.

* 1 tier: one switch per plane, ``E <= R``.
* 2 tiers: ``L = ceil(E/d1)`` leaves and ``S = ceil(u1 / floor(R/L))`` spines (``upper_tier``: the fewest
  with the same number of links from every leaf on every spine). Vendor wiring, ``u1/S`` parallel links
  from every leaf to every spine, whenever a divisor of ``u1`` gives that S (it reproduces NVIDIA's SuperPOD
  spine counts); otherwise leaf link ``i`` goes to spine ``i mod S``. At most ``R*d1`` endpoints.
* 3 tiers: pods of up to ``d2`` leaves; every pod has ``u1`` spines, each leaf one link to each spine of
  its pod. Cores ``C = ceil(u1*u2 / floor(R/pods))``, the same rule over the pods: spine ``j`` of every pod
  to core group ``j`` (``u2/g`` links to each of its ``g`` cores) when that gives C, else link ``j*u2 + i``
  of every pod to core ``(j*u2 + i) mod C``. At most ``R*d2*d1`` endpoints. (An uplink count with no
  useful divisor, 13 say, no longer multiplies the cores: 8,192 GPUs at 4:1 on 64-port spines take 42 cores,
  not 416.)

Closed forms at full non-blocking build with one switch model of radix ``R`` (``o = 1``):
hosts ``2*(R/2)**t``; switches ``(2t-1)*(R/2)**(t-1)`` (k-ary fat-tree, t = 3: ``k**3/4`` hosts and
``5*k**2/4`` switches). A partial build of ``N`` endpoints has ``N/(R/2)`` leaves, ``N/(R/2)`` spines
(3 tiers) and ``N/R`` top switches (when ``R/pods`` is whole), and ``t*N`` network links.

Node naming: ``gpu{i}``, ``nic{i}``, ``nvlink{s}`` (per server), ``p{plane}.leaf{i}``, ``p{plane}.spine{i}``,
``p{plane}.core{i}``. Groups: ``server`` and ``rail`` on hosts, ``plane`` and ``pod`` on switches.
The ``Layout`` records the plan of a plane (``tree``), the analytic bisection and the diameter in network hops.
"""

from __future__ import annotations

import math

import numpy as np

from ..catalog import Catalog
from ..errors import Refused
from ..layout import ClosPlan, Layout, TreeLayout
from ..spec import Design
from ..topology import SWITCH_TIERS, Topology, TopologyBuilder
from .hosts import (add_hosts, check_fits_in_memory, cable_latency_ns, check_nic_planes, medium_for, resolve_link_speed,
                    tier_speeds)

TIER_NAMES = SWITCH_TIERS


def split_ports(radix: int, ratio: float, lanes: int = 1) -> tuple[int, int]:
    """(down, up) ports of a non-top switch with oversubscription ``ratio`` = down:up bandwidth, ``radix``
    ports at the down links' speed, each up link ``lanes`` times as fast (taking that many ports)."""
    down = int(math.floor(radix * ratio / (1.0 + ratio) + 1e-9))
    return down, (radix - down) // lanes


def leaf_split(radix: int, ratio: float, uplinks: int | None, lanes: int = 1) -> tuple[int, int]:
    """(down, up) ports of a leaf: ``uplinks`` when given, else from the oversubscription ratio."""
    if uplinks is None:
        return split_ports(radix, ratio, lanes)
    if uplinks * lanes >= radix:
        raise ValueError(f"{uplinks} uplinks leave no down ports on a {radix}-port leaf")
    return radix - uplinks * lanes, uplinks


def smallest_divisor_at_least(n: int, low: float) -> int:
    """Smallest divisor of ``n`` that is >= ``low`` (``n`` itself at worst)."""
    for d in range(max(1, math.ceil(low - 1e-9)), n + 1):
        if n % d == 0:
            return d
    return n


def upper_tier(units: int, uplinks: int, radix: int) -> tuple[int, int]:
    """Size the tier above ``units`` lower units (leaves, or pods) of ``uplinks`` uplinks each, on switches of
    ``radix`` ports: ``(switches, parallel links from each unit to each switch)``, 0 for "spread".

    Every switch gets the same number of links from every unit, so ECMP balances over the tier and the
    closed-form engine stays exact: at most ``f = radix // units`` links per unit, hence the fewest is
    ``ceil(uplinks / f)``. Vendor practice (equal whole parallel links per pair, ``uplinks / S`` each, S
    dividing ``uplinks``; it reproduces NVIDIA's SuperPOD counts) is kept when it needs no more switches
    than that; otherwise (a prime uplink count, say) unit ``u``'s link ``i`` goes to switch ``i mod S``,
    every switch taking ``floor`` or ``ceil`` of ``uplinks / S`` from each unit. Removing any switch leaves
    some unit more than ``f`` links on one switch: over its ports."""
    per_unit = radix // units
    if per_unit < 1:
        raise ValueError(f"a {radix}-port switch cannot reach all {units:,} units below it")
    fewest = math.ceil(uplinks / per_unit)
    grouped = smallest_divisor_at_least(uplinks, units * uplinks / radix)
    return (grouped, uplinks // grouped) if grouped == fewest else (fewest, 0)


def max_endpoints(tiers: int, radix: tuple, down: tuple) -> int:
    if tiers == 1:
        return radix[0]
    if tiers == 2:
        return radix[1] * down[0]
    return radix[2] * down[1] * down[0]


def plan_clos(endpoints: int, radix: tuple, ratios: tuple, tiers: int | None, leaf_uplinks: int | None = None,
              pod_endpoints: int | None = None, lanes: tuple = (1, 1)) -> ClosPlan:
    """Size one plane; ``tiers=None`` picks the fewest that fit; ``pod_endpoints`` (optional) sets the pods'
    size under the core; ``lanes``: ports of the switch below that one leaf (spine) uplink takes (a faster
    tier above, ``tier_speeds``). ``radix`` counts each tier's ports at its down links' speed. Raises
    ``ValueError`` or ``Refused`` with the reason."""
    d1, u1 = leaf_split(radix[0], ratios[0], leaf_uplinks, lanes[0])
    d2, u2 = split_ports(radix[1], ratios[1], lanes[1])
    if d1 < 1 or u1 < 1:
        raise ValueError(f"a {radix[0]}-port leaf cannot be split {ratios[0]:g}:1")
    if pod_endpoints is not None and pod_endpoints < endpoints:
        return _plan_pods(endpoints, radix, (d1, u1), (d2, u2), tiers, pod_endpoints)
    candidates = [tiers] if tiers else [1, 2, 3]
    if pod_endpoints is not None and tiers is None:   # one pod holds the cluster: no core above it
        candidates = [1, 2]
        if endpoints > max_endpoints(2, radix, (d1, d2)):
            raise Refused(f"one pod of all {endpoints:,} NIC ports per plane does not fit two tiers (at most "
                          f"{max_endpoints(2, radix, (d1, d2)):,})", path="fabric.pod.servers",
                          hint="use smaller pods under a core, or remove fabric.pod")
    for t in candidates:
        limit = max_endpoints(t, radix, (d1, d2))
        if endpoints <= limit:
            break
    else:
        t = candidates[-1]
        raise Refused(f"{t} tier(s) hold at most {limit:,} endpoints per plane", tiers=t, limit=limit)
    if t == 1:
        return ClosPlan(1, endpoints, radix, (radix[0],), (0,), 1, 1, 1, 0, 0, 0, 0, 0, 0, limit)
    leaves = math.ceil(endpoints / d1)
    if t == 2:
        spines, per_pair = upper_tier(leaves, u1, radix[1])
        return ClosPlan(2, endpoints, radix, (d1, radix[1]), (u1, 0), leaves, leaves, 1, spines, spines,
                        per_pair, 0, 0, 0, limit)
    if d2 < 1 or u2 < 1:
        raise ValueError(f"a {radix[1]}-port spine cannot be split {ratios[1]:g}:1")
    leaves_per_pod = min(leaves, d2)
    pods = math.ceil(leaves / leaves_per_pod)
    return three_tier_plan(endpoints, radix, (d1, d2, radix[2]), (u1, u2, 0), leaves, leaves_per_pod, pods, u1, 1,
                           limit)


def _plan_pods(endpoints: int, radix: tuple, leaf: tuple, spine: tuple, tiers: int | None,
               pod_endpoints: int) -> ClosPlan:
    """Three tiers with pods of ``pod_endpoints`` NIC ports: whole leaves per pod, and no more of them than
    a spine has ports down."""
    (d1, u1), (d2, u2) = leaf, spine
    if tiers is not None and tiers != 3:
        raise Refused(f"pods smaller than the cluster need a core tier above them, not {tiers} tier(s)",
                      path="fabric.tiers", hint="set tiers: 3, or remove fabric.pod")
    if pod_endpoints % d1:
        raise Refused(f"a pod of {pod_endpoints:,} NIC ports per plane does not fill whole leaves of {d1} ports",
                      path="fabric.pod.servers", hint=f"use a pod whose NIC ports per plane are a multiple of {d1}")
    leaves_per_pod = pod_endpoints // d1
    if leaves_per_pod > d2:
        raise Refused(f"a pod of {leaves_per_pod:,} leaves needs spines with {leaves_per_pod} ports down; they have "
                      f"{d2}", path="fabric.pod.servers", hint=f"use pods of at most {d2 * d1:,} NIC ports per plane")
    if d2 < 1 or u2 < 1:
        raise ValueError(f"a {radix[1]}-port spine cannot be split this way")
    leaves = math.ceil(endpoints / d1)
    pods = math.ceil(leaves / leaves_per_pod)
    if pods > radix[2]:
        raise Refused(f"{pods:,} pods are more than a {radix[2]}-port core can reach", path="fabric.pod.servers",
                      hint="use larger pods, or switches with more ports")
    return three_tier_plan(endpoints, radix, (d1, d2, radix[2]), (u1, u2, 0), leaves, leaves_per_pod, pods, u1, 1,
                           radix[2] * leaves_per_pod * d1)


def three_tier_plan(endpoints: int, radix: tuple, down: tuple, up: tuple, leaves: int, leaves_per_pod: int,
                    pods: int, spines_per_pod: int, leaf_spine_links: int, limit: int, islands: int = 1) -> ClosPlan:
    """A three-tier plan with its core sized by ``upper_tier`` over the pods: grouped (spine ``j`` of every
    pod to core group ``j``, ``cores_per_group`` cores with ``spine_core_links`` links each) when that is
    the fewest, else spread (link ``j * u2 + i`` of spine ``j`` to core ``(j * u2 + i) mod cores``).
    ``islands`` splits the pods into that many consecutive runs, each with cores of its own (rail-only)."""
    # a pod with fewer leaves than a spine's down ports: the spines' uplinks follow the ports in use at the
    # same ratio, so that no core port serves an empty one (user pod sizes, rail groups, small rails)
    used = math.ceil(leaves_per_pod * up[0] / spines_per_pod)
    if used < down[1]:
        up = (up[0], math.ceil(up[1] * used / down[1] - 1e-9), 0)
    u2 = up[1]
    pods_per_island = pods // islands
    cores, _ = upper_tier(pods_per_island, spines_per_pod * u2, radix[2])
    cores_per_group = smallest_divisor_at_least(u2, pods_per_island * u2 / radix[2])
    grouped = spines_per_pod * cores_per_group == cores   # the fewest is the vendor form: a group per spine index
    return ClosPlan(3, endpoints, radix, down, up, leaves, leaves_per_pod, pods, pods * spines_per_pod,
                    spines_per_pod, leaf_spine_links, islands * cores, cores_per_group if grouped else cores,
                    u2 // cores_per_group if grouped else 0, limit, islands)


def _plan_for(design: Design, catalog: Catalog, speeds: tuple, lanes: tuple, endpoints: int) -> ClosPlan:
    fabric = design.fabric
    link_gbps = speeds[0]
    models = [catalog.switches[fabric.switch[t]] for t in TIER_NAMES]
    radix = tuple(m.radix_at(speed)[0] for m, speed in zip(models, speeds))
    ratios = (fabric.oversubscription["leaf"], fabric.oversubscription["spine"])
    try:
        pod_endpoints = None if fabric.pod_servers is None else endpoints // design.cluster.servers * fabric.pod_servers
        plan = plan_clos(endpoints, radix, ratios, fabric.tiers, fabric.leaf_uplinks, pod_endpoints, lanes)
    except Refused as err:
        if err.path:
            raise design.infeasible(err.path, err.message, err.hint) from None
        tiers, limit = err.facts["tiers"], err.facts["limit"]
        words = {1: "a single-switch", 2: "a two-tier", 3: "a three-tier"}[tiers]
        per_plane = f" per plane ({fabric.planes} planes)" if fabric.planes > 1 else ""
        leaf = models[0]
        hint = ("set tiers: 3, add planes, raise oversubscription, or use a switch with more ports"
                if tiers < 3 else "add planes, raise oversubscription, or use a switch with more ports")
        raise design.infeasible("fabric.tiers" if fabric.tiers else "cluster",
                                f"{words} fabric of {leaf.id} ({radix[0]} ports at {link_gbps:g} Gb/s) tops out "
                                f"at {limit:,} NIC ports{per_plane}; this design needs {endpoints:,}",
                                hint) from None
    except ValueError as err:
        where = "fabric.leaf_uplinks" if fabric.leaf_uplinks else "fabric.oversubscription"
        raise design.infeasible(where, str(err), "use a split the port count allows") from None
    check_ratios_apply(design, plan)
    check_core_carries_traffic(design, plan)
    return plan


def check_core_carries_traffic(design: Design, plan: ClosPlan) -> None:
    """Three tiers on one pod: no path crosses the core, so it would be priced for nothing."""
    if plan.tiers == 3 and plan.pods == plan.core_islands:
        where = "make one pod" if plan.pods == 1 else f"make one pod per rail ({plan.pods} rails)"
        raise design.infeasible("fabric.tiers", f"the {plan.leaves:,} leaves per plane {where}, so the "
                                f"{plan.cores:,} core switches of a third tier would carry no traffic",
                                "remove tiers (two fit), or set tiers: 2")


def check_ratios_apply(design: Design, plan: ClosPlan) -> None:
    """An oversubscription ratio on a tier without uplinks is a mistake worth saying."""
    over = design.fabric.oversubscription
    if plan.tiers < 3 and over["spine"] != 1:
        raise design.infeasible("fabric.oversubscription.spine",
                                f"the spine is the top tier of this {plan.tiers}-tier fabric and has no uplinks",
                                "remove the spine ratio or set tiers: 3")
    if plan.tiers == 1 and over["leaf"] != 1:
        raise design.infeasible("fabric.oversubscription.leaf", "a single-tier fabric has no uplinks to oversubscribe",
                                "remove the ratio or set tiers: 2")


def generate(design: Design, catalog: Catalog) -> Topology:
    """Build the fat-tree of ``design``; raises ``InfeasibleDesign`` when it cannot be built."""
    warnings: list[str] = []
    check_nic_planes(design, catalog)
    link_gbps = resolve_link_speed(design, catalog, warnings)
    speeds, lanes = tier_speeds(design, catalog, link_gbps)
    server = catalog.servers[design.cluster.server]
    nic = catalog.nics[server.nic]
    planes = design.fabric.planes
    endpoints = design.cluster.servers * server.nics * nic.ports // planes
    plan = _plan_for(design, catalog, speeds, lanes, endpoints)
    _check_size(design, plan, server, planes)

    builder = TopologyBuilder(design.name)
    hosts = add_hosts(builder, design, catalog, link_gbps)
    cabling = design.fabric.cabling
    models = {t: design.fabric.switch[t] for t in TIER_NAMES}
    endpoint_leaf = np.arange(plan.endpoints, dtype=np.int64) // plan.down[0]
    leaf_pod = np.arange(plan.leaves, dtype=np.int32) // plan.leaves_per_pod
    for plane in range(planes):
        add_tree(builder, plan, plane, hosts.endpoints, endpoint_leaf, leaf_pod, models, speeds, cabling)

    return builder.build(tree_layout(
        plan, planes, hosts, models, warnings, TreeLayout(plan, models_present(models, plan)),
        in_network_reduction=reduces_in_network(catalog, models, plan),
        bisection_gbps=planes * clos_bisection_gbps(plan, speeds),
        bisection_method="analytic: folded Clos, least of the host, leaf-uplink and spine-uplink halves",
        diameter_hops=clos_diameter_hops(plan, design.cluster.servers)))


def models_present(models: dict, plan: ClosPlan) -> tuple:
    return tuple(models[t] for t in TIER_NAMES[:plan.tiers])


def reduces_in_network(catalog: Catalog, models: dict, plan: ClosPlan) -> bool:
    """Every switch tier present can reduce in the switch (SHARP), so NCCL's CollNet can run."""
    return all(catalog.switches[m].in_network_reduction for m in models_present(models, plan))


def tree_layout(plan: ClosPlan, planes: int, hosts, models: dict, warnings: list, tree: TreeLayout,
                **figures) -> Layout:
    """The layout every tree-structured family attaches (family ``clos`` for the flow engine)."""
    return Layout(family="clos", tiers=plan.tiers, planes=planes, gpus_per_server=hosts.server.gpus,
                  link_gbps=hosts.link_gbps, injection_gbps_per_gpu=hosts.injection_gbps_per_gpu,
                  nvls=hosts.server.nvls, warnings=tuple(warnings), tree=tree, **figures)


def _check_size(design: Design, plan: ClosPlan, server, planes: int) -> None:
    host_links = design.gpus * (2 if server.nvlink_gbps > 0 else 1)
    arcs = 2 * (host_links + planes * plan.endpoints * plan.tiers)
    check_fits_in_memory(design, arcs)


def add_tree(builder: TopologyBuilder, plan: ClosPlan, plane: int, endpoints: np.ndarray, endpoint_leaf: np.ndarray,
             leaf_pod: np.ndarray, models: dict, speeds: tuple, cabling: dict, leaf_rail=-1) -> None:
    """Add one plane's switches and links: ``plan.leaves`` leaves (endpoint ``e`` on leaf
    ``endpoint_leaf[e]``, leaf ``l`` in pod ``leaf_pod[l]``); with 2 or more tiers, every pod has
    ``plan.spines_per_pod`` spines and each leaf ``plan.leaf_spine_links`` links to each spine of its pod;
    with 3 tiers, spine ``j`` of every pod links to core group ``j`` (``plan.cores_per_group`` cores,
    ``plan.spine_core_links`` links to each). A count of 0 parallel links means spread (``upper_tier``)."""
    prefix = f"p{plane}."
    leaves = builder.add_nodes("switch", plan.leaves, prefix + "leaf", tier=0, model=models["leaf"],
                               plane=plane, pod=leaf_pod, rail=leaf_rail)
    builder.add_links(endpoints, leaves[endpoint_leaf], speeds[0], cable_latency_ns(cabling["leaf"]),
                      medium_for(cabling["leaf"]), "leaf")
    if plan.tiers == 1:
        return
    per_pod = plan.spines_per_pod
    spine_pod = np.arange(plan.spines, dtype=np.int32) // per_pod
    spines = builder.add_nodes("switch", plan.spines, prefix + "spine", tier=1, model=models["spine"],
                               plane=plane, pod=spine_pod)
    per_leaf = plan.up[0]
    if plan.leaf_spine_links:   # every leaf the same parallel links to each spine of its pod
        slot = np.repeat(np.arange(per_pod), plan.leaf_spine_links)
    else:                       # spread: link i to spine i mod spines (upper_tier)
        slot = np.arange(per_leaf) % per_pod
    a = np.repeat(leaves, per_leaf)
    b = spines[np.repeat(leaf_pod.astype(np.int64), per_leaf) * per_pod + np.tile(slot, plan.leaves)]
    builder.add_links(a, b, speeds[1], cable_latency_ns(cabling["spine"]), medium_for(cabling["spine"]), "spine")
    if plan.tiers == 2:
        return
    island_cores = plan.cores // plan.core_islands
    island = spine_pod.astype(np.int64) // (plan.pods // plan.core_islands)
    cores = builder.add_nodes("switch", plan.cores, prefix + "core", tier=2, model=models["core"], plane=plane,
                              rail=np.repeat(np.arange(plan.core_islands, dtype=np.int32), island_cores)
                              if plan.core_islands > 1 else -1)
    index = np.arange(plan.spines, dtype=np.int64) % per_pod   # a spine's index in its pod
    per_spine = plan.up[1]
    if plan.spine_core_links:   # spine j of every pod to core group j
        core = (np.repeat(index, per_spine) * plan.cores_per_group
                + np.tile(np.repeat(np.arange(plan.cores_per_group), plan.spine_core_links), plan.spines))
    else:                       # spread: link j * u2 + i of every pod to core (j * u2 + i) mod cores
        core = (np.repeat(index, per_spine) * per_spine + np.tile(np.arange(per_spine), plan.spines)) % island_cores
    core += np.repeat(island, per_spine) * island_cores
    builder.add_links(np.repeat(spines, per_spine), cores[core], speeds[2], cable_latency_ns(cabling["core"]),
                      medium_for(cabling["core"]), "core")


def clos_bisection_gbps(plan: ClosPlan, speeds: tuple) -> float:
    """Bisection bandwidth of one plane, one direction: the least of half the endpoints' links, half the
    leaf uplinks (when there are several leaves) and half the spine uplinks (when there are several pods).
    Halves aligned with whole leaves and pods; exact for the balanced builds this generator makes."""
    cut = plan.endpoints * speeds[0] / 2
    if plan.tiers >= 2 and plan.leaves > 1:
        cut = min(cut, plan.leaves * plan.up[0] * speeds[1] / 2)
    if plan.tiers == 3 and plan.pods > 1:
        cut = min(cut, plan.spines * plan.up[1] * speeds[2] / 2)
    return cut


def clos_diameter_hops(plan: ClosPlan, servers: int) -> int:
    """Network links on the longest shortest GPU-to-GPU path (NIC-switch and switch-switch links)."""
    if servers <= 1:
        return 0
    if plan.leaves <= 1:
        return 2
    if plan.tiers == 2 or plan.pods <= 1:
        return 4
    return 6
