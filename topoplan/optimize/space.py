"""Design spaces: the YAML that lists what to try, validated like a design spec.

A space is the product of its lists (GPU counts, servers, topologies, switches, oversubscription ratios,
planes); every combination becomes one candidate design spec, which the normal validator and pipeline
then judge. ``dp`` is derived per GPU count from the other parallel degrees.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from .. import yamlio
from ..catalog import Catalog
from ..errors import SpecError
from ..schema import Context, Dict, Enum, Int, Key, List, Map, Num, Obj, Str, has_missing
from ..spec import COLLECTIVE

SEARCHABLE = ("fat-tree", "rail-optimized", "rail-only")

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
    "workload": Key(Obj({
        "parallelism": Key(Map(("tp", "cp", "pp", "ep"), Int(minimum=1)), False),
        "collectives": Key(List(COLLECTIVE, min_items=1), True),
    }), True),
    "constraints": Key(Obj({
        "max_cost_per_gpu_usd": Key(Num(exclusive_minimum=0), False),
        "max_power_per_gpu_w": Key(Num(exclusive_minimum=0), False),
        "max_tiers": Key(Int(minimum=1, maximum=3), False),
        "max_diameter_hops": Key(Int(minimum=1), False),
    }), False),
    "objective": Key(Obj({"weights": Key(Dict(Num(minimum=0)), False)}), False),
}, doc="topoplan design space")


@dataclass(frozen=True)
class Space:
    name: str
    description: str
    axes: dict          # gpus, servers, topologies, switches, oversubscription, planes
    scalable_unit: int | None
    parallelism: dict
    collectives: list   # raw collective mappings, as written
    constraints: dict
    weights: dict
    file: str


def load_space(file: str, catalog: Catalog) -> Space:
    data, lines = yamlio.read(file)
    ctx = Context(str(file), lines)
    if data is None:
        ctx.error((), "the space is empty", "start from docs/optimize.md")
        raise SpecError(ctx.problems)
    checked = SPACE_SCHEMA.check(data, (), ctx)
    if not ctx.problems and not has_missing(checked):
        for key, section in (("servers", catalog.servers), ("switches", catalog.switches)):
            for index, entry in enumerate(checked[key]):
                if entry not in section:
                    from ..errors import did_you_mean

                    ctx.error((key, index), f"unknown {key[:-1]} '{entry}'", did_you_mean(entry, section))
        names = [c["name"] for c in data["workload"]["collectives"]]
        for name in (checked["objective"] or {}).get("weights") or {}:
            if name not in names:
                ctx.error(("objective", "weights", name), f"no collective named '{name}'",
                          "weights name collectives of the workload")
    if ctx.problems:
        raise SpecError(ctx.problems)
    axes = {k: checked[k] for k in ("gpus", "servers", "topologies", "switches", "oversubscription", "planes")}
    return Space(checked["name"], checked["description"], axes, checked["scalable_unit"],
                 checked["workload"]["parallelism"] or {}, data["workload"]["collectives"],
                 {k: v for k, v in (checked["constraints"] or {}).items() if v is not None},
                 (checked["objective"] or {}).get("weights") or {}, str(file))


def candidate_specs(space: Space):
    """Every combination as (name, spec data), in a fixed order."""
    axes = space.axes
    for gpus, server, topology, switch, ratio, planes in itertools.product(
            axes["gpus"], axes["servers"], axes["topologies"], axes["switches"], axes["oversubscription"],
            axes["planes"]):
        name = f"{topology}-{server}-{switch}-{gpus}-o{ratio:g}-p{planes}".replace(".", "_")
        fabric = {"topology": topology, "switch": switch, "oversubscription": ratio, "planes": planes}
        if space.scalable_unit and topology != "fat-tree":
            fabric["scalable_unit"] = space.scalable_unit
        others = 1
        for dim in ("tp", "cp", "pp"):  # ep is carved out of dp, not multiplied in
            others *= space.parallelism.get(dim, 1)
        parallelism = {k: v for k, v in space.parallelism.items() if k != "ep"}
        if gpus % others == 0:  # otherwise the validator says why the degrees do not fit
            parallelism["dp"] = gpus // others
        if "ep" in space.parallelism:
            parallelism["ep"] = space.parallelism["ep"]
        yield name, {
            "name": name,
            "description": f"candidate of design space {space.name}",
            "cluster": {"server": server, "gpus": gpus},
            "fabric": fabric,
            "workload": {"parallelism": parallelism, "collectives": [dict(c) for c in space.collectives]},
            "routing": "ecmp",
        }
