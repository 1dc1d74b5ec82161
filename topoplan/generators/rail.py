"""Rail-optimized and rail-only fabrics (``fabric.topology: rail-optimized | rail-only``).

Contract
--------
A rail is one NIC port position of every server (NIC ``r``, or port ``r`` of a multi-port NIC per plane):
GPU ``i`` reaches the fabric on the rail of the NIC that serves it. Servers are grouped into scalable
units (SU) of ``s`` servers (``fabric.scalable_unit``; default the most one leaf can serve, ``d1``): every
SU has one leaf per rail (and per plane), taking that rail's port of each of its servers. A partial last
SU gets the full SU's leaves and uplinks, its unused ports left empty (vendor practice). An SU smaller
than a leaf's down ports (8 NVL72 racks on a 288-port leaf) sizes the leaf's uplinks to the SU at the
ratio, so that no uplink serves an empty port.

Leaves ``L = SUs * rails`` per plane, each with ``d1`` ports down and ``u1`` up (oversubscription, or
``fabric.leaf_uplinks``), sized with the same rules as ``clos.py``:

* ``rail-optimized``, ``aggregation: any-to-any`` (NVIDIA SuperPOD, Alibaba HPN): all leaves share the
  spines; 2 tiers while ``L <= R``: ``S`` spines by ``clos.upper_tier`` (SuperPOD H100: 8/16/24/32 leaves
  -> 4/8/16/16 spines). Beyond, 3 tiers: pods of whole SUs (``d2 // rails`` SUs each), spines per pod by
  the same rule on the pod's leaves, cores as in ``clos.py``. With more rails than a spine has down ports
  (72-GPU NVLink domains), pods hold groups of ``g`` rails, the largest divisor of the rails ``<= d2``, for
  ``d2 // g`` SUs; the groups share the core.
* ``aggregation: same-rail`` (Tencent Astral): spines serve the leaves of one rail only; 2 tiers: one pod
  per rail; 3 tiers: pods of up to ``d2`` SUs of one rail, and the core joins every rail.
* ``rail-only`` (Wang et al.): no spine across rails; one leaf per rail when there is one SU, else each rail
  is a Clos of its own: two tiers while a rail's leaves fit one spine, else three, in pods of up to ``d2``
  SUs with cores of that rail only (``ClosPlan.core_islands`` = rails): N/(R/2) leaves and spines and N/R
  cores per plane at 1:1, as any partial three-tier Clos.
* ``fabric.pod: {servers: N}`` (rail-optimized): pods of N servers, whole SUs, instead of as many as a
  spine's down ports take.

Cross-rail traffic between servers follows NCCL's PXN: it first moves over NVLink to the GPU on the
destination's rail (``Layout.pxn``); GPUs do not otherwise relay. Node names and groups as in
``clos.py``, with ``rail`` and ``pod`` set on leaves (``pod`` = SU chunk, or the rail for per-rail pods).
"""

from __future__ import annotations

import math

import numpy as np

from ..catalog import Catalog
from ..errors import Refused
from ..spec import Design
from ..topology import Topology, TopologyBuilder
from ..layout import TreeLayout
from .clos import (TIER_NAMES, ClosPlan, add_tree, check_core_carries_traffic, check_ratios_apply, leaf_split,
                   models_present, reduces_in_network, three_tier_plan, tree_layout, upper_tier)
from .hosts import add_hosts, check_fits_in_memory, check_nic_planes, resolve_link_speed, tier_speeds


