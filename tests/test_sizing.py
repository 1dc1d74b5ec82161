"""CP-SAT sizing against a brute force over every choice, and its prices against the bill of materials."""

from __future__ import annotations

import itertools
import json

import pytest
import yaml
from click.testing import CliRunner

from topoplan.cli import main
from topoplan.cost import bill_of_materials
from topoplan.errors import Refused
from topoplan.generators import generate
from topoplan.optimize.sizing import plan_cost, size_cheapest, size_fat_tree
from topoplan.spec import design_from_data

CASES = [  # gpus, server, planes, switches, ratio, tiers
    (1024, "dgx-h100", 1, ["nvidia-qm9700", "generic-48x400g"], 1.0, 2),
    (1024, "dgx-h100", 1, ["nvidia-qm9700", "generic-48x400g"], 3.0, 2),
    (4096, "dgx-h100", 1, ["nvidia-qm9700", "generic-48x400g"], 3.0, 3),
    (8192, "hgx-b300", 2, ["nvidia-sn5600", "broadcom-th6-64x1600g"], 2.0, 2),
]


def _brute_force(catalog, gpus, server, planes, switches, ratio, tiers):
    """Every model per tier and every uplink count the ratio allows, priced without a solver."""
    best = None
    for models in itertools.product(switches, repeat=tiers):
        chosen = dict(zip(("leaf", "spine", "core"), models))
        radix = catalog.switches[models[0]].radix_at(400)[0]
        for up in range(1, radix):
            if radix - up > ratio * up:
                continue
            try:
                cost, _plan = plan_cost(catalog, server, gpus, planes, chosen, tiers, up)
            except ValueError:
                continue
            best = cost if best is None else min(best, cost)
    return best


def _build(catalog, gpus, server, planes, sized, cabling=None):
    fabric = {"topology": "fat-tree", "switch": sized.models, "tiers": sized.tiers, "leaf_uplinks": sized.leaf_uplinks,
              "planes": planes, **({"cabling": cabling} if cabling else {})}
    design = design_from_data({"name": "sized", "cluster": {"server": server, "gpus": gpus}, "fabric": fabric},
                              catalog)
    topology = generate(design, catalog)
    return topology, bill_of_materials(topology, design, catalog)


@pytest.mark.parametrize("gpus,server,planes,switches,ratio,tiers", CASES)
def test_cp_sat_finds_the_brute_force_optimum(catalog, gpus, server, planes, switches, ratio, tiers):
    sized = size_fat_tree(catalog, server, gpus, planes, switches, ratio, tiers)
    assert sized.cost_usd == _brute_force(catalog, gpus, server, planes, switches, ratio, tiers)
    assert sized.leaf_downlinks <= ratio * sized.leaf_uplinks


@pytest.mark.parametrize("cabling", [None, {"leaf": "in-rack", "core": "in-row"}])
@pytest.mark.parametrize("gpus,server,planes,switches,ratio,tiers", CASES)
def test_sized_cost_and_counts_are_the_generated_designs(catalog, gpus, server, planes, switches, ratio, tiers,
                                                         cabling):
    sized = size_fat_tree(catalog, server, gpus, planes, switches, ratio, tiers, cabling)
    topology, bom = _build(catalog, gpus, server, planes, sized, cabling)
    assert bom.total_usd == pytest.approx(sized.cost_usd, abs=0.005)  # to the cent
    by_tier = topology.switches_by_tier()
    assert by_tier["leaf"] == planes * sized.leaves and by_tier["spine"] == planes * sized.spines
    assert by_tier.get("core", 0) == planes * sized.cores


def test_sizing_mixes_models_when_that_is_cheaper(catalog):
    sized = size_fat_tree(catalog, "dgx-h100", 1024, 1, ["nvidia-qm9700", "generic-48x400g"], 3.0, 2)
    assert sized.models == {"leaf": "generic-48x400g", "spine": "nvidia-qm9700"}
    uniform = min(_brute_force(catalog, 1024, "dgx-h100", 1, [m], 3.0, 2) for m in ("nvidia-qm9700", "generic-48x400g"))
    assert sized.cost_usd < uniform


def test_sizing_says_why_nothing_fits(catalog):
    with pytest.raises(Refused, match="no 2-tier fat-tree of these switches fits 65,536 GPUs"):
        size_fat_tree(catalog, "dgx-h100", 65536, 1, ["nvidia-qm9700"], 1.0, 2)
    with pytest.raises(Refused, match="not a whole number"):
        size_cheapest(catalog, "dgx-h100", 1020, 1, ["nvidia-qm9700"], 1.0)


def test_sized_candidates_never_cost_more_than_uniform_ones(in_root):
    """The space's uniform candidates (one model everywhere, the ratio's split, the fewest tiers) are
    points of the sized search, so the sized candidate costs at most the cheapest of them."""
    run = CliRunner().invoke(main, ["optimize", "designs/spaces/small.yaml", "--format", "json"],
                             catch_exceptions=False)
    assert run.exit_code == 0
    candidates = json.loads(run.stdout)["candidates"]
    sized = [c for c in candidates if "-sized-" in c["name"]]
    assert len(sized) == 4
    for s in sized:
        uniform = [c for c in candidates if c["topology"] == "fat-tree" and "-sized-" not in c["name"]
                   and c["gpus"] == s["gpus"] and c["name"].endswith(f"-o{s['name'].split('-o')[-1]}")]
        assert uniform and s["cost_per_gpu_usd"] <= min(c["cost_per_gpu_usd"] for c in uniform)


def test_sizing_infeasible_class_is_named(tmp_path, in_root):
    data = yaml.safe_load(open("designs/spaces/small.yaml"))
    data.update(gpus=[65536], topologies=["fat-tree"], switches=["nvidia-qm9700"], oversubscription=[1],
                constraints={"max_tiers": 2})
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data))
    run = CliRunner().invoke(main, ["optimize", str(space)], catch_exceptions=False)
    assert run.exit_code == 2
    assert "sizing: no 2-tier fat-tree of these switches fits 65,536 GPUs at 1:1 or less" in run.stderr
