"""The optimizer: Pareto front against brute force, determinism, emitted specs, plot data, bad spaces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from topoplan.cli import main
from topoplan.optimize.search import pareto_front

ROOT = Path(__file__).resolve().parent.parent
SPACE = "designs/spaces/small.yaml"


def _dominated(points, i):
    xi, yi = points[i]
    for j, (xj, yj) in enumerate(points):
        if j != i and xj <= xi and yj <= yi and (xj < xi or yj < yi or j < i):
            return True
    return False


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), max_size=40))
def test_pareto_front_matches_brute_force(points):
    assert pareto_front(points) == [i for i in range(len(points)) if not _dominated(points, i)]


@pytest.fixture(scope="module")
def optimized():
    import os

    previous = os.getcwd()
    os.chdir(ROOT)
    try:
        one = CliRunner().invoke(main, ["optimize", SPACE, "--format", "json"], catch_exceptions=False)
        two = CliRunner().invoke(main, ["optimize", SPACE, "--format", "json", "--workers", "2"],
                                 catch_exceptions=False)
    finally:
        os.chdir(previous)
    assert one.exit_code == 0 and two.exit_code == 0
    return one.stdout, two.stdout


def test_optimize_is_deterministic_and_its_front_is_right(optimized):
    one, two = optimized
    assert one == two  # the same for any number of workers
    result = json.loads(one)
    assert len(result["candidates"]) == 28 and result["infeasible"]["count"] == 0
    for gpus in {c["gpus"] for c in result["candidates"]}:
        group = [c for c in result["candidates"] if c["gpus"] == gpus]
        points = [(c["cost_per_gpu_usd"], c["time_s"]) for c in group]
        brute = {group[i]["name"] for i in range(len(group)) if not _dominated(points, i)}
        assert brute == {n for n in result["pareto"] if n in {c["name"] for c in group}}


def test_emitted_specs_reproduce_the_optimizer(in_root, tmp_path, optimized):
    result = json.loads(optimized[0])
    out = tmp_path / "chosen"
    run = CliRunner().invoke(main, ["optimize", SPACE, "--emit-specs", str(out)], catch_exceptions=False)
    assert run.exit_code == 0
    emitted = sorted(p.stem for p in out.glob("*.yaml"))
    assert emitted == sorted(result["pareto"])
    weights = yaml.safe_load((ROOT / SPACE).read_text())["objective"]["weights"]
    by_name = {c["name"]: c for c in result["candidates"]}
    for name in emitted:
        report = json.loads(CliRunner().invoke(main, ["report", str(out / f"{name}.yaml"), "--format", "json"],
                                               catch_exceptions=False).output)
        assert report["cost"]["per_gpu_usd"] == by_name[name]["cost_per_gpu_usd"]
        time_s = sum(weights[c["name"]] * c["time_s"] for c in report["collectives"])
        assert time_s == pytest.approx(by_name[name]["time_s"], rel=1e-12)


def test_pareto_plot_data(optimized):
    from topoplan.report.plots import pareto_figure

    result = json.loads(optimized[0])
    fig = pareto_figure(result)
    panels = [a for a in fig.axes if a.get_title()]   # one per GPU count, times in ms
    assert [a.get_title() for a in panels] == [f"{g:,} GPUs" for g in sorted({c["gpus"] for c in result["candidates"]})]
    points = {tuple(p) for axis in panels for collection in axis.collections for p in collection.get_offsets().tolist()}
    assert points == {(c["time_s"] * 1e3, c["cost_per_gpu_usd"]) for c in result["candidates"]}
    front = {(c["time_s"] * 1e3, c["cost_per_gpu_usd"]) for c in result["candidates"] if c["name"] in result["pareto"]}
    drawn = {tuple(xy) for axis in panels for line in axis.lines for xy in line.get_xydata().tolist()}
    assert drawn == front
    assert "USD" in panels[0].get_ylabel() and "ms" in panels[0].get_xlabel()


@pytest.mark.parametrize("edit,message", [
    (lambda d: d.update(servers=["dgx-h10"]), "unknown server 'dgx-h10'"),
    (lambda d: d.update(gpus=[]), "needs at least 1 item"),
    (lambda d: d.update(constraints={"max_cost_per_gpu_usd": 10}), "no candidate is feasible"),
    (lambda d: d.update(topologies=["torus"]), "unknown value 'torus'"),
])
def test_bad_spaces_exit_2(tmp_path, edit, message):
    data = yaml.safe_load((ROOT / SPACE).read_text())
    edit(data)
    _assert_refused(tmp_path, data, message)


def _assert_refused(tmp_path, data, message):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["optimize", str(space)], catch_exceptions=False)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_every_class_of_infeasible_candidate_is_explained(tmp_path):
    data = yaml.safe_load((ROOT / SPACE).read_text())
    data["gpus"] = [1020]  # not a whole number of 8-GPU servers
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["optimize", str(space)], catch_exceptions=False)
    assert result.exit_code == 2
    assert "12 x 1,020 GPUs is not a whole number of dgx-h100 servers" in result.stderr


def test_empty_space_file(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("# nothing\n")
    result = CliRunner().invoke(main, ["optimize", str(space)], catch_exceptions=False)
    assert result.exit_code == 2 and "the space is empty" in result.stderr


def test_cost_breakdown_plot_data(optimized):
    from topoplan.report.plots import cost_breakdown_figure

    result = json.loads(optimized[0])
    fig = cost_breakdown_figure(result)
    axis = fig.axes[0]
    chosen = {c["name"]: c for c in result["candidates"] if c["name"] in result["pareto"]}
    names = [t.get_text() for t in axis.get_yticklabels()]
    totals = {}
    for index, bar in enumerate(axis.patches):  # one run of bars per category, one bar per design
        label = names[index % len(names)]
        totals[label] = max(totals.get(label, 0), bar.get_x() + bar.get_width())
    assert set(totals) == set(chosen)
    for name, total in totals.items():
        assert total == pytest.approx(chosen[name]["cost_per_gpu_usd"], abs=0.01)  # the report rounds to cents


RAILX_SPACE = {
    "name": "railx-space", "gpus": [128, 200, 1020], "servers": ["dgx-h100"], "topologies": ["railx"],
    "switches": ["nvidia-qm9700"], "railx": {"servers": ["railx-node-8"], "ocs": ["calient-s320"]},
    "workload": {"parallelism": {"tp": 8},
                 "collectives": [{"name": "grad-sync", "op": "allreduce", "group": "dp", "size": "1GiB"},
                                 {"name": "dispatch", "op": "alltoall", "group": "world", "size": "64MiB"}]},
}


def test_railx_candidates_use_the_squarest_grid_and_reproduce(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(RAILX_SPACE))
    out = tmp_path / "chosen"
    run = CliRunner().invoke(main, ["optimize", str(space), "--format", "json", "--emit-specs", str(out)],
                             catch_exceptions=False)
    assert run.exit_code == 0, run.stderr
    result = json.loads(run.stdout)
    assert [c["name"] for c in result["candidates"]] == ["railx-railx-node-8-calient-s320-128",
                                                         "railx-railx-node-8-calient-s320-200"]
    assert result["infeasible"]["count"] == 1  # 1,020 chips are not whole 8-chip nodes
    assert "1,020 GPUs is not a whole number of railx-node-8 servers" in next(iter(result["infeasible"]["reasons"]))
    grids = {p.stem: yaml.safe_load(p.read_text())["fabric"]["railx"] for p in out.glob("*.yaml")}
    assert [(g["columns"], g["rows"]) for _, g in sorted(grids.items())] == [(4, 4), (5, 5)]
    for candidate in result["candidates"]:
        assert candidate["topology"] == "railx" and candidate["switch"] == "calient-s320"
        report = json.loads(CliRunner().invoke(main, ["report", str(out / f"{candidate['name']}.yaml"), "--format",
                                                      "json"], catch_exceptions=False).output)
        assert report["cost"]["per_gpu_usd"] == candidate["cost_per_gpu_usd"]
        assert sum(c["time_s"] for c in report["collectives"]) == pytest.approx(candidate["time_s"], rel=1e-12)
        assert {c["engine"] for c in report["collectives"]} == {"railx"}


@pytest.mark.parametrize("edit,message", [
    (lambda d: d.pop("railx"), "RailX candidates need a 'railx' block"),
    (lambda d: d["railx"].update(ocs=["calient-s32"]), "unknown optical circuit switch 'calient-s32'"),
    (lambda d: d["railx"].update(servers=["railx-node"]), "unknown server 'railx-node'"),
])
def test_bad_railx_spaces_exit_2(tmp_path, edit, message):
    data = json.loads(json.dumps(RAILX_SPACE))
    edit(data)
    _assert_refused(tmp_path, data, message)


def test_constraints_prune_before_routing(in_root, monkeypatch):
    """A candidate that misses a constraint on its structure or cost is never routed."""
    import topoplan.pipeline
    from topoplan.catalog import load_catalog
    from topoplan.optimize.search import search
    from topoplan.optimize.space import load_space

    routed = []
    original = topoplan.pipeline.evaluate
    monkeypatch.setattr(topoplan.pipeline, "evaluate", lambda design, *a, **k: routed.append(design.name)
                        or original(design, *a, **k))
    space = load_space(SPACE, load_catalog())
    space = type(space)(**{**space.__dict__, "constraints": {"max_cost_per_gpu_usd": 4300}})
    result = search(space)
    pruned = [o.name for o in result.outcomes if o.reason.startswith("constraint: cost per GPU above")]
    assert pruned and not set(pruned) & set(routed)
    assert {o.name for o in result.feasible} <= set(routed)


def test_cable_reach_constraint_and_space_cabling(tmp_path, in_root):
    data = yaml.safe_load(open(SPACE))
    data.update(gpus=[4096], topologies=["fat-tree"], constraints={"max_cable_reach": "in-row"},
                cabling={"leaf": "in-rack"})
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data))
    run = CliRunner().invoke(main, ["optimize", str(space), "--format", "json", "--emit-specs", str(tmp_path / "out")],
                             catch_exceptions=False)
    assert run.exit_code == 0, run.stderr
    result = json.loads(run.stdout)
    reasons = result["infeasible"]["reasons"]
    assert any("cabling beyond in-row: core links need cross-row" in r for r in reasons)
    assert all(c["tiers"] <= 2 for c in result["candidates"])  # three tiers put the core cross-row
    assert any("-sized-" in c["name"] for c in result["candidates"])  # sizing stayed within two tiers
    for emitted in (tmp_path / "out").glob("*.yaml"):
        assert yaml.safe_load(emitted.read_text())["fabric"]["cabling"] == {"leaf": "in-rack"}


GOODPUT_SPACE = {
    "name": "goodput-test", "gpus": [128], "servers": ["dgx-h100", "hpn-h800-dual-port"],
    "topologies": ["rail-optimized"], "switches": ["generic-48x400g"], "planes": [1, 2], "scalable_unit": 4,
    "workload": {"parallelism": {"tp": 8}, "collectives": [
        {"name": "grad-sync", "op": "allreduce", "group": "dp", "size": "64MiB", "algorithm": "ring"}]},
    "resilience": {"rates": ["llama3-non-network", "hpn-network"], "checkpoint_s": 100, "restart_s": 600},
}


def test_goodput_ranking_weighs_dual_homing_against_cost(tmp_path):
    """Each candidate's interruptions are the non-network Llama 3 rates plus HPN's NIC-link and ToR rates
    where a single such failure stops the job: on single-homed hosts every one, on dual-ToR hosts none.
    The ranking is by goodput / time / (cluster USD / 1e6), recomputed here from the figures."""
    from topoplan.reliability import DAYS_PER_MONTH, llama3_non_network_rates

    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(GOODPUT_SPACE))
    run = CliRunner().invoke(main, ["optimize", str(space), "--format", "json"], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    result = json.loads(run.stdout)
    by_name = {c["name"]: c for c in result["candidates"]}
    base = sum(r.rate_per_unit_day * (128 if r.unit == "gpu" else 16) for r in llama3_non_network_rates())
    single = by_name["rail-optimized-dgx-h100-generic-48x400g-128-o1-p1"]
    dual = by_name["rail-optimized-hpn-h800-dual-port-generic-48x400g-128-o1-p2"]
    assert dual["interruptions_per_day"] == pytest.approx(base, rel=1e-5)
    leaves = (128 // 8 // 4) * 8  # 16 servers, 4 per unit, one leaf per rail (8) per unit
    assert single["interruptions_per_day"] == pytest.approx(
        base + (128 * 0.00057 + leaves * 0.00051) / DAYS_PER_MONTH, rel=1e-5)
    assert dual["goodput"] > single["goodput"]
    score = {n: c["goodput"] / c["time_s"] / (c["cluster_usd"] / 1e6) for n, c in by_name.items()}
    assert result["ranking"] == sorted(by_name, key=lambda n: -score[n])
    for name, c in by_name.items():
        assert c["goodput_per_s_per_musd"] == pytest.approx(score[name], rel=1e-5)
    markdown = CliRunner().invoke(main, ["optimize", str(space), "--format", "markdown"], catch_exceptions=False)
    assert "## Ranked by goodput-adjusted throughput per dollar" in markdown.stdout
    assert f"| 1 | {result['ranking'][0]} |" in markdown.stdout


def test_shipped_goodput_space_holds_eight_candidates():
    from topoplan.catalog import load_catalog
    from topoplan.optimize.space import candidate_specs, load_space

    space = load_space(ROOT / "designs" / "spaces" / "goodput.yaml", load_catalog())
    assert space.resilience == {"rates": ("llama3-non-network", "hpn-network"), "checkpoint_s": 100.0,
                                "restart_s": 600.0}
    specs = list(candidate_specs(space))
    assert len(specs) == 8 and {s["cluster"]["gpus"] for _, s, _ in specs} == {4096}


def test_a_fractional_ratio_makes_a_valid_candidate(tmp_path):
    """oversubscription 1.5 in a space: the candidate is named ...-o1p5-... (kebab case, so its emitted spec
    loads) and evaluated like any other."""
    data = yaml.safe_load((ROOT / SPACE).read_text())
    data["oversubscription"] = [1.5]
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["optimize", str(space), "--format", "json", "--no-cache",
                                       "--emit-specs", str(tmp_path / "specs")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    names = [c["name"] for c in json.loads(result.stdout)["candidates"]]
    assert names and all("-o1p5-" in n for n in names)
    emitted = sorted((tmp_path / "specs").glob("*.yaml"))
    assert emitted and CliRunner().invoke(main, ["validate", str(emitted[0])]).exit_code == 0