def plan_rail(servers: int, rails: int, radix: tuple, ratios: tuple, leaf_uplinks: int | None, tiers: int | None,
              topology: str, aggregation: str, scalable_unit: int | None, pod_servers: int | None = None,
              lanes: tuple = (1, 1)):
    """Size one plane. Returns (plan, SU size, SU count, leaf_pod); raises ``Refused`` with the reason.
    ``pod_servers`` (optional, rail-optimized): pods of that many servers, whole SUs, under the core;
    ``lanes``: ports an uplink takes on the switch below (a faster tier above, ``hosts.tier_speeds``)."""
    d1, u1 = leaf_split(radix[0], ratios[0], leaf_uplinks, lanes[0])
    R2, R3 = radix[1], radix[2]
    su = scalable_unit or d1
    if leaf_uplinks is None and su < d1:
        # a leaf serves one rail of an SU: size its uplinks to the SU's ports at the ratio, not to empty ports
        u1 = math.ceil(su / (ratios[0] * lanes[0]) - 1e-9)
        d1 = radix[0] - u1 * lanes[0]
    if su > d1:
        raise Refused(f"a scalable unit of {su} servers needs {su} down ports per rail leaf, but the leaf has {d1}",
                      path="fabric.scalable_unit", hint=f"use scalable_unit: {d1} or fewer")
    sus = math.ceil(servers / su)
    leaves = sus * rails
    endpoints = servers * rails
    rail_of_leaf = np.tile(np.arange(rails, dtype=np.int32), sus)
    su_of_leaf = np.repeat(np.arange(sus, dtype=np.int32), rails)
    per_rail = topology == "rail-only" or aggregation == "same-rail"
    d2, u2 = leaf_split(R2, ratios[1], None, lanes[1])

    if topology == "rail-only" and sus == 1 and tiers in (None, 1):
        plan = ClosPlan(1, endpoints, radix, (d1,), (u1,), leaves, leaves, leaves, 0, 0, 0, 0, 0, 0, R2 * su)
        return plan, su, sus, np.arange(leaves, dtype=np.int32)
    if tiers == 1:
        raise Refused("a rail fabric of more than one scalable unit needs a spine tier", path="fabric.tiers",
                      hint="remove tiers, or set tiers: 2")
    pods2 = rails if per_rail else 1
    leaves_per_pod2 = leaves // pods2
    fits_two = leaves_per_pod2 <= R2
    sus_per_pod = None
    if pod_servers is not None and pod_servers < servers:
        if pod_servers % su:
            raise Refused(f"a pod of {pod_servers:,} servers is not a whole number of scalable units of {su}",
                          path="fabric.pod.servers", hint=f"use a multiple of {su} servers, or set scalable_unit")
        if tiers is not None and tiers != 3:
            raise Refused(f"pods smaller than the cluster need a core tier above them, not {tiers} tier(s)",
                          path="fabric.tiers", hint="set tiers: 3, or remove fabric.pod")
        sus_per_pod, tiers = pod_servers // su, 3
    elif pod_servers is not None and not fits_two:
        raise Refused(f"one pod of all {servers:,} servers does not fit two tiers ({R2} leaves at most)",
                      path="fabric.pod.servers", hint="use smaller pods under a core, or remove fabric.pod")
    if tiers == 2 or (tiers is None and fits_two):
        if not fits_two:
            what = "each rail's two-tier Clos" if per_rail else "a two-tier rail-optimized fabric"
            raise Refused(f"{what} holds at most {R2} leaves ({R2 // (1 if per_rail else rails)} SUs of {su} "
                          f"servers); this design needs {leaves_per_pod2}", path="fabric.tiers" if tiers else "cluster",
                          hint="set tiers: 3, add planes, or use a switch with more ports")
        spines, per_pair = upper_tier(leaves_per_pod2, u1, R2)
        plan = ClosPlan(2, endpoints, radix, (d1, R2), (u1, 0), leaves, leaves_per_pod2, pods2, pods2 * spines,
                        spines, per_pair, 0, 0, 0, R2 * su * (rails if not per_rail else 1))
        leaf_pod = rail_of_leaf if per_rail else np.zeros(leaves, dtype=np.int32)
        return plan, su, sus, leaf_pod
    # a pod holds the leaves of a group of rails for some SUs: one rail (same-rail, rail-only), every rail
    # (any-to-any), or, when a spine has fewer down ports than there are rails (NVL72-class servers), the
    # largest group of rails that divides them and fits: rail groups share spines, the core joins the groups
    group = 1 if per_rail else rails if d2 >= rails else max(g for g in range(1, d2 + 1) if rails % g == 0)
    if sus_per_pod is None:
        sus_per_pod = min(sus, d2) if per_rail else d2 // group
    chunks = math.ceil(sus / sus_per_pod)
    pods = rails // group * chunks
    leaf_pod = rail_of_leaf // group * chunks + su_of_leaf // sus_per_pod
    leaves_per_pod = sus_per_pod * group
    if leaves_per_pod > d2:
        raise Refused(f"a pod of {leaves_per_pod:,} leaves needs spines with {leaves_per_pod} ports down; they have "
                      f"{d2}", path="fabric.pod.servers", hint=f"use pods of at most {d2 // group * su:,} servers")
    islands = rails if topology == "rail-only" else 1   # rail-only: every rail a Clos with cores of its own
    reach = pods // islands                             # pods under one core
    if reach > R3:
        if pod_servers is not None:
            raise Refused(f"{reach:,} pods are more than a {R3}-port core can reach", path="fabric.pod.servers",
                          hint="use larger pods, or switches with more ports")
        raise Refused(f"a three-tier rail fabric holds at most {R3} pods under a core; this design needs {reach}",
                      path="fabric.tiers" if tiers else "cluster", hint="add planes, or use switches with more ports")
    spines_per_pod, per_pair = upper_tier(leaves_per_pod, u1, d2)   # inside a pod, on the spines' down ports
    plan = three_tier_plan(endpoints, radix, (d1, d2, R3), (u1, u2, 0), leaves, leaves_per_pod, pods, spines_per_pod,
                           per_pair, R3 * leaves_per_pod * su, islands)
    return plan, su, sus, leaf_pod.astype(np.int32)


