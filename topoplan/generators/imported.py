"""Imported fabrics (``fabric: {topology: imported, file: PATH}``): a real fabric from ``ibnetdiscover``
output, or topoplan's own columnar JSON read back, as a Topology the whole pipeline runs on.

Contract
--------
* ibnetdiscover: every HCA (``Ca`` block) is a NIC of the server named by the first word of its node
  description (``node001 mlx5_0``, as rdma-core sets it); servers in natural order of their names, NICs in
  natural order of the rest (``mlx5_0`` .. ``mlx5_10``). Each server must have the catalog server's NIC
  count (``cluster.server``); its GPUs, NVLink domain and GPU-NIC links come from the catalog as for a
  generated design (``hosts.py``). Link rates are the active width times the lane rate (``4xNDR`` = 400
  Gb/s); latencies the propagation of ``fabric.cabling`` per tier, as generators use. Switch models come
  from the node description's part number (``MQM9700`` -> ``nvidia-qm9700``) or ``fabric.switch``.
* topoplan JSON: the node and link arrays as written; the stored layout is ignored and inferred again.

Tiers are inferred, generator-like: a switch's tier is its distance from the nearest HCA (leaf 0, spine 1,
core 2; deeper is refused); a plane is a connected set of switches; a pod the leaves and spines joined
without the core. Switches that reach no HCA are dropped with a warning (ibnetdiscover) or refused (JSON).

When the inferred tiers form the uniform tree the closed-form engine needs (links only between adjacent
tiers, every NIC one port per plane, every leaf of a pod the same links to each of its spines, all spines
of a pod the same uplinks, every pod of a core island the same links to each core), the layout is a
``TreeLayout`` (family ``clos``): the ``clos`` engine, the analytic bisection (least of the host, leaf-uplink
and spine-uplink halves, as ``clos.py`` and ``rail.py``) and the diameter follow. Otherwise the family is
empty, the generic ``ecmp`` engine routes it, bisection is the structural upper bound, and a warning says
which condition failed. A fabric whose leaves each serve NICs of one index (rails) gets NCCL's PXN.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

from ..catalog import Catalog
from ..errors import Problem, SpecError
from ..interop import columnar, ibnetdiscover
from ..interop.base import components, leaf_groups, network_links
from ..layout import ALL_RELAY_KINDS, ClosPlan, Layout, TreeLayout
from ..spec import Design
from ..topology import KIND, LINK_TIER, SWITCH_TIERS, Topology, TopologyBuilder
from .hosts import add_hosts, cable_latency_ns, medium_for


@dataclass(frozen=True)
class FabricFile:
    """A fabric file read once: ``discovered`` (ibnetdiscover) or ``columnar`` (topoplan JSON)."""

    label: str
    discovered: ibnetdiscover.Discovered | None = None
    columnar: columnar.Columnar | None = None


_READ: dict = {}


def read_fabric(path: str, label: str | None = None) -> FabricFile:
    """Read and check the fabric file at ``path`` (the last one read is kept: the spec and the generator
    both need it). ``SpecError`` with every problem, located in the file."""
    label = label or path
    try:
        stat = os.stat(path)
        key = (os.path.realpath(path), stat.st_mtime_ns, stat.st_size, label)
        if key in _READ:
            return _READ[key]
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as err:
        raise SpecError([Problem(label, 0, "", f"cannot read the fabric file: {err.strerror or err}",
                                 "check the path")]) from None
    text = data.decode("utf-8", errors="replace")
    if columnar.looks_like_json(data[:64]):
        read = FabricFile(label, columnar=columnar.parse(text, label))
    else:
        read = FabricFile(label, discovered=ibnetdiscover.parse(text, label))
    _READ.clear()
    _READ[key] = read
    return read


def _natural(text: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def servers_of(fabric: FabricFile, server) -> tuple[list, list]:
    """(server names in order, per server its HCA rows in NIC order) of an ibnetdiscover fabric; ``SpecError``
    when a server does not have the catalog server's NIC count."""
    found = fabric.discovered
    hosts: dict[str, list] = {}
    for row in found.cas.tolist():
        words = found.description[row].split()
        host = words[0] if len(words) >= 2 else ""
        hosts.setdefault(host, []).append(row)
    problems = []
    if "" in hosts:
        row = hosts[""][0]
        problems.append(Problem(fabric.label, int(found.line[row]), "", f"HCA {found.guid[row]} has the node "
                                f"description \"{found.description[row]}\", not '<host> <hca>'",
                                "rdma-core's rdma-ndd sets 'hostname mlx5_N'; set them before running ibnetdiscover"))
    for host, rows in hosts.items():
        if host and len(rows) != server.nics:
            problems.append(Problem(fabric.label, int(found.line[rows[0]]), "", f"host '{host}' has {len(rows)} HCA(s); "
                                    f"a {server.id} has {server.nics}",
                                    "name the server model the fabric's hosts are (cluster.server, --server)"))
            if len(problems) >= 20:
                break
    if problems:
        raise SpecError(problems)
    names = sorted(hosts, key=_natural)
    return names, [sorted(hosts[h], key=lambda r: _natural(" ".join(found.description[r].split()[1:])))
                   for h in names]


