"""Design spaces: the YAML that lists what to try, validated like a design spec.

A space is the product of its lists (GPU counts, servers, topologies, switches, oversubscription ratios,
planes); every combination becomes one candidate design spec, which the normal validator and pipeline
then judge. ``dp`` is derived per GPU count from the other parallel degrees.

RailX candidates have no switches, ratios or planes: they are the product of GPU counts, the ``railx``
block's servers (chip nodes) and optical circuit switches, each on the squarest grid of its nodes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from .. import sites as _sites
from .. import yamlio
from ..catalog import Catalog
from ..errors import SpecError, did_you_mean
from ..reliability import RATE_SETS
from ..schema import Bool, Context, Dict, Enum, Int, Key, List, Map, Num, Obj, Str, has_missing
from ..spec import COLLECTIVE, DEFAULT_CABLING, MODEL, REACH_CLASSES, TIER_NAMES, TRAINING

# what a training space may rank by, and which way is better
RANK_BY = {"step_time_s": "lower", "mfu": "higher", "tokens_per_s_per_musd": "higher", "usd_per_mtok": "lower"}
MAX_LAYOUTS = 256

SEARCHABLE = ("fat-tree", "rail-optimized", "rail-only", "railx")

SPACE_SCHEMA = Obj({
    "name": Key(Str(kebab=True, doc="space name, kebab-case"), True),
    "description": Key(Str(), False, ""),
    "gpus": Key(List(Int(minimum=1, maximum=4_194_304), min_items=1), True),
    "servers": Key(List(Str(kebab=True), min_items=1), True),
    "topologies": Key(List(Enum(SEARCHABLE, doc="fabric family"), min_items=1), True),
    "switches": Key(List(Str(kebab=True), min_items=1), True),
    "oversubscription": Key(List(Num(minimum=1), min_items=1), False, [1]),
    "planes": Key(List(Int(minimum=1, maximum=8), min_items=1), False, [1]),
    "scalable_unit": Key(Int(minimum=1), False),
    "sizing": Key(Obj({
        "fat_tree": Key(Bool(), False, False),
    }, doc="CP-SAT sizing: one more fat-tree candidate per GPU count, server, ratio and planes, whose switch "
           "model per tier (from switches) and uplinks per leaf cost least"), False),
    "railx": Key(Obj({
        "servers": Key(List(Str(kebab=True), min_items=1), True),
        "ocs": Key(List(Str(kebab=True), min_items=1), True),
    }, doc="RailX candidates: chip-node servers and optical circuit switches to try"), False),
    "workload": Key(Obj({
        "parallelism": Key(Map(("tp", "cp", "pp", "ep"), Int(minimum=1)), False),
        "collectives": Key(List(COLLECTIVE, min_items=1), False),
    }), True),
    "training": Key(Obj({
        "model": Key(MODEL, True),
        "settings": Key(TRAINING, True),
        "layouts": Key(List(Map(("tp", "cp", "pp", "ep"), Int(minimum=1, maximum=1_000_000)), min_items=1,
                            doc="parallel layouts to try on every fabric (dp follows the GPU count)"), False),
        "rank_by": Key(Enum(tuple(RANK_BY), doc="what the ranking sorts by"), False, "usd_per_mtok"),
    }, doc="train a model on every candidate (the training-step model) and rank by it; with layouts, each "
           "fabric is tried with each layout and the best layout per fabric reported"), False),
    "constraints": Key(Obj({
        "max_cost_per_gpu_usd": Key(Num(exclusive_minimum=0), False),
        "max_power_per_gpu_w": Key(Num(exclusive_minimum=0), False),
        "max_tiers": Key(Int(minimum=1, maximum=3), False),
        "max_diameter_hops": Key(Int(minimum=1), False),
        "max_cable_reach": Key(Enum(REACH_CLASSES, doc="the longest reach class any link tier may need"), False),
    }), False),
    "cabling": Key(Map(TIER_NAMES + ("ocs",), Enum(REACH_CLASSES)), False),
    "objective": Key(Obj({"weights": Key(Dict(Num(minimum=0)), False)}), False),
    "resilience": Key(Obj({
        "rates": Key(List(Enum(tuple(RATE_SETS), doc="published failure-rate set")), False,
                     ["llama3-non-network", "hpn-network"]),
        "checkpoint_s": Key(Num(exclusive_minimum=0, maximum=1e7, doc="seconds to write a checkpoint"), False, 100),
        "restart_s": Key(Num(minimum=0, maximum=1e7, doc="seconds from an interruption to training again"), False,
                         600),
    }, doc="rank the feasible candidates by goodput-adjusted throughput per dollar: interruptions from these "
           "rates (NIC-link and ToR failures only where they stop the job), goodput at Daly's checkpoint "
           "interval"), False),
    "sites": Key(Obj({
        "counts": Key(List(Int(minimum=1, maximum=16, doc="sites the GPUs are split over (1: one site)"),
                           min_items=1), True),
        "wan_gbps": Key(List(Num(exclusive_minimum=0, maximum=1e9, doc="Gb/s between every pair of sites"),
                             min_items=1), True),
        "link_gbps": Key(Num(exclusive_minimum=0, maximum=1e6, doc="line rate of one WAN link"), False, 400),
        "distance_km": Key(Num(minimum=0, maximum=40_000, doc="between every pair of sites"), True),
        "usd_per_port": Key(Num(minimum=0, maximum=1e9), False),
        "crossing": Key(Enum(("dp", "pp")), False, "dp"),
        "sync": Key(List(_sites.SYNC, min_items=1), False, ["sync"]),
    }, doc="multi-site candidates: the GPUs split evenly over each count of sites (every site with the "
           "candidate's fabric), the sites joined pairwise by WAN links of each capacity, each sync scheme"),
        False),
}, doc="topoplan design space")


@dataclass(frozen=True)
class Space:
    name: str
    description: str
    axes: dict          # gpus, servers, topologies, switches, oversubscription, planes
    scalable_unit: int | None
    railx: dict         # servers, ocs (empty without RailX candidates)
    cabling: dict       # reach class per link tier, given to every candidate (empty: the spec's defaults)
    size_fat_tree: bool  # add a CP-SAT sized fat-tree candidate per GPU count, server, ratio and planes
    chips_per_server: dict
    parallelism: dict
    collectives: list   # raw collective mappings, as written
    constraints: dict
    weights: dict
    file: str
    resilience: dict | None = None  # rates, checkpoint_s, restart_s: rank by goodput-adjusted throughput per dollar
    training: dict | None = None    # model, settings (raw spec data), layouts, rank_by
    sites: dict | None = None       # counts, wan_gbps, link_gbps, distance_km, usd_per_port, crossing, sync


def load_space(file: str, catalog: Catalog) -> Space:
    data, lines = yamlio.read(file)
    ctx = Context(str(file), lines)
    if data is None:
        ctx.error((), "the space is empty", "start from docs/optimize.md")
        raise SpecError(ctx.problems)
    checked = SPACE_SCHEMA.check(data, (), ctx)
    if not ctx.problems and not has_missing(checked):
        lists = [(("servers",), checked["servers"], "server", catalog.servers),
                 (("switches",), checked["switches"], "switch", catalog.switches)]
        if checked["railx"]:
            lists += [(("railx", "servers"), checked["railx"]["servers"], "server", catalog.servers),
                      (("railx", "ocs"), checked["railx"]["ocs"], "optical circuit switch", catalog.ocs)]
        elif "railx" in checked["topologies"]:
            ctx.error(("topologies",), "RailX candidates need a 'railx' block with chip-node servers and OCS models",
                      "add railx: {servers: [railx-node-8], ocs: [polatis-7000-384]}")
        for path, entries, what, section in lists:
            for index, entry in enumerate(entries):
                if entry not in section:
                    ctx.error(path + (index,), f"unknown {what} '{entry}'", did_you_mean(entry, section))
        if checked["sites"] and not checked["training"]:
            ctx.error(("sites",), "multi-site candidates need a training block: what crosses the WAN is the "
                      "step's synchronisation", "add training: {model: ..., settings: {global_batch: ...}}")
        if not data["workload"].get("collectives") and not checked["training"]:
            ctx.error(("workload",), "a space needs workload.collectives or a training block (or both)",
                      "add collectives to time, or training: {model: ..., settings: {global_batch: ...}}")
        layouts = (checked["training"] or {}).get("layouts") or []
        if len(layouts) > MAX_LAYOUTS:
            ctx.error(("training", "layouts"), f"{len(layouts)} layouts; at most {MAX_LAYOUTS}", "split the space")
        names = [c["name"] for c in data["workload"].get("collectives") or []]
        for name in (checked["objective"] or {}).get("weights") or {}:
            if name not in names:
                ctx.error(("objective", "weights", name), f"no collective named '{name}'",
                          "weights name collectives of the workload")
    if ctx.problems:
        raise SpecError(ctx.problems)
    axes = {k: checked[k] for k in ("gpus", "servers", "topologies", "switches", "oversubscription", "planes")}
    railx = checked["railx"] or {}
    servers = set(checked["servers"]) | set(railx.get("servers", []))
    return Space(checked["name"], checked["description"], axes, checked["scalable_unit"], railx,
                 {k: v for k, v in (checked["cabling"] or {}).items() if v is not None},
                 bool((checked["sizing"] or {}).get("fat_tree")),
                 {s: catalog.servers[s].gpus for s in sorted(servers)},
                 checked["workload"]["parallelism"] or {}, data["workload"].get("collectives") or [],
                 {k: v for k, v in (checked["constraints"] or {}).items() if v is not None},
                 (checked["objective"] or {}).get("weights") or {}, str(file),
                 None if checked["resilience"] is None else {
                     "rates": tuple(dict.fromkeys(checked["resilience"]["rates"])),
                     "checkpoint_s": float(checked["resilience"]["checkpoint_s"]),
                     "restart_s": float(checked["resilience"]["restart_s"])},
                 None if checked["training"] is None else {
                     "model": data["training"]["model"], "settings": data["training"]["settings"],
                     "layouts": checked["training"]["layouts"] or [None], "rank_by": checked["training"]["rank_by"]},
                 None if checked["sites"] is None else {**checked["sites"], "sync": data["sites"].get("sync", ["sync"])})


def _parallelism(space: Space, gpus: int, layout: dict | None = None) -> dict:
    given = layout if layout is not None else space.parallelism
    others = 1
    for dim in ("tp", "cp", "pp"):  # ep is carved out of dp, not multiplied in
        others *= given.get(dim, 1)
    parallelism = {k: v for k, v in given.items() if k != "ep"}
    if gpus % others == 0:  # otherwise the validator says why the degrees do not fit
        parallelism["dp"] = gpus // others
    if "ep" in given:
        parallelism["ep"] = given["ep"]
    return parallelism


def layout_label(layout: dict | None) -> str:
    return "".join(f"{d}{layout[d]}" for d in ("tp", "cp", "pp", "ep") if layout and d in layout) or "as-given"


def _sizing_tiers(space: Space) -> int:
    """The most tiers sizing may use: the constraint's, and no tier whose links need a longer reach than
    ``max_cable_reach`` allows (link tier t joins switch tier t - 1 to t)."""
    tiers = space.constraints.get("max_tiers", 3)
    limit = space.constraints.get("max_cable_reach")
    if limit is not None:
        reach = {**DEFAULT_CABLING, **space.cabling}
        for count, tier in enumerate(TIER_NAMES[1:], start=1):
            if REACH_CLASSES.index(reach[tier]) > REACH_CLASSES.index(limit):
                return min(tiers, count)
    return tiers


def squarest_grid(nodes: int) -> tuple[int, int]:
    """(columns, rows) with columns * rows = nodes and rows the largest divisor not above the root."""
    rows = max(d for d in range(1, math.isqrt(max(nodes, 1)) + 1) if nodes % d == 0) if nodes else 1
    return max(nodes, 1) // rows, rows


def candidate_specs(space: Space):
    """Every combination as (name, spec data, sizing), in a fixed order. ``sizing`` is None, or what the
    CP-SAT sizing of a fat-tree candidate needs (``optimize/sizing.py``); the search fills the spec in."""
    axes = space.axes

    def one(name, gpus, server, fabric, sizing, layout):
        if space.cabling:
            fabric = {**fabric, "cabling": dict(space.cabling)}
        workload = {"parallelism": _parallelism(space, gpus, layout)}
        if space.collectives:
            workload["collectives"] = [dict(c) for c in space.collectives]
        if space.training is not None:
            workload["model"] = space.training["model"]
            workload["training"] = dict(space.training["settings"])
        return name, {
            "name": name,
            "description": f"candidate of design space {space.name}",
            "cluster": {"server": server, "gpus": gpus},
            "fabric": fabric,
            "workload": workload,
            "routing": "ecmp",
        }, sizing

    def spec(name, gpus, server, fabric, sizing=None):
        if space.training is None or space.training["layouts"] == [None]:
            made = [one(name, gpus, server, fabric, sizing, None)]
        else:
            made = [one(f"{name}-{layout_label(layout)}", gpus, server, fabric, sizing, layout)
                    for layout in space.training["layouts"]]
        return made if space.sites is None else [split for candidate in made for split in over_sites(*candidate)]

    def over_sites(name, data, sizing):
        """A candidate as is (one site) and split over each count of sites, WAN capacity and sync scheme."""
        for count in space.sites["counts"]:
            if count == 1:
                yield name, data, sizing
                continue
            for wan_gbps, sync in itertools.product(space.sites["wan_gbps"], space.sites["sync"]):
                yield (*multi_site(name, data, count, wan_gbps, sync), sizing)

    def multi_site(name, data, count, wan_gbps, sync):
        label = sync if isinstance(sync, str) else f"{sync['scheme']}{sync.get('every', '')}"
        name = f"{name}-s{count}-w{wan_gbps:g}-{label}".replace(".", "_")
        per_site = data["cluster"]["gpus"] // count   # a split that is not whole: the validator says why
        names = [f"site-{i + 1}" for i in range(count)]
        link = {"link_gbps": space.sites["link_gbps"], "count": max(1, math.ceil(wan_gbps / space.sites["link_gbps"])),
                "distance_km": space.sites["distance_km"]}
        if space.sites.get("usd_per_port") is not None:
            link["usd_per_port"] = space.sites["usd_per_port"]
        return name, {
            "name": name, "description": data["description"] + f", over {count} sites",
            "sites": [{"name": n, "cluster": {**data["cluster"], "gpus": per_site}, "fabric": dict(data["fabric"])}
                      for n in names],
            "wan": {"links": [{"between": [a, b], **link} for a, b in itertools.combinations(names, 2)],
                    "crossing": space.sites["crossing"], "sync": sync},
            "workload": data["workload"], "routing": data["routing"],
        }

    for gpus in axes["gpus"]:
        for server, topology, switch, ratio, planes in itertools.product(
                axes["servers"], [t for t in axes["topologies"] if t != "railx"], axes["switches"],
                axes["oversubscription"], axes["planes"]):
            name = f"{topology}-{server}-{switch}-{gpus}-o{ratio:g}-p{planes}".replace(".", "p")
            fabric = {"topology": topology, "switch": switch, "oversubscription": ratio, "planes": planes}
            if space.scalable_unit and topology != "fat-tree":
                fabric["scalable_unit"] = space.scalable_unit
            yield from spec(name, gpus, server, fabric)
        if space.size_fat_tree and "fat-tree" in axes["topologies"]:
            for server, ratio, planes in itertools.product(axes["servers"], axes["oversubscription"], axes["planes"]):
                name = f"fat-tree-{server}-sized-{gpus}-o{ratio:g}-p{planes}".replace(".", "p")
                sizing = {"switches": list(axes["switches"]), "max_ratio": ratio,
                          "max_tiers": _sizing_tiers(space), "cabling": dict(space.cabling)}
                yield from spec(name, gpus, server, {"topology": "fat-tree", "planes": planes}, sizing)
        if "railx" in axes["topologies"]:
            for server, ocs in itertools.product(space.railx["servers"], space.railx["ocs"]):
                # a count that is not whole nodes gets the grid below it; the validator says why it fails
                columns, rows = squarest_grid(gpus // space.chips_per_server[server])
                fabric = {"topology": "railx", "railx": {"columns": columns, "rows": rows, "ocs": ocs}}
                yield from spec(f"railx-{server}-{ocs}-{gpus}", gpus, server, fabric)
