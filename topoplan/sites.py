"""Multi-site training: site fabrics joined by WAN links, what crosses them, and the WAN bandwidth a step
needs (``docs/sites.md``).

A multi-site spec lists two or more ``sites`` (each a cluster and a fabric of any switched family) and a
``wan`` section (links between sites, the border switch, which parallel dimension crosses, and how the
cross-site data-parallel synchronisation runs). Every site becomes an ordinary single-site ``Design``, so
generators, engines and the step model run on it unchanged; this module adds what joins them:

* **Placement**: TP, CP and EP stay inside a site. With ``crossing: dp`` (the default) each site holds
  whole model replicas (its GPUs / (tp x cp x pp) of them); with ``crossing: pp`` every replica's pipeline
  is cut into one equal run of stages per site, so only the stage-boundary sends cross.
* **Topology** (``join``): the site topologies side by side, a ``border`` tier of switches per site wired
  non-blocking to the site's top tier, and the WAN links between the borders (link tier ``wan``).
* **Timing**: a cross-site all-reduce is hierarchical. Inside each site the gradients are reduce-scattered
  and the weights all-gathered over the site's own DP group, as a one-site step does; between sites every
  site moves ``2 (M - 1) / M`` of one replica's gradients (``Exchange``), routed over the site graph of
  WAN links as a ring or a direct pattern, whichever is faster, with the links' one-way latency per step.
  How much of it the step sees depends on the ``sync`` scheme (``exposed_wan_s``): ``sync`` all of it,
  ``overlap`` what the last micro-batch's backward cannot hide, ``diloco`` (H inner steps) one H-th,
  ``co2`` (tau) only what outlasts tau local steps, amortised over them.
* **The planner's question** (``requirement``): the WAN bandwidth at which the step keeps a target share
  of its one-site speed (utilisation = step with a free WAN / step), per scheme.

A lossy WAN link carries at most the Mathis et al. (1997) TCP bound per stream,
``MSS / RTT x sqrt(3 / 2p)``, times its streams.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from . import yamlio
from .catalog import Catalog
from .cost import REACH_REQUIRED_M, Bom, BomLine
from .errors import InfeasibleDesign, SpecError, did_you_mean
from .layout import Layout
from .schema import MISSING, Context, Enum, Int, Key, List, Num, Obj, OneOf, Str
from .spec import DESIGN_SCHEMA, Design, Workload, _cross_check, _training_of, _workload
from .topology import KIND, LINK_TIER, MEDIUM, Topology

FIBRE_US_PER_KM = 4.9           # one way: light in fibre at ~2.04e8 m/s (n ~ 1.47)
SCHEMES = ("sync", "overlap", "diloco", "co2")
SCHEME_TEXT = {"sync": "synchronous DP, no overlap", "overlap": "synchronous DP, overlapped with backward",
               "diloco": "DiLoCo, outer sync every H steps", "co2": "CO2, asynchronous outer sync every tau steps"}
DEFAULT_EVERY = {"diloco": 100, "co2": 4}
BORDER_TIER = 3                 # the node tier of border switches (0 leaf, 1 spine, 2 core)
UTILIZATION_LEVELS = (0.5, 0.9, 0.99)
MAX_SITES = 16

# --- the spec -------------------------------------------------------------------------------------------

WAN_LINK = Obj({
    "between": Key(List(Str(kebab=True), min_items=2, doc="the two site names this link joins"), True),
    "link_gbps": Key(Num(exclusive_minimum=0, maximum=1e6, doc="line rate of one link, Gb/s"), True),
    "count": Key(Int(minimum=1, maximum=100_000, doc="parallel links"), False, 1),
    "distance_km": Key(Num(minimum=0, maximum=40_000, doc="fibre route length; 4.9 us/km one way"), False),
    "latency_ms": Key(Num(minimum=0, maximum=10_000, doc="one-way latency (instead of distance_km)"), False),
    "loss": Key(Num(minimum=0, maximum=0.5, doc="packet loss rate; caps each TCP stream at the Mathis bound"),
                False, 0.0),
    "streams": Key(Int(minimum=1, maximum=1_000_000, doc="with loss: TCP streams sharing the link"), False, 1),
    "mss_bytes": Key(Int(minimum=512, maximum=65_536, doc="with loss: TCP segment size"), False, 1460),
    "usd_per_port": Key(Num(minimum=0, maximum=1e9, doc="price of one end of one link (coherent optic, "
                                                        "router port, line-system share)"), False),
    "usd_per_gbps": Key(Num(minimum=0, maximum=1e9, doc="price per Gb/s of link capacity (a leased wave)"), False),
}, doc="WAN links between two sites")
SYNC = OneOf((Enum(SCHEMES, doc="how the cross-site DP synchronisation runs"), Obj({
    "scheme": Key(Enum(SCHEMES), True),
    "every": Key(Int(minimum=1, maximum=1_000_000, doc="diloco: inner steps H; co2: local steps tau"), False),
}, doc="a scheme with its period")))
SITE = Obj({
    "name": Key(Str(kebab=True, doc="site name, kebab-case"), True),
    "cluster": DESIGN_SCHEMA.keys["cluster"],
    "fabric": DESIGN_SCHEMA.keys["fabric"],
}, doc="one datacenter: its cluster and its fabric")
SITES_SCHEMA = Obj({
    "version": DESIGN_SCHEMA.keys["version"],
    "name": DESIGN_SCHEMA.keys["name"],
    "description": DESIGN_SCHEMA.keys["description"],
    "sites": Key(List(SITE, min_items=2), True),
    "wan": Key(Obj({
        "links": Key(List(WAN_LINK, min_items=1), True),
        "border_switch": Key(Str(kebab=True, doc="switch id of the border tier; default each site's leaf switch"),
                             False),
        "crossing": Key(Enum(("dp", "pp"), doc="the parallel dimension split across sites"), False, "dp"),
        "sync": Key(SYNC, False, "sync"),
        "target_utilization": Key(Num(exclusive_minimum=0, maximum=0.9999, doc="share of the one-site step "
                                                                               "speed to keep"), False, 0.9),
    }, doc="how the sites are joined"), True),
    "workload": DESIGN_SCHEMA.keys["workload"],
    "economics": DESIGN_SCHEMA.keys["economics"],
    "routing": DESIGN_SCHEMA.keys["routing"],
    "targets": DESIGN_SCHEMA.keys["targets"],
}, doc="topoplan multi-site design spec")


@dataclass
class _Within(Context):
    """A Context that files problems under ``prefix`` (a site's checks use the one-site validator)."""

    prefix: tuple = ()

    def error(self, path, message: str, hint: str = "") -> None:
        super().error(self.prefix + tuple(path), message, hint)


@dataclass(frozen=True)
class WanLink:
    a: int                      # site indices
    b: int
    link_gbps: float
    count: int
    latency_s: float            # one way
    distance_km: float | None
    loss: float = 0.0
    streams: int = 1
    mss_bytes: int = 1460
    usd_per_port: float | None = None
    usd_per_gbps: float | None = None

    @property
    def goodput_gbps(self) -> float:
        """What one link carries: its line rate, or under loss its streams' Mathis bound if lower."""
        if not self.loss:
            return self.link_gbps
        rtt = max(2 * self.latency_s, 1e-6)
        return min(self.link_gbps, self.streams * self.mss_bytes * 8 / rtt * math.sqrt(1.5 / self.loss) / 1e9)

    @property
    def capacity_gbps(self) -> float:
        return self.count * self.goodput_gbps

    @property
    def price_usd(self) -> float:
        if self.usd_per_gbps is not None:
            return self.usd_per_gbps * self.link_gbps * self.count
        return 2 * self.count * (self.usd_per_port or 0.0)


@dataclass(frozen=True)
class Sync:
    scheme: str = "sync"
    every: int = 1              # H (diloco) or tau (co2); 1 otherwise

    @property
    def label(self) -> str:
        if self.scheme == "diloco":
            return f"diloco H={self.every}"
        if self.scheme == "co2":
            return f"co2 tau={self.every}"
        return self.scheme


@dataclass(frozen=True)
class Wan:
    links: tuple                # WanLink
    border_switch: str | None
    crossing: str = "dp"
    sync: Sync = Sync()
    target_utilization: float = 0.9


@dataclass(frozen=True)
class Site:
    name: str
    design: Design              # the site as a one-site design (its share of the job)


@dataclass(frozen=True)
class MultiSiteDesign:
    name: str
    description: str
    sites: tuple                # Site
    wan: Wan
    workload: Workload          # the whole job
    routing: object
    targets: dict
    file: str = "<spec>"
    lines: yamlio.LineMap = field(default_factory=yamlio.LineMap, compare=False, repr=False)

    @property
    def gpus(self) -> int:
        return sum(site.design.gpus for site in self.sites)

    @property
    def servers(self) -> int:
        return sum(site.design.cluster.servers for site in self.sites)

    def infeasible(self, path: str, message: str, hint: str = "") -> InfeasibleDesign:
        parts = tuple(int(p) if p.isdigit() else p for p in path.replace("[", ".").replace("]", "").split("."))
        return InfeasibleDesign(path, message, hint, file=self.file, line=self.lines.line_of(parts))


def is_multi_site(data) -> bool:
    return isinstance(data, dict) and "sites" in data


def load(file: str, catalog: Catalog):
    """Read a spec file: a ``MultiSiteDesign`` when it has ``sites``, else a one-site ``Design``."""
    from .spec import design_from_data

    data, lines = yamlio.read(file)
    if is_multi_site(data):
        return multi_site_from_data(data, catalog, str(file), lines)
    return design_from_data(data, catalog, str(file), lines)


def multi_site_from_data(data, catalog: Catalog, file: str = "<spec>", lines=None) -> MultiSiteDesign:
    """Validate a multi-site spec; raise ``SpecError`` with every problem found."""
    lines = lines if lines is not None else yamlio.LineMap()
    ctx = Context(file, lines)
    checked = SITES_SCHEMA.check(data, (), ctx)
    if checked is MISSING or ctx.problems:
        raise SpecError(ctx.problems)
    sites_data, wan_data = checked["sites"], checked["wan"]
    if len(sites_data) > MAX_SITES:   # the balanced WAN cut tries every split of the sites
        ctx.error(("sites",), f"{len(sites_data)} sites; topoplan models at most {MAX_SITES}",
                  "group nearby datacenters into one site")
        raise SpecError(ctx.problems)
    names = [s["name"] for s in sites_data]
    for index, name in enumerate(names):
        if name in names[:index]:
            ctx.error(("sites", index, "name"), f"two sites are named '{name}'", "site names must be unique")
    for index, site in enumerate(sites_data):
        if site["fabric"]["topology"] == "railx":
            ctx.error(("sites", index, "fabric", "topology"), "a RailX site has no switch tier for the border "
                      "switches to hang from", "use a switched fabric (fat-tree, rail-optimized, rail-only) at "
                      "sites joined by a WAN")
    # every site on its own, with the one-site validator (problems land under sites[i])
    site_parts = []
    for index, site in enumerate(sites_data):
        c = {"name": f"{checked['name']}-{site['name']}", "description": "", "cluster": site["cluster"],
             "fabric": site["fabric"], "workload": None, "economics": None, "routing": checked["routing"],
             "failures": None, "targets": None}
        site_parts.append(_cross_check(c, catalog, _Within(file, lines, ctx.problems, ("sites", index))))
    if ctx.problems:
        raise SpecError(ctx.problems)
    gpus = [p["cluster"].gpus for p in site_parts]
    total = sum(gpus)
    wan = _wan(wan_data, names, catalog, ctx)
    w = checked["workload"] or {}
    workload = _workload(w, total, ctx, site_parts[0]["fabric"].topology)
    server = catalog.servers[site_parts[0]["cluster"].server]
    training = _training_of(w, checked["economics"], workload, catalog, server, ctx)
    if training is None and not ctx.problems:
        ctx.error(("workload",), "a multi-site design needs the training-step model: what crosses the WAN is "
                  "the step's data-parallel (or pipeline) traffic", "add workload.model and workload.training "
                  "(see designs/llama3-405b-2-sites.yaml)")
    workload = Workload(workload.parallelism, workload.order, workload.collectives, training)
    site_degrees = _placement(workload, wan.crossing, gpus, names, ctx)   # reported with the problems above
    if ctx.problems:
        raise SpecError(ctx.problems)
    sites = []
    for index, (part, degrees) in enumerate(zip(site_parts, site_degrees)):
        site_training = None   # crossing: pp times the whole pipeline here, not per site
        if wan.crossing == "dp":
            m = training.global_batch // (workload.parallelism["dp"] * training.micro_batch)
            site_training = replace(training, global_batch=degrees["dp"] * training.micro_batch * m)
        site_workload = Workload(degrees, workload.order, workload.collectives, site_training)
        part = dict(part, workload=site_workload, targets={})
        sites.append(Site(names[index], Design(**part, file=file, lines=lines)))
    targets = {k: v for k, v in (checked["targets"] or {}).items() if v is not None}
    return MultiSiteDesign(checked["name"], checked["description"], tuple(sites), wan, workload,
                           site_parts[0]["routing"], targets, file, lines)


def _wan(w: dict, names: list, catalog: Catalog, ctx: Context) -> Wan:
    links = []
    for index, link in enumerate(w["links"]):
        path = ("wan", "links", index)
        ends = link["between"]
        if len(ends) != 2 or ends[0] == ends[1]:
            ctx.error(path + ("between",), "a WAN link joins two different sites", "e.g. between: [east, west]")
            continue
        unknown = [e for e in ends if e not in names]
        for e in unknown:
            ctx.error(path + ("between",), f"no site named '{e}'", did_you_mean(e, names))
        if unknown:
            continue
        if (link["distance_km"] is None) == (link["latency_ms"] is None):
            ctx.error(path, "give the link's distance_km or its one-way latency_ms, one of them",
                      "e.g. distance_km: 800 (4.9 us per km of fibre)")
            continue
        if link["usd_per_port"] is not None and link["usd_per_gbps"] is not None:
            ctx.error(path + ("usd_per_gbps",), "price the link per port or per Gb/s, not both", "remove one")
        latency = (link["latency_ms"] / 1e3 if link["latency_ms"] is not None
                   else link["distance_km"] * FIBRE_US_PER_KM * 1e-6)
        links.append(WanLink(names.index(ends[0]), names.index(ends[1]), float(link["link_gbps"]), link["count"],
                             latency, link["distance_km"], float(link["loss"]), link["streams"], link["mss_bytes"],
                             link["usd_per_port"], link["usd_per_gbps"]))
    border = w["border_switch"]
    if border is not None and border not in catalog.switches:
        ctx.error(("wan", "border_switch"), f"unknown switch '{border}'", did_you_mean(border, catalog.switches))
    elif border is not None:
        fastest_port = catalog.switches[border].modes()[0].port_speed_gbps
        for link in links:
            if link.link_gbps > fastest_port:
                ctx.error(("wan", "border_switch"), f"{border}'s ports run at {fastest_port:g}G, slower than a "
                          f"{link.link_gbps:g}G WAN link", "choose a border switch with faster ports")
                break
    raw = w["sync"]
    scheme, every = (raw, None) if isinstance(raw, str) else (raw["scheme"], raw["every"])
    if every is not None and scheme not in DEFAULT_EVERY:
        ctx.error(("wan", "sync", "every"), f"{scheme} synchronises every step", "every applies to diloco and co2")
    sync = Sync(scheme, every or DEFAULT_EVERY.get(scheme, 1))
    if w["crossing"] == "pp" and sync.scheme != "sync":
        ctx.error(("wan", "sync"), f"{sync.scheme} changes how data parallelism synchronises, but crossing: pp "
                  "keeps data parallelism inside each site", "use sync: sync with crossing: pp")
    reached = _components(len(names), links)
    if len(set(reached)) > 1:
        lonely = [names[i] for i in range(len(names)) if reached[i] != reached[0]]
        ctx.error(("wan", "links"), f"site(s) {', '.join(lonely)} have no WAN path to {names[0]}",
                  "add a link between them")
    return Wan(tuple(links), border, w["crossing"], sync, float(w["target_utilization"]))


def _components(count: int, links) -> list:
    label = list(range(count))

    def find(i):
        while label[i] != i:
            i = label[i]
        return i

    for link in links:
        label[find(link.a)] = find(link.b)
    return [find(i) for i in range(count)]


def _placement(workload: Workload, crossing: str, gpus: list, names: list, ctx: Context) -> list:
    """Each site's parallel degrees; problems when the job cannot be cut at site boundaries."""
    d = workload.parallelism
    for index, col in enumerate(workload.collectives):
        if col.group in ("world", "dp" if crossing == "dp" else "pp"):
            ctx.error(("workload", "collectives", index, "group"), f"the {col.group} group crosses sites; "
                      "cross-site traffic is modelled as the training step's synchronisation",
                      "time this collective in one site's own design")
    if crossing == "dp":
        replica = d["tp"] * d["cp"] * d["pp"]
        out = []
        for index, g in enumerate(gpus):
            if g % replica:
                ctx.error(("sites", index, "cluster"), f"site {names[index]}'s {g:,} GPUs are not a whole number "
                          f"of model replicas of tp x cp x pp = {replica:,} GPUs",
                          "TP, CP and PP stay inside a site; size each site in whole replicas")
                continue
            dp = g // replica
            if dp % d["ep"]:
                ctx.error(("sites", index, "cluster"), f"site {names[index]} holds dp={dp} replicas, which "
                          f"ep={d['ep']} does not divide", "expert-parallel groups stay inside a site")
            out.append(dict(d, dp=dp))
        training = workload.training
        if training is not None and not ctx.problems:
            per_replica = training.global_batch // d["dp"]
            if per_replica % training.micro_batch:
                ctx.error(("workload", "training", "global_batch"), "the batch does not split into whole "
                          "micro-batches per site", "use a multiple of dp x micro_batch")
        return out
    sites = len(gpus)
    if len(set(gpus)) > 1:
        ctx.error(("sites",), "with crossing: pp every site holds the same stages of every replica, so the "
                  f"sites need equal GPU counts, not {', '.join(f'{g:,}' for g in gpus)}", "resize the sites")
    if d["pp"] % sites:
        ctx.error(("workload", "parallelism", "pp"), f"pp={d['pp']} does not split into {sites} sites' equal runs "
                  "of stages", f"use a multiple of {sites}")
    training = workload.training
    if training is not None and training.virtual_stages > 1:
        ctx.error(("workload", "training", "virtual_stages"), "interleaved chunks would cross the WAN "
                  f"{training.virtual_stages} times per micro-batch", "use virtual_stages: 1 with crossing: pp")
    return [dict(d, pp=d["pp"] // sites) for _ in gpus]


# --- the topology ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Border:
    """A site's border tier: switches, their ports toward the WAN and down to the site's top tier."""

    site: int
    switch: str
    count: int
    wan_ports: int
    down_links: int
    down_gbps: float


def borders(multi: MultiSiteDesign, topologies: list, catalog: Catalog) -> list:
    """Border switches per site, sized non-blocking: as much capacity down into the site as toward the WAN."""
    out = []
    for index, (site, topology) in enumerate(zip(multi.sites, topologies)):
        links = [l for l in multi.wan.links if index in (l.a, l.b)]
        wan_ports = sum(l.count for l in links)
        wan_gbps = sum(l.count * l.link_gbps for l in links)
        switch_id = multi.wan.border_switch or site.design.fabric.switch["leaf"]
        switch = catalog.switches[switch_id]
        top = _top_switches(topology)
        down_gbps = float(np.max(topology.capacity_gbps[np.isin(topology.dst, top)])) if top.size else 0.0
        down_links = math.ceil(wan_gbps / down_gbps) if down_gbps else 0
        capacity = switch.ports * switch.port_speed_gbps
        count = max(1, math.ceil((wan_gbps + down_links * down_gbps) / capacity))
        out.append(Border(index, switch_id, count, wan_ports, down_links, down_gbps))
    return out


def _top_switches(topology: Topology) -> np.ndarray:
    switch = topology.kind == KIND["switch"]
    if not switch.any():
        return np.zeros(0, np.int64)
    return np.flatnonzero(switch & (topology.tier == topology.tier[switch].max()))


def join(multi: MultiSiteDesign, topologies: list, border_list: list, catalog: Catalog) -> Topology:
    """One Topology: the sites' nodes and arcs in site order (site ``s``'s node ``i`` is
    ``offsets[s] + i``), then each site's border switches, then the border and WAN links.

    Border switch ``j`` of a site takes down-links ``j, j + count, ...`` to the site's top-tier switches in
    turn, and WAN links leave a site's borders in turn, so parallel links spread over the border switches.
    """
    models: list[str] = []
    node_cols = {name: [] for name in ("kind", "tier", "model", "server", "rail", "plane", "pod", "row", "col")}
    arc_cols = {name: [] for name in ("src", "dst", "capacity_gbps", "latency_ns", "medium", "link_tier")}
    blocks, offset, offsets = [], 0, []
    for site, topology in zip(multi.sites, topologies):
        remap = np.array([_index(models, m) for m in topology.models] + [-1], dtype=np.int16)
        for name in node_cols:
            column = getattr(topology, name)
            node_cols[name].append(remap[column] if name == "model" else column)
        for name in arc_cols:
            column = getattr(topology, name)
            arc_cols[name].append(column + offset if name in ("src", "dst") else column)
        blocks += [(offset + start, count, f"{site.name}/{label}") for start, count, label in topology.blocks]
        offsets.append(offset)
        offset += topology.num_nodes
    border_nodes = []
    for border, site in zip(border_list, multi.sites):
        ids = np.arange(offset, offset + border.count)
        border_nodes.append(ids)
        blocks.append((offset, border.count, f"{site.name}/border"))
        values = {"kind": KIND["switch"], "tier": BORDER_TIER, "model": _index(models, border.switch)}
        for name in node_cols:
            node_cols[name].append(np.full(border.count, values.get(name, -1), dtype=node_cols[name][0].dtype))
        offset += border.count

    def add(a, b, gbps, latency_ns, medium, tier):
        a, b = np.asarray(a, np.int32), np.asarray(b, np.int32)
        pair_src = np.empty(2 * a.size, np.int32)
        pair_src[0::2], pair_src[1::2] = a, b
        pair_dst = np.empty(2 * a.size, np.int32)
        pair_dst[0::2], pair_dst[1::2] = b, a
        arc_cols["src"].append(pair_src)
        arc_cols["dst"].append(pair_dst)
        arc_cols["capacity_gbps"].append(np.full(2 * a.size, gbps, np.float64))
        arc_cols["latency_ns"].append(np.full(2 * a.size, latency_ns, np.float32))
        arc_cols["medium"].append(np.full(2 * a.size, MEDIUM[medium], np.int8))
        arc_cols["link_tier"].append(np.full(2 * a.size, LINK_TIER[tier], np.int8))

    for border, topology, start, ids in zip(border_list, topologies, offsets, border_nodes):
        top = _top_switches(topology) + start
        j = np.arange(border.down_links)
        add(ids[j % border.count], top[j % top.size], border.down_gbps, 0.0, "optical", "border")
    used = [0] * len(multi.sites)
    for link in multi.wan.links:
        ends = []
        for site in (link.a, link.b):
            j = used[site] + np.arange(link.count)
            ends.append(border_nodes[site][j % border_list[site].count])
            used[site] += link.count
        add(ends[0], ends[1], link.goodput_gbps, link.latency_s * 1e9, "wan", "wan")
    nodes = {name: np.concatenate(cols) for name, cols in node_cols.items()}
    arcs = {name: np.concatenate(cols) for name, cols in arc_cols.items()}
    first = topologies[0].layout
    layout = Layout(family="multi-site", tiers=max(t.layout.tiers for t in topologies) + 1,
                    planes=max(t.layout.planes for t in topologies), gpus_per_server=first.gpus_per_server,
                    link_gbps=max(t.layout.link_gbps for t in topologies),
                    injection_gbps_per_gpu=min(t.layout.injection_gbps_per_gpu for t in topologies),
                    diameter_hops=diameter(multi, topologies),
                    warnings=tuple(f"{site.name}: {w}" for site, t in zip(multi.sites, topologies)
                                   for w in t.layout.warnings))
    return Topology(name=multi.name, models=tuple(models), layout=layout, blocks=tuple(blocks), **nodes, **arcs)


def _index(models: list, model_id: str) -> int:
    if model_id not in models:
        models.append(model_id)
    return models.index(model_id)


def wan_hops(multi: MultiSiteDesign) -> np.ndarray:
    """Fewest WAN links between every pair of sites (BFS over the site graph)."""
    count = len(multi.sites)
    hops = np.full((count, count), -1, np.int64)
    neighbours = {i: set() for i in range(count)}
    for link in multi.wan.links:
        neighbours[link.a].add(link.b)
        neighbours[link.b].add(link.a)
    for start in range(count):
        hops[start, start], frontier, depth = 0, [start], 0
        while frontier:
            depth += 1
            nxt = []
            for node in frontier:
                for other in neighbours[node]:
                    if hops[start, other] < 0:
                        hops[start, other] = depth
                        nxt.append(other)
            frontier = nxt
    return hops


def diameter(multi: MultiSiteDesign, topologies: list) -> int:
    """Network links on the longest GPU-to-GPU shortest path: inside a site its own diameter; across, up the
    site's tiers (one link per tier), into the border, over the WAN hops, and down the other site."""
    hops = wan_hops(multi)
    up = [t.layout.tiers for t in topologies]
    best = max(t.layout.diameter_hops for t in topologies)
    for a in range(len(up)):
        for b in range(a + 1, len(up)):
            best = max(best, up[a] + 1 + int(hops[a, b]) + 1 + up[b])
    return best


def border_bom(multi: MultiSiteDesign, border_list: list, catalog: Catalog) -> list:
    """Border switches, the optics of their links down into each site, and the WAN links' ports."""
    lines = []
    for switch_id, quantity in _sum_by(((b.switch, b.count) for b in border_list)).items():
        switch = catalog.switches[switch_id]
        lines.append(BomLine("switches", switch.id, "border", quantity, switch.price_usd, switch.power_w))
    for speed, ends in _sum_by(((b.down_gbps, 2 * b.down_links) for b in border_list)).items():
        optic = _cheapest_optic(catalog, speed, REACH_REQUIRED_M["cross-row"])
        if optic is not None and ends:
            lines.append(BomLine("transceivers", optic.id, "border", ends, optic.price_usd, optic.power_w))
    for index, link in enumerate(multi.wan.links):
        a, b = multi.sites[link.a].name, multi.sites[link.b].name
        item = f"wan-{a}-{b}-{link.link_gbps:g}g"
        if link.usd_per_gbps is not None:
            lines.append(BomLine("wan", item, "wan", link.count, link.usd_per_gbps * link.link_gbps, 0.0))
        else:
            lines.append(BomLine("wan", item, "wan", 2 * link.count, link.usd_per_port or 0.0, 0.0))
    return lines


def _sum_by(pairs) -> dict:
    out: dict = {}
    for key, value in pairs:
        out[key] = out.get(key, 0) + value
    return out


def _cheapest_optic(catalog: Catalog, gbps: float, reach_m: float):
    fits = [t for t in catalog.transceivers.values()
            if t.speed_gbps >= gbps and t.reach_m >= reach_m and t.drive == "dsp"]
    return min(fits, key=lambda t: (t.price_usd, t.id)) if fits else None


def combined_bom(multi: MultiSiteDesign, boms: list, border_list: list, catalog: Catalog) -> Bom:
    """The sites' bills of materials added line by line, plus the border tier and the WAN."""
    merged: dict = {}
    for bom in boms:
        for line in bom.lines:
            key = (line.category, line.item, line.tier)
            if key in merged:
                merged[key] = replace(merged[key], quantity=merged[key].quantity + line.quantity)
            else:
                merged[key] = line
    total = Bom(lines=list(merged.values()) + border_bom(multi, border_list, catalog),
                links=[link for bom in boms for link in bom.links], gpus=multi.gpus, servers=multi.servers)
    total.server_price_usd = sum(b.server_price_usd * b.servers for b in boms) / max(1, multi.servers)
    return total


# --- moving data across sites ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Exchange:
    """One cross-site transfer pattern at the design's WAN capacity: seconds = bandwidth_s / scale +
    latency_s when every WAN link is ``scale`` times as fast."""

    pattern: str                # ring | direct | hop
    bytes_per_site: float       # bytes each site sends
    bandwidth_s: float
    latency_s: float

    def time_s(self, scale: float = 1.0) -> float:
        return self.bandwidth_s / scale + self.latency_s


def _pair_capacity(multi: MultiSiteDesign):
    count = len(multi.sites)
    capacity = np.zeros((count, count))
    latency = np.zeros((count, count))
    for link in multi.wan.links:
        for a, b in ((link.a, link.b), (link.b, link.a)):
            capacity[a, b] += link.capacity_gbps
            latency[a, b] = max(float(latency[a, b]), link.latency_s)
    return capacity, latency


def route_sites(multi: MultiSiteDesign, demand: np.ndarray) -> tuple[float, float]:
    """Route a site-to-site byte matrix over the WAN: each demand split evenly over its fewest-hop paths.
    Returns (seconds until the busiest site pair's links drain, the largest path latency used)."""
    import networkx as nx

    capacity, latency = _pair_capacity(multi)
    graph = nx.Graph()
    graph.add_nodes_from(range(len(multi.sites)))
    graph.add_edges_from(zip(*np.nonzero(np.triu(capacity))))
    load = np.zeros_like(capacity)
    worst_latency = 0.0
    for s, t in zip(*np.nonzero(demand)):
        paths = list(nx.all_shortest_paths(graph, int(s), int(t)))
        for path in paths:
            hops = list(zip(path, path[1:]))
            for a, b in hops:
                load[a, b] += demand[s, t] / len(paths)
            worst_latency = max(worst_latency, float(sum(latency[a, b] for a, b in hops)))
    used = load > 0
    seconds = float((load[used] * 8 / (capacity[used] * 1e9)).max()) if used.any() else 0.0
    return seconds, worst_latency


def allreduce_exchange(multi: MultiSiteDesign, replica_bytes: float) -> Exchange:
    """All-reduce of one replica's ``replica_bytes`` between the sites (after each site reduced its own):
    reduce-scatter then all-gather, as a ring in site order or directly between every pair, the faster."""
    m = len(multi.sites)
    chunk = replica_bytes / m
    options = []
    ring = np.zeros((m, m))
    for s in range(m):
        ring[s, (s + 1) % m] = chunk
    bandwidth, latency = route_sites(multi, ring)
    steps = 2 * (m - 1)
    options.append(Exchange("ring", steps * chunk, steps * bandwidth, steps * latency))
    if m > 2:
        direct = np.full((m, m), chunk)
        np.fill_diagonal(direct, 0.0)
        bandwidth, latency = route_sites(multi, direct)
        options.append(Exchange("direct", 2 * (m - 1) * chunk, 2 * bandwidth, 2 * latency))
    return min(options, key=lambda e: e.time_s())


def boundary_exchange(multi: MultiSiteDesign, transfer_bytes: float) -> Exchange:
    """One pipeline send across every site boundary at once (site ``s``'s last stage to site ``s + 1``'s
    first, ``transfer_bytes`` summed over the replicas), the slower direction."""
    m = len(multi.sites)
    forward, backward = np.zeros((m, m)), np.zeros((m, m))
    for s in range(m - 1):
        forward[s, s + 1] = backward[s + 1, s] = transfer_bytes
    times = [route_sites(multi, demand) for demand in (forward, backward)]
    bandwidth, latency = max(times, key=lambda t: t[0] + t[1])
    return Exchange("hop", transfer_bytes, bandwidth, latency)


def exposed_wan_s(sync: Sync, wan_s: float, local_step_s: float, compute_mb_s: float) -> float:
    """The seconds per step a cross-site synchronisation of ``wan_s`` adds to a step of ``local_step_s``."""
    if sync.scheme == "sync":
        return wan_s
    if sync.scheme == "overlap":
        # bucketed reduction under the last micro-batch's backward (2/3 of it), as dp-overlap hides the in-site
        # part: the two stages of a bucket pipeline on different links (fabric, WAN), so both get the window
        return max(0.0, wan_s - 2 / 3 * compute_mb_s)
    if sync.scheme == "diloco":    # a blocking outer all-reduce every H steps
        return wan_s / sync.every
    return max(0.0, wan_s - sync.every * local_step_s) / sync.every   # co2: async under the next tau steps


def replica_gradient_bytes(training) -> float:
    """Bytes of one model replica's gradients: what each site all-reduces with the others."""
    from .training import counts

    return counts(training.model).total * training.gradient_bytes


def boundary_bytes(training, degrees: dict) -> float:
    """Activation bytes one micro-batch moves across a stage boundary, summed over the data-parallel
    replicas (every replica's boundary send runs at once)."""
    arch = training.model
    per_replica = training.micro_batch * arch.seq_len * arch.hidden * training.activation_bytes
    if not training.sequence_parallel:
        per_replica *= degrees["tp"]
    return per_replica * degrees["dp"]


# --- the pipeline ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Requirement:
    """For one synchronisation scheme: the step's utilisation (its speed with a free WAN over its speed)
    at the design's WAN, and the total WAN Gb/s it needs for each level (None: latency alone misses it)."""

    sync: Sync
    utilization: float
    needed_gbps: dict           # level -> Gb/s or None


@dataclass
class CrossSite:
    crossing: str
    sync: Sync
    exchange: Exchange          # dp: one all-reduce between sites; pp: one boundary send
    local_step_s: float         # the step with a free WAN (the slowest site's)
    compute_mb_s: float
    wan_s: float                # one exchange at the design's WAN
    exposed_s: float            # what the step sees of it, per step
    wan_gbps: float             # total WAN capacity (goodput) of the design

    @property
    def utilization(self) -> float:
        return self.local_step_s / (self.local_step_s + self.exposed_s)


@dataclass
class SitesEvaluation:
    design: MultiSiteDesign
    topology: Topology
    bom: Bom
    sites: list                 # pipeline.Evaluation per site
    borders: list
    training: object            # training.Step of the whole job
    price: object
    cross: CrossSite
    requirements: list
    curve: object               # (wan_gbps array, {scheme label: utilisation array})
    bisection: object


def build(multi: MultiSiteDesign, catalog: Catalog):
    """Site topologies and BOMs, the border tier, the joined topology and the whole bill of materials."""
    from .pipeline import build as build_site

    built = _per_distinct_site(multi, lambda site: build_site(site.design, catalog))
    topologies = [t for t, _ in built]
    border_list = borders(multi, topologies, catalog)
    joined = join(multi, topologies, border_list, catalog)
    return built, border_list, joined, combined_bom(multi, [b for _, b in built], border_list, catalog)


def _per_distinct_site(multi: MultiSiteDesign, work) -> list:
    """``work(site)`` for every site, once per distinct (cluster, fabric, workload): equal sites share it."""
    done: list = []
    out = []
    for site in multi.sites:
        key = (site.design.cluster, site.design.fabric, site.design.workload)
        for other_key, result in done:
            if other_key == key:
                out.append(result)
                break
        else:
            result = work(site)
            done.append((key, result))
            out.append(result)
    return out


def evaluate(multi: MultiSiteDesign, catalog: Catalog, progress=None) -> SitesEvaluation:
    """Every stage for a multi-site design: each site's own report and step, the WAN's part of the step and
    the bandwidth the schemes need."""
    from . import training as step_model
    from .flow.bisection import Bisection
    from .pipeline import evaluate as evaluate_site

    built, border_list, joined, bom = build(multi, catalog)
    by_site = dict(zip((s.name for s in multi.sites), built))
    evaluations = _per_distinct_site(
        multi, lambda site: evaluate_site(site.design, catalog, built=by_site[site.name], progress=progress))
    training = multi.workload.training
    wan_gbps = sum(link.capacity_gbps for link in multi.wan.links)
    if multi.wan.crossing == "dp":
        steps = [e.training for e in evaluations]
        slowest = max(steps, key=lambda s: s.step_s)
        exchange = allreduce_exchange(multi, replica_gradient_bytes(training))
        compute_mb = slowest.compute_s / slowest.microbatches

        def step_at(scale: float, sync: Sync) -> float:
            return slowest.step_s + exposed_wan_s(sync, exchange.time_s(scale), slowest.step_s, compute_mb)

        local = slowest.step_s
        step = _combined_step(steps, slowest, step_at(1.0, multi.wan.sync) - local, exchange.time_s())
        schemes = [Sync("sync"), Sync("overlap"),
                   multi.wan.sync if multi.wan.sync.scheme == "diloco" else Sync("diloco", DEFAULT_EVERY["diloco"]),
                   multi.wan.sync if multi.wan.sync.scheme == "co2" else Sync("co2", DEFAULT_EVERY["co2"])]
    else:
        degrees = multi.workload.parallelism
        exchange = boundary_exchange(multi, boundary_bytes(training, degrees))
        traffic = step_model.step_traffic(training, degrees)
        site_times = []
        for site, (topology, _bom) in zip(multi.sites, built):
            routed = [t for t in traffic if not (t.cls == "pp" and site.design.workload.parallelism["pp"] == 1)]
            timed = step_model.time_traffic(topology, site.design, catalog, routed)
            gpu = step_model.gpu_of(catalog, catalog.servers[site.design.cluster.server])
            site_times.append((gpu, {t: timed[t][0] if t in timed else 0.0 for t in traffic},
                               [(t, s, label) for t, (s, label) in timed.items()]))

        def pp_step(scale: float | None):
            out = []
            for gpu, times, _labels in site_times:
                hop = 0.0 if scale is None else exchange.time_s(scale)
                shifted = {t: max(s, hop) if t.cls == "pp" else s for t, s in times.items()}
                out.append(step_model.step_time(training, degrees, gpu, shifted, multi.gpus))
            return max(out, key=lambda s: s.step_s)

        local_step = pp_step(None)
        local = local_step.step_s
        step = pp_step(1.0)
        step.collectives = site_times[0][2]
        step.exposed_s = dict(step.exposed_s, wan=step.step_s - local)
        step.unoverlapped_s = dict(step.unoverlapped_s, wan=step.step_s - local)
        compute_mb = step.compute_s / step.microbatches

        def step_at(scale: float, sync: Sync) -> float:
            return pp_step(scale).step_s

        schemes = [Sync("sync")]
    cross = CrossSite(multi.wan.crossing, multi.wan.sync, exchange, local, compute_mb, exchange.time_s(),
                      step.step_s - local, wan_gbps)
    levels = sorted(set(UTILIZATION_LEVELS) | {multi.wan.target_utilization})
    requirements = [Requirement(s, local / step_at(1.0, s),
                                {u: _needed_gbps(lambda scale, s=s: local / step_at(scale, s), u, wan_gbps)
                                 for u in levels}) for s in schemes]
    axis = wan_gbps * np.logspace(-3, 3, 61)
    curve = (axis, {s.label: np.array([local / step_at(g / wan_gbps, s) for g in axis]) for s in schemes})
    capital = sum(catalog.servers[s.design.cluster.server].price_usd * s.design.cluster.servers
                  for s in multi.sites) + bom.total_usd
    server_power = sum(catalog.servers[s.design.cluster.server].power_w * s.design.cluster.servers
                       for s in multi.sites)
    price = step_model.price_of(capital, server_power + bom.power_w, training.economics)
    cut = min(_wan_cut(multi), sum(e.bisection.gbps for e in evaluations))
    bisection = Bisection(gbps=cut, method="structural: the WAN cut between sites (upper bound)",
                          permutation_note="not computed across sites")
    return SitesEvaluation(multi, joined, bom, evaluations, border_list, step, price, cross, requirements, curve,
                           bisection)


def _combined_step(steps: list, slowest, exposed_wan: float, wan_s: float):
    """The whole job's step: the slowest site's parts, the WAN's exposed part, and FLOPs and tokens summed
    over the sites (MFU against every site's peak)."""
    step_s = slowest.step_s + exposed_wan
    peaks = sum(s.model_flops / (s.mfu * s.step_s) for s in steps)
    model_flops = sum(s.model_flops for s in steps)
    hardware = sum(s.hardware_flops for s in steps)
    return replace(slowest, step_s=step_s, model_flops=model_flops, hardware_flops=hardware,
                   tokens=sum(s.tokens for s in steps), gpus=sum(s.gpus for s in steps),
                   mfu=model_flops / step_s / peaks, hfu=hardware / step_s / peaks,
                   exposed_s=dict(slowest.exposed_s, wan=exposed_wan),
                   unoverlapped_s=dict(slowest.unoverlapped_s, wan=wan_s))


def _needed_gbps(utilization_at, level: float, wan_gbps: float) -> float | None:
    """The least total WAN Gb/s at which ``utilization_at(scale)`` (non-decreasing in the scale of every
    link's capacity) reaches ``level``; None when even an infinitely fast WAN (latency only) falls short."""
    if utilization_at(1e12) < level:
        return None
    low, high = 1e-12, 1e12
    if utilization_at(low) >= level:
        return low * wan_gbps
    for _ in range(200):
        mid = math.sqrt(low * high)
        if utilization_at(mid) >= level:
            high = mid
        else:
            low = mid
        if high / low < 1 + 1e-9:
            break
    return high * wan_gbps


def _wan_cut(multi: MultiSiteDesign) -> float:
    """Gb/s across the smallest cut that splits the sites into two groups of as equal GPU counts as the
    sites allow (every split tried: a planner's site count is small)."""
    count = len(multi.sites)
    gpus = [s.design.gpus for s in multi.sites]
    total = sum(gpus)
    best_balance, best_cut = None, math.inf
    for mask in range(1, 2 ** (count - 1)):
        side = [(mask >> i) & 1 for i in range(count)]
        balance = abs(total - 2 * sum(g for g, s in zip(gpus, side) if s))
        cut = sum(l.capacity_gbps for l in multi.wan.links if side[l.a] != side[l.b])
        if best_balance is None or balance < best_balance or (balance == best_balance and cut < best_cut):
            best_balance, best_cut = balance, cut
    return best_cut