def server_count(fabric: FabricFile, server) -> int:
    """Servers in the fabric file (``SpecError`` when they do not match the catalog server)."""
    if fabric.discovered is not None:
        return len(servers_of(fabric, server)[0])
    found = fabric.columnar
    gpus = found.kind == KIND["gpu"]
    count = int(found.groups["server"][gpus].max(initial=-1)) + 1
    per_server = np.bincount(found.groups["server"][gpus], minlength=max(count, 1))
    if count == 0 or per_server.min() != server.gpus or per_server.max() != server.gpus:
        raise SpecError([Problem(fabric.label, 1, "nodes.server", f"the file's servers have {per_server.min()} to "
                                 f"{per_server.max()} GPUs; a {server.id} has {server.gpus}",
                                 "name the server model the file was built with (cluster.server, --server)")])
    return count


# ---------------------------------------------------------------- tiers, planes and pods


def switch_groups(switches: int, sw_a: np.ndarray, sw_b: np.ndarray, leaf_of_link: np.ndarray,
                  nic_key: np.ndarray, nic_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tier, plane and pod of ``switches`` switches (0..n-1) joined by links ``sw_a``-``sw_b``, with NIC links
    ending on ``leaf_of_link`` (``nic_key``: a NIC-link order, by NIC then port, that numbers pods;
    ``nic_rank``: the link's rank among its NIC's links). A plane is the set of switch islands that NIC port
    ``k`` reaches (port ``k`` is on plane ``k`` as generators build them), so the separate Clos of every rail
    of a rail-only fabric stay one plane. Tier -1: reaches no HCA; ``ValueError`` for more than three tiers."""
    tier = np.full(switches, -1, np.int64)
    tier[leaf_of_link] = 0
    level = 0
    while True:
        frontier = np.zeros(switches, bool)
        frontier[tier == level] = True
        reached = np.concatenate([sw_b[frontier[sw_a]], sw_a[frontier[sw_b]]])
        reached = np.unique(reached[tier[reached] < 0])
        if not reached.size:
            break
        level += 1
        if level >= len(SWITCH_TIERS):
            raise ValueError(f"{reached.size:,} switch(es) are more than three hops from every HCA; topoplan "
                             "models leaf, spine and core tiers")
        tier[reached] = level
    first_key = np.full(switches, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_key, leaf_of_link, nic_key)
    island = components(sw_a, sw_b, switches)
    island_rank = np.full(switches, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(island_rank, island[leaf_of_link], nic_rank)
    plane = np.where(tier >= 0, np.unique(island_rank[island], return_inverse=True)[1], -1)
    low = (tier[sw_a] <= 1) & (tier[sw_b] <= 1)
    pod = np.full(switches, -1, np.int64)
    pod_label = components(sw_a[low], sw_b[low], switches)
    for p in np.unique(plane[plane >= 0]).tolist():
        members = (plane == p) & (tier >= 0) & (tier <= 1)
        pod[members] = _ranked(pod_label, first_key, members)[members]
    return tier, plane, pod


def _ranked(labels: np.ndarray, key: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Components renumbered 0.. in order of their least ``key`` (over ``mask``); -1 outside ``mask``."""
    out = np.full(labels.size, -1, np.int64)
    if not mask.any():
        return out
    least = {}
    for label, k in zip(labels[mask].tolist(), key[mask].tolist()):
        least[label] = min(least.get(label, k), k)
    rank = {label: i for i, label in enumerate(sorted(least, key=lambda x: (least[x], x)))}
    out[mask] = [rank[x] for x in labels[mask].tolist()]
    return out


# ---------------------------------------------------------------- the layout


def infer_layout(topology: Topology, design: Design, catalog: Catalog, warnings: list) -> Layout:
    """The Layout of an imported topology (see the module docstring)."""
    server = catalog.servers[design.cluster.server]
    nic_links, switch_links = network_links(topology)
    gpus = topology.gpus
    switches = topology.nodes_of("switch")
    tiers = int(topology.tier[switches].max(initial=-1)) + 1
    planes = int(topology.plane[switches].max(initial=0)) + 1
    injection = float(nic_links.gbps.sum()) / max(gpus.size, 1)
    link_gbps = float(np.median(nic_links.gbps)) if nic_links.count else 0.0
    gpu_links = (topology.kind[topology.src] == KIND["gpu"]) & (topology.kind[topology.dst] == KIND["gpu"]) & \
        (topology.link_tier != LINK_TIER["host"])
    models = tuple(dict.fromkeys(topology.model_of(int(s)) for s in switches))
    reduces = bool(models) and all(catalog.switches[m].in_network_reduction for m in models if m in catalog.switches)
    common = dict(tiers=tiers, planes=planes, gpus_per_server=server.gpus, link_gbps=link_gbps,
                  injection_gbps_per_gpu=injection, nvls=server.nvls, in_network_reduction=reduces)
    if gpu_links.any() or not switches.size:
        warnings.append("imported fabric joins GPUs directly: the generic ecmp engine routes it")
        return Layout(relay_kinds=ALL_RELAY_KINDS, diameter_hops=_diameter(topology, nic_links, switch_links),
                      warnings=tuple(warnings), **common)
    why = _not_a_uniform_tree(topology, nic_links, switch_links, planes)
    server_group, leaf_nodes, _leaf_group = leaf_groups(topology)
    leaf_rail = _leaf_rails(topology, nic_links)
    pxn = bool(server.gpus > 1 and (leaf_rail[leaf_nodes] >= 0).all() and np.unique(leaf_rail[leaf_nodes]).size > 1)
    if why:
        warnings.append(f"imported fabric is not a uniform tree ({why}): the generic ecmp engine routes it and "
                        "the bisection is the smallest structural cut found")
        return Layout(pxn=pxn, diameter_hops=_diameter(topology, nic_links, switch_links), warnings=tuple(warnings),
                      **common)
    plan, pods_spanned, leaf_units = _plan(topology, nic_links, switch_links, server_group, leaf_rail, pxn, tiers)
    bisection = _tree_bisection(topology, nic_links, switch_links, leaf_units, pods_spanned, planes)
    servers = design.cluster.servers
    diameter = 0 if servers <= 1 else 2 if leaf_units <= 1 else 4 if tiers == 2 or pods_spanned <= 1 else 6
    isolated = "rail-only" if plan.core_islands > 1 else "same-rail" if tiers == 2 and plan.pods > 1 else ""
    tree = TreeLayout(plan, models, rails=int(np.unique(leaf_rail[leaf_nodes]).size) if pxn else 0,
                      aggregation=isolated)
    return Layout(family="clos", pxn=pxn, tree=tree, bisection_gbps=bisection, diameter_hops=diameter,
                  bisection_method="analytic: inferred tree, least of the host, leaf-uplink and spine-uplink halves",
                  warnings=tuple(warnings), **common)


def _leaf_rails(topology: Topology, nic_links) -> np.ndarray:
    """Per node: the NIC index (in its server) every NIC on this leaf has, else -1."""
    nics = topology.nodes_of("nic")
    local = np.full(topology.num_nodes, -1, np.int64)
    local[nics] = topology.rail[nics]
    low = np.full(topology.num_nodes, np.iinfo(np.int64).max, np.int64)
    high = np.full(topology.num_nodes, -1, np.int64)
    np.minimum.at(low, nic_links.upper, local[nic_links.lower])
    np.maximum.at(high, nic_links.upper, local[nic_links.lower])
    return np.where((low == high) & (high >= 0), high, -1)


def _pair_counts(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    keys, counts = np.unique(np.stack([a, b]), axis=1, return_counts=True)
    return keys[0], keys[1], counts


def _not_a_uniform_tree(topology: Topology, nic_links, switch_links, planes: int) -> str:
    """Why the closed form would not be exact on this fabric ("" when it is)."""
    tier, plane, pod = topology.tier, topology.plane, topology.pod
    if (tier[nic_links.upper] != 0).any():
        return "an HCA links to a switch above the leaves"
    if switch_links.count and (tier[switch_links.upper] - tier[switch_links.lower] != 1).any():
        return "some switches link within a tier or skip one"
    per_plane = np.zeros((topology.num_nodes, planes), np.int64)
    np.add.at(per_plane, (nic_links.lower, plane[nic_links.upper]), 1)
    if (per_plane[topology.nodes_of("nic")] != 1).any():
        return "a NIC does not have exactly one port in each plane"
    up = tier[switch_links.lower] == 0
    leaves = topology.nodes_of("switch")[tier[topology.nodes_of("switch")] == 0]
    has_up = np.zeros(topology.num_nodes, bool)
    has_up[switch_links.lower[up]] = True
    if up.any() and not has_up[leaves].all():
        return "a leaf has no uplink"
    leaf, spine, count = _pair_counts(switch_links.lower[up], switch_links.upper[up])
    three = (tier[topology.nodes_of("switch")] == 2).any()
    signatures: dict = {}
    for l, s, c in zip(leaf.tolist(), spine.tolist(), count.tolist()):
        signatures.setdefault(l, []).append((s, c))
    by_pod: dict = {}
    for l, signature in signatures.items():
        key = (int(plane[l]), int(pod[l]))
        if by_pod.setdefault(key, signature) != signature:
            return "the leaves of a pod do not have the same links to each spine"
        if three and len({c for _s, c in signature}) != 1:
            return "a leaf has different numbers of links to the spines of its pod"
    if not three:
        return ""
    core_up = tier[switch_links.lower] == 1
    spine_up = np.bincount(switch_links.lower[core_up], minlength=topology.num_nodes)
    spines = topology.nodes_of("switch")[tier[topology.nodes_of("switch")] == 1]
    for key in by_pod:
        members = spines[(plane[spines] == key[0]) & (pod[spines] == key[1])]
        if np.unique(spine_up[members]).size != 1 or spine_up[members][0] == 0:
            return "the spines of a pod do not have the same number of uplinks"
    pod_key = plane.astype(np.int64) * (int(pod.max()) + 1) + pod
    p, core, count = _pair_counts(pod_key[switch_links.lower[core_up]], switch_links.upper[core_up])
    island = components(np.searchsorted(np.unique(p), p), np.unique(p).size + np.searchsorted(np.unique(core), core),
                        np.unique(p).size + np.unique(core).size)[:np.unique(p).size]
    pods = np.unique(p)
    rows: dict = {}
    for pk, c, k in zip(p.tolist(), core.tolist(), count.tolist()):
        rows.setdefault(pk, []).append((c, k))
    seen: dict = {}
    for i, pk in enumerate(pods.tolist()):
        if seen.setdefault(int(island[i]), rows[pk]) != rows[pk]:
            return "the pods under a core do not have the same links to each core"
    return ""


def _plan(topology: Topology, nic_links, switch_links, server_group, leaf_rail, pxn: bool, tiers: int):
    """(ClosPlan of plane 0, pods one rail spans, leaf units: SUs on rail fabrics, else leaves) of a tree."""
    tier, plane, pod = topology.tier, topology.plane, topology.pod
    switches = topology.nodes_of("switch")
    in0 = switches[plane[switches] == 0]
    count = [int((tier[in0] == t).sum()) for t in range(3)]
    leaves0 = in0[tier[in0] == 0]
    down = np.bincount(nic_links.upper, minlength=topology.num_nodes)
    up = np.bincount(switch_links.lower, minlength=topology.num_nodes)
    from_above = np.bincount(switch_links.upper, minlength=topology.num_nodes)
    pods = int(pod[leaves0].max()) + 1
    leaves_per_pod = int(np.bincount(pod[leaves0]).max())
    spines0 = in0[tier[in0] == 1]
    spines_per_pod = int(np.bincount(pod[spines0]).max()) if spines0.size else 0
    first_leaf = leaves0[0]
    link_counts = _pair_counts(switch_links.lower[(switch_links.lower == first_leaf)],
                               switch_links.upper[(switch_links.lower == first_leaf)])[2]
    leaf_spine = int(link_counts[0]) if link_counts.size and np.unique(link_counts).size == 1 else 0
    spine_core = 0
    islands = 1
    if tiers == 3:
        first_spine = spines0[0]
        sel = switch_links.lower == first_spine
        counts = _pair_counts(switch_links.lower[sel], switch_links.upper[sel])[2]
        spine_core = int(counts[0]) if np.unique(counts).size == 1 else 0
        cores0 = in0[tier[in0] == 2]
        sel = np.isin(switch_links.upper, cores0)
        labels = components(np.searchsorted(np.arange(pods), pod[switch_links.lower[sel]]),
                            pods + np.searchsorted(cores0, switch_links.upper[sel]), pods + cores0.size)
        islands = int(np.unique(labels[:pods]).size)
    rail0 = leaves0[leaf_rail[leaves0] == 0] if pxn else leaves0
    pods_spanned = int(np.unique(pod[rail0]).size)
    groups = int(np.unique(server_group[server_group >= 0]).size)
    leaf_units = groups if pxn else leaves0.size
    ports = down + up + from_above
    radix = tuple(int(ports[in0[tier[in0] == t]].max()) for t in range(tiers))
    endpoints = int((plane[nic_links.upper] == 0).sum())
    downs = [int(down[leaves0].max())] + [int(from_above[in0[tier[in0] == t]].max()) for t in range(1, tiers)]
    plan = ClosPlan(tiers, endpoints, radix, tuple(downs),
                    tuple([int(up[leaves0].max())] + ([int(up[spines0].max())] if tiers == 3 else []) + [0])[:tiers],
                    count[0], leaves_per_pod, pods, count[1], spines_per_pod, leaf_spine, count[2], count[2],
                    spine_core, 0, islands)
    return plan, pods_spanned, leaf_units


def _tree_bisection(topology: Topology, nic_links, switch_links, leaf_units: int, pods_spanned: int,
                    planes: int) -> float:
    """Per plane, the least of half the host links, half the leaf uplinks (several leaf units) and half the
    spine uplinks (several pods), summed over the planes."""
    tier, plane = topology.tier, topology.plane
    total = 0.0
    for p in range(planes):
        cut = float(nic_links.gbps[plane[nic_links.upper] == p].sum()) / 2
        in_plane = plane[switch_links.lower] == p
        if leaf_units > 1 and (tier[switch_links.lower] == 0).any():
            cut = min(cut, float(switch_links.gbps[in_plane & (tier[switch_links.lower] == 0)].sum()) / 2)
        if pods_spanned > 1 and (tier[switch_links.lower] == 1).any():
            cut = min(cut, float(switch_links.gbps[in_plane & (tier[switch_links.lower] == 1)].sum()) / 2)
        total += cut
    return total


def _diameter(topology: Topology, nic_links, switch_links) -> int:
    """Network links on the longest shortest path between two NICs' leaves (+2 for the NIC links); -1 when
    some leaves cannot reach each other. Generic fabrics only (GPU relays not followed)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    leaves = np.unique(nic_links.upper)
    if leaves.size <= 1:
        return 2 if nic_links.count > 1 else 0
    nodes = np.unique(np.concatenate([leaves, switch_links.lower, switch_links.upper]))
    a, b = np.searchsorted(nodes, switch_links.lower), np.searchsorted(nodes, switch_links.upper)
    graph = coo_matrix((np.ones(a.size), (a, b)), shape=(nodes.size, nodes.size)).tocsr()
    hops = shortest_path(graph, directed=False, unweighted=True, indices=np.searchsorted(nodes, leaves))
    hops = hops[:, np.searchsorted(nodes, leaves)]
    # leaves of different planes never meet; only pairs in one plane count
    same = topology.plane[leaves][:, None] == topology.plane[leaves][None, :]
    worst = hops[same].max()
    return -1 if not np.isfinite(worst) else int(worst) + 2


# ---------------------------------------------------------------- building


def generate(design: Design, catalog: Catalog) -> Topology:
    """The imported fabric of ``design`` (``fabric.file``); ``InfeasibleDesign`` or ``SpecError`` when it
    cannot be used."""
    fabric = read_fabric(design.fabric.file, design.fabric.file_label or design.fabric.file)
    warnings: list = []
    if fabric.discovered is not None:
        topology = _from_ibnetdiscover(design, catalog, fabric, warnings)
    else:
        topology = _from_columnar(design, catalog, fabric)
    topology.layout = infer_layout(topology, design, catalog, warnings)
    return topology


def _switch_model(design: Design, catalog: Catalog, description: str, tier: int) -> str | None:
    lowered = description.lower()
    for model_id in catalog.switches:
        tail = model_id.split("-", 1)[-1]
        if len(tail) >= 4 and tail in lowered:
            return model_id
    return design.fabric.switch.get(SWITCH_TIERS[tier]) if design.fabric.switch else None


def _from_ibnetdiscover(design: Design, catalog: Catalog, fabric: FabricFile, warnings: list) -> Topology:
    found = fabric.discovered
    server = catalog.servers[design.cluster.server]
    nic = catalog.nics[server.nic]
    _names, rows = servers_of(fabric, server)
    is_switch = found.is_switch
    switch_rows = found.switches
    switch_index = np.full(is_switch.size, -1, np.int64)
    switch_index[switch_rows] = np.arange(switch_rows.size)
    ca_nic = np.full(is_switch.size, -1, np.int64)       # HCA row -> NIC number (server-major)
    for s, hcas in enumerate(rows):
        ca_nic[hcas] = s * server.nics + np.arange(len(hcas))
    sw_sw = is_switch[found.a] & is_switch[found.b]
    ca_a, ca_b = ~is_switch[found.a], ~is_switch[found.b]
    problems = []
    if (ca_a & ca_b).any():
        at = int(np.flatnonzero(ca_a & ca_b)[0])
        problems.append(Problem(fabric.label, int(found.link_line[at]), "", "two HCAs are cabled to each other",
                                "topoplan models HCAs on switches"))
    to_ca = ca_a ^ ca_b
    nic_row = np.where(ca_a, found.a, found.b)[to_ca]
    nic_port = np.where(ca_a, found.a_port, found.b_port)[to_ca]
    leaf_row = np.where(ca_a, found.b, found.a)[to_ca]
    ports_used = np.bincount(nic_row, minlength=is_switch.size)
    if (ports_used[found.cas] > nic.ports).any():
        row = int(found.cas[np.flatnonzero(ports_used[found.cas] > nic.ports)[0]])
        problems.append(Problem(fabric.label, int(found.line[row]), "", f"HCA {found.guid[row]} has "
                                f"{ports_used[row]} ports cabled; a {nic.id} has {nic.ports}",
                                "name the server model the fabric's hosts are (cluster.server, --server)"))
    if problems:
        raise SpecError(problems)
    nic_key = ca_nic[nic_row] * 64 + nic_port
    order = np.argsort(nic_key, kind="stable")
    nic_rank = np.empty(order.size, np.int64)
    nic_rank[order] = np.arange(order.size) - np.searchsorted(ca_nic[nic_row][order], ca_nic[nic_row][order])
    try:
        tier, plane, pod = switch_groups(switch_rows.size, switch_index[found.a[sw_sw]], switch_index[found.b[sw_sw]],
                                         switch_index[leaf_row], nic_key, nic_rank)
    except ValueError as err:
        raise design.infeasible("fabric.file", str(err), "import one subnet of at most three switch tiers") from None
    dropped = int((tier < 0).sum())
    if dropped:
        warnings.append(f"{dropped} switch(es) reach no HCA and were left out")
    models = []
    for i, row in enumerate(switch_rows.tolist()):
        model = _switch_model(design, catalog, found.description[row], max(int(tier[i]), 0)) if tier[i] >= 0 else ""
        if model is None:
            problems.append(Problem(fabric.label, int(found.line[row]), "", f"switch \"{found.description[row]}\" "
                                    "names no switch model of the catalog",
                                    "name it: fabric.switch: nvidia-qm9700 (or --switch ID)"))
            if len(problems) >= 20:
                break
        models.append(model)
    if problems:
        raise SpecError(problems)

    link_gbps = float(np.median(found.gbps[to_ca])) if to_ca.any() else 0.0
    builder = TopologyBuilder(design.name)
    nic_nodes = np.unique(add_hosts(builder, design, catalog, link_gbps).endpoints)   # server-major
    node_of_switch = np.full(switch_rows.size, -1, np.int64)
    for p in range(int(plane.max(initial=-1)) + 1):
        for t in range(3):
            members = np.flatnonzero((plane == p) & (tier == t))
            if members.size:
                node_of_switch[members] = builder.add_nodes("switch", members.size, f"p{p}.{SWITCH_TIERS[t]}",
                                                            tier=t, plane=p, pod=pod[members] if t < 2 else -1)
    model_code = np.asarray([builder.model_index(m) for m in models], np.int16)
    cabling = design.fabric.cabling
    kept = tier[switch_index[leaf_row]] >= 0
    builder.add_links(nic_nodes[ca_nic[nic_row][kept]], node_of_switch[switch_index[leaf_row]][kept],
                      found.gbps[to_ca][kept], cable_latency_ns(cabling["leaf"]), medium_for(cabling["leaf"]), "leaf")
    sa, sb = switch_index[found.a[sw_sw]], switch_index[found.b[sw_sw]]
    upper_tier = np.maximum(tier[sa], tier[sb])
    for t in range(1, 3):
        sel = (upper_tier == t) & (tier[sa] >= 0) & (tier[sb] >= 0)
        if sel.any():
            name = SWITCH_TIERS[t]
            builder.add_links(node_of_switch[sa[sel]], node_of_switch[sb[sel]], found.gbps[sw_sw][sel],
                              cable_latency_ns(cabling[name]), medium_for(cabling[name]), name)
    flat = (upper_tier == 0) & (tier[sa] >= 0)
    if flat.any():   # leaf-to-leaf cables: not a tree, still routed
        builder.add_links(node_of_switch[sa[flat]], node_of_switch[sb[flat]], found.gbps[sw_sw][flat],
                          cable_latency_ns(cabling["leaf"]), medium_for(cabling["leaf"]), "leaf")
    topology = builder.build()
    placed = node_of_switch >= 0
    topology.model[node_of_switch[placed]] = model_code[placed]
    leaf_rail = _leaf_rails(topology, network_links(topology)[0])
    leaves = topology.nodes_of("switch")[topology.tier[topology.nodes_of("switch")] == 0]
    topology.rail[leaves] = leaf_rail[leaves]
    return topology


def _from_columnar(design: Design, catalog: Catalog, fabric: FabricFile) -> Topology:
    found = fabric.columnar
    problems = [Problem(fabric.label, 1, "nodes.model", f"model '{m}' is not in the catalog",
                        "add it with --catalog FILE") for m in found.models
                if not any(m in section for section in (catalog.switches, catalog.nics, catalog.ocs))]
    if problems:
        raise SpecError(problems)
    kind = found.kind
    groups = dict(found.groups)
    tier = found.tier.copy()
    switches = np.flatnonzero(kind == KIND["switch"])
    index = np.full(kind.size, -1, np.int64)
    index[switches] = np.arange(switches.size)
    src, dst = found.src, found.dst
    sw = (kind[src] == KIND["switch"]) & (kind[dst] == KIND["switch"])
    to_nic = (kind[src] == KIND["nic"]) & (kind[dst] == KIND["switch"]) | \
        (kind[dst] == KIND["nic"]) & (kind[src] == KIND["switch"])
    nic_end = np.where(kind[src] == KIND["nic"], src, dst)[to_nic]
    leaf_end = np.where(kind[src] == KIND["nic"], dst, src)[to_nic]
    order = np.argsort(nic_end, kind="stable")
    rank = np.empty(order.size, np.int64)
    rank[order] = np.arange(order.size) - np.searchsorted(nic_end[order], nic_end[order])
    if switches.size:
        try:
            s_tier, s_plane, s_pod = switch_groups(switches.size, index[src[sw]], index[dst[sw]], index[leaf_end],
                                                   nic_end.astype(np.int64) * 64 + rank, rank)
        except ValueError as err:
            raise design.infeasible("fabric.file", str(err), "") from None
        if (s_tier < 0).any():
            raise SpecError([Problem(fabric.label, 1, "nodes", f"{int((s_tier < 0).sum())} switch(es) reach no NIC",
                                     "remove them from the file")])
        tier[switches] = s_tier
        groups["plane"] = groups["plane"].copy()
        groups["plane"][switches] = s_plane
        groups["pod"] = groups["pod"].copy()
        groups["pod"][switches] = s_pod
    m = src.size
    arcs_src = np.empty(2 * m, np.int32)
    arcs_dst = np.empty(2 * m, np.int32)
    arcs_src[0::2], arcs_src[1::2] = src, dst
    arcs_dst[0::2], arcs_dst[1::2] = dst, src
    topology = Topology(name=design.name, kind=kind, tier=tier, model=found.model, **groups,
                        src=arcs_src, dst=arcs_dst, capacity_gbps=np.repeat(found.capacity_gbps, 2),
                        latency_ns=np.repeat(found.latency_ns.astype(np.float32), 2),
                        medium=np.repeat(found.medium, 2), link_tier=np.repeat(found.link_tier, 2),
                        models=found.models, blocks=_blocks(kind, tier, groups["plane"]))
    wrong = topology.check()
    if wrong:
        raise SpecError([Problem(fabric.label, 1, "", f"not a valid topology: {w}", "") for w in wrong])
    return topology


def _blocks(kind: np.ndarray, tier: np.ndarray, plane: np.ndarray) -> tuple:
    """Name blocks for a topology read from JSON: runs of nodes of one kind (and tier and plane)."""
    labels = []
    for k, t, p in zip(kind.tolist(), tier.tolist(), plane.tolist()):
        if k == KIND["switch"]:
            labels.append(f"p{p}.{SWITCH_TIERS[t]}" if 0 <= t < 3 else "switch")
        else:
            labels.append({KIND["gpu"]: "gpu", KIND["nic"]: "nic", KIND["nvswitch"]: "nvlink", KIND["ocs"]: "ocs",
                           KIND["cpu"]: "cpu", KIND["pcie_switch"]: "pcie-switch"}.get(k, "node"))
    blocks, start = [], 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            blocks.append((start, i - start, labels[start]))
            start = i
    return tuple(blocks)