def generate(design: Design, catalog: Catalog) -> Topology:
    """Build the rail-optimized or rail-only fabric of ``design``; ``InfeasibleDesign`` when it cannot be."""
    warnings: list[str] = []
    fabric = design.fabric
    check_nic_planes(design, catalog)
    link_gbps = resolve_link_speed(design, catalog, warnings)
    speeds, lanes = tier_speeds(design, catalog, link_gbps)
    server = catalog.servers[design.cluster.server]
    nic = catalog.nics[server.nic]
    planes = fabric.planes
    rails = server.nics * nic.ports // planes
    models = {t: fabric.switch[t] for t in TIER_NAMES}
    radix = tuple(catalog.switches[models[t]].radix_at(speed)[0] for t, speed in zip(TIER_NAMES, speeds))
    ratios = (fabric.oversubscription["leaf"], fabric.oversubscription["spine"])
    try:
        plan, su, sus, leaf_pod = plan_rail(design.cluster.servers, rails, radix, ratios, fabric.leaf_uplinks,
                                            fabric.tiers, fabric.topology, fabric.aggregation, fabric.scalable_unit,
                                            fabric.pod_servers, lanes)
    except Refused as err:
        raise design.infeasible(err.path, err.message, err.hint) from None
    except ValueError as err:
        raise design.infeasible("fabric.leaf_uplinks" if fabric.leaf_uplinks else "fabric.oversubscription",
                                str(err), "use a split the port count allows") from None
    check_ratios_apply(design, plan)
    check_core_carries_traffic(design, plan)
    arcs = 2 * (design.gpus * 2 + planes * plan.endpoints * plan.tiers)
    check_fits_in_memory(design, arcs)

    builder = TopologyBuilder(design.name)
    hosts = add_hosts(builder, design, catalog, link_gbps)
    endpoint = np.arange(plan.endpoints, dtype=np.int64)
    endpoint_leaf = (endpoint // rails) // su * rails + endpoint % rails
    leaf_rail = np.tile(np.arange(rails, dtype=np.int32), sus)
    for plane in range(planes):
        add_tree(builder, plan, plane, hosts.endpoints, endpoint_leaf, leaf_pod, models, speeds,
                 fabric.cabling, leaf_rail=leaf_rail)

    pods_per_rail = np.unique(leaf_pod[leaf_rail == 0]).size if plan.tiers == 3 else plan.pods  # pods one rail spans
    tree = TreeLayout(plan, models_present(models, plan), rails=rails, scalable_unit=su,
                      scalable_units=sus,
                      aggregation="rail-only" if fabric.topology == "rail-only" else fabric.aggregation)
    return builder.build(tree_layout(
        plan, planes, hosts, models, warnings, tree, pxn=True,
        in_network_reduction=reduces_in_network(catalog, models, plan),
        bisection_gbps=planes * rail_bisection_gbps(plan, sus, pods_per_rail, speeds),
        bisection_method="analytic: rail fabric, least of the host, leaf-uplink and spine-uplink halves "
                         "(halves of whole scalable units and pods)",
        diameter_hops=rail_diameter_hops(plan, sus, design.cluster.servers, pods_per_rail)))


def rail_bisection_gbps(plan: ClosPlan, sus: int, pods_per_rail: int, speeds: tuple) -> float:
    """One plane, one direction. A cut between two halves of the servers crosses leaf uplinks only when
    the halves sit in different SUs, and spine uplinks only when a rail's leaves of the two halves sit in
    different pods (cross-rail traffic moves over NVLink first, so it never needs another rail's spine)."""
    cut = plan.endpoints * speeds[0] / 2
    if plan.tiers >= 2 and sus > 1:
        cut = min(cut, plan.leaves * plan.up[0] * speeds[1] / 2)
    if plan.tiers == 3 and pods_per_rail > 1:
        cut = min(cut, plan.spines * plan.up[1] * speeds[2] / 2)
    return cut


def rail_diameter_hops(plan: ClosPlan, sus: int, servers: int, pods_per_rail: int) -> int:
    """Network links between two GPUs, forwarding over NVLink inside a server (PXN) allowed."""
    if servers <= 1:
        return 0
    if sus <= 1:
        return 2
    if plan.tiers == 2 or pods_per_rail <= 1:
        return 4
    return 6
