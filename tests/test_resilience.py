"""Failure scenarios: symmetry classes against brute force, the spec section's errors, the CLI."""

import json
import subprocess
import sys

import numpy as np
import pytest

from topoplan import pipeline
from topoplan.errors import InfeasibleDesign, SpecError
from topoplan.resilience import assess, run_scenario, healthy_state, plan_runs
from topoplan.spec import FailurePolicy, Scenario

from conftest import ROOT

WORKLOAD = {"parallelism": {"tp": 8, "dp": 16},
            "collectives": [{"name": "grad-sync", "op": "allreduce", "group": "dp", "size": "64MiB"},
                            {"name": "a2a", "op": "alltoall", "group": "dp", "size": "16MiB"}]}


def _small(make_design, catalog, **failures):
    design = make_design(cluster={"gpus": 128}, fabric={"topology": "fat-tree", "switch": "generic-48x400g"},
                         workload=WORKLOAD, **({"failures": failures} if failures else {}))
    return design, pipeline.build(design, catalog)[0]


@pytest.mark.parametrize("element", ["switch", "link"])
def test_every_single_failure_by_class_equals_brute_force(catalog, make_design, element):
    design, topology = _small(make_design, catalog)
    healthy = healthy_state(topology, design, catalog)
    every = Scenario("every", element, "every")
    _scenarios, colours, _runs = plan_runs(topology, design, FailurePolicy((every,)))
    by_class = run_scenario(topology, design, catalog, healthy, every, colours)
    assert by_class.weight == by_class.elements and by_class.classes < by_class.elements
    assert by_class.runs <= 2 * by_class.classes + by_class.elements * (by_class.split_classes > 0)
    brute = [run_scenario(topology, design, catalog, healthy, Scenario("one", element, "index", (i,))).outcomes[0][0]
             for i in range(by_class.elements)]

    def histogram(pairs):
        keys = {}
        for outcome, weight in pairs:
            key = (outcome.stopped_gpus, outcome.degraded_servers, round(outcome.worst_server_fraction, 9),
                   None if outcome.bisection_gbps is None else round(outcome.bisection_gbps, 6),
                   tuple(None if c.time_s is None else round(c.time_s, 12) for c in outcome.collectives))
            keys[key] = keys.get(key, 0) + weight
        return keys

    assert histogram(by_class.outcomes) == histogram((o, 1) for o in brute)


def test_one_spine_of_s_lowers_bisection_by_one_over_s(catalog, make_design):
    """4 full leaves of 24 GPUs, S = 2 spines, 12 links from each leaf to each spine: non-blocking."""
    design = make_design(cluster={"server": "generic-1gpu", "gpus": 96}, fabric={"topology": "fat-tree",
                         "switch": "generic-48x400g"}, workload={"parallelism": {"dp": 96}, "collectives": [
                             {"name": "ring", "op": "allreduce", "group": "dp", "size": "64MiB"}]},
                         failures={"scenarios": [{"name": "s", "fail": "spine", "index": 0}]})
    topology = pipeline.build(design, catalog)[0]
    spines = topology.switches_by_tier()["spine"]
    result = assess(topology, design, catalog, design.failures)
    outcome = result.scenarios[0].outcomes[0][0]
    assert not outcome.job_stops and spines == 2
    assert result.healthy.bisection_gbps == pytest.approx(96 * 400 / 2)
    assert outcome.bisection_gbps == pytest.approx(result.healthy.bisection_gbps * (spines - 1) / spines)


def test_random_samples_are_seeded_and_counted(catalog, make_design):
    scenarios = [{"name": "r", "fail": "spine-link", "random": {"count": 2, "samples": 5, "seed": 7}}]
    design, topology = _small(make_design, catalog, scenarios=scenarios)
    first = assess(topology, design, catalog, design.failures).scenarios[0]
    again = assess(topology, design, catalog, design.failures).scenarios[0]
    assert first.runs == 5 and all(o.failed_links == 2 for o, _ in first.outcomes)
    assert [o.bisection_gbps for o, _ in first.outcomes] == [o.bisection_gbps for o, _ in again.outcomes]


def test_dask_gives_the_runs_one_process_gives(catalog, make_design, tmp_path):
    """The failure runs on a Dask LocalCluster of threads (the topology scattered once) and, from the CLI, of
    two worker processes: the same outcomes, and the same JSON bytes, as in this process."""
    pytest.importorskip("distributed")
    from click.testing import CliRunner

    from topoplan.cli import main
    from topoplan.executors import DaskExecutor

    scenarios = [{"name": "r", "fail": "link", "random": {"count": 2, "samples": 4, "seed": 3}}]
    design, topology = _small(make_design, catalog, scenarios=scenarios)
    here = assess(topology, design, catalog, design.failures)
    there = assess(topology, design, catalog, design.failures, executor=DaskExecutor(2, processes=False))
    assert [list(r.outcomes) for r in here.scenarios] == [list(r.outcomes) for r in there.scenarios]
    runner = CliRunner()
    one = runner.invoke(main, ["resilience", "designs/fat-tree-1k.yaml", "--format", "json"])
    dask = runner.invoke(main, ["resilience", "designs/fat-tree-1k.yaml", "--format", "json", "--executor", "dask",
                                "--workers", "2"])
    assert one.exit_code == dask.exit_code == 0, one.output + dask.output
    assert one.stdout == dask.stdout


def test_two_workers_give_the_runs_one_worker_gives(catalog, make_design):
    scenarios = [{"name": "r", "fail": "link", "random": {"count": 2, "samples": 4, "seed": 3}},
                 {"name": "every-switch", "fail": "switch", "every": True}]
    design, topology = _small(make_design, catalog, scenarios=scenarios)
    steps = []

    class Steps:
        def begin(self, total):
            steps.append(total)

        def step(self, label):
            steps.append(label)

    one = assess(topology, design, catalog, design.failures)
    two = assess(topology, design, catalog, design.failures, Steps(), workers=2)
    assert [[(o, w) for o, w in r.outcomes] for r in one.scenarios] == \
        [[(o, w) for o, w in r.outcomes] for r in two.scenarios]
    assert [r.runs for r in one.scenarios] == [r.runs for r in two.scenarios]
    # progress in the parent: one step per run, labelled with its scenario
    # (in the order the runs finish: the results are put back in order, the progress is not)
    assert len(steps) == 1 + sum(r.runs for r in two.scenarios)
    assert sorted(steps[1:5]) == [f"r: sample {i}" for i in range(4)]


def test_exhaustive_runs_past_the_limit_are_refused_before_routing(catalog, make_design, monkeypatch):
    from topoplan import resilience

    design, topology = _small(make_design, catalog, scenarios=[{"name": "every-link", "fail": "link", "every": True}])
    _scenarios, _colours, runs = plan_runs(topology, design, design.failures)
    monkeypatch.setattr(resilience, "MAX_SCENARIO_RUNS", runs - 1)
    monkeypatch.setattr(resilience, "healthy_state", lambda *a: pytest.fail("routed before refusing"))
    with pytest.raises(InfeasibleDesign, match=f"take {runs:,} degraded runs .every-link: {runs // 2:,} classes"):
        assess(topology, design, catalog, design.failures)


def test_failures_that_do_not_stop_the_job_are_not_interruptions(catalog, make_design):
    """HPN's NIC-ToR link rate times the links, times the share of single NIC-link failures that stop the
    job: all of them on single-homed hosts, none on dual-ToR hosts (they run on at 15/16)."""
    from topoplan.failures import component_counts
    from topoplan.reliability import DAYS_PER_MONTH

    failures = {"rates": ["hpn-network"], "scenarios": [{"name": "ports", "fail": "leaf-link", "every": True}]}
    nic_links = {}
    for server, planes in (("hpn-h800-dual-port", 2), ("dgx-h100", 1)):
        design = make_design(cluster={"server": server, "gpus": 64},
                             fabric={"topology": "rail-optimized", "switch": "generic-48x400g", "planes": planes,
                                     "scalable_unit": 4},
                             workload=WORKLOAD | {"parallelism": {"tp": 8, "dp": 8}}, failures=failures)
        topology = pipeline.build(design, catalog)[0]
        result = assess(topology, design, catalog, design.failures)
        links = component_counts(topology)["nic_link"]
        nic_links[server] = dict(result.interruptions.by_cause_per_day)["NIC-ToR link"], links
        assert result.stop_fractions == {"nic_link": result.scenarios[0].stop_fraction}
    assert nic_links["hpn-h800-dual-port"][0] == 0.0
    single, links = nic_links["dgx-h100"]
    assert single == pytest.approx(links * 0.00057 / DAYS_PER_MONTH)


@pytest.mark.parametrize("server,fabric", [
    ("dgx-h100", {"topology": "fat-tree"}),
    ("hgx-b300", {"topology": "fat-tree", "planes": 2}),
    ("hgx-b300", {"topology": "fat-tree"}),
    ("hpn-h800-dual-port", {"topology": "rail-optimized", "planes": 2, "scalable_unit": 4}),
    ("dgx-h100", {"topology": "rail-only", "scalable_unit": 4}),
])
def test_stop_fractions_without_routing_match_the_exhaustive_scenarios(catalog, make_design, server, fabric):
    """The optimizer's closed form (``failures.single_failure_stop_fractions``) against every single NIC
    link and every single leaf failed and evaluated by ``resilience``."""
    from topoplan.failures import single_failure_stop_fractions

    failures = {"scenarios": [{"name": "ports", "fail": "leaf-link", "every": True},
                              {"name": "leaves", "fail": "leaf", "every": True}]}
    design = make_design(cluster={"server": server, "gpus": 64}, fabric={"switch": "generic-48x400g", **fabric},
                         workload=WORKLOAD | {"parallelism": {"tp": 8, "dp": 8}}, failures=failures)
    topology = pipeline.build(design, catalog)[0]
    measured = assess(topology, design, catalog, design.failures).stop_fractions
    assert single_failure_stop_fractions(topology) == pytest.approx(measured)


def test_interruptions_and_goodput_follow_the_llama3_figures(catalog):
    from topoplan.spec import load_design
    design = load_design(ROOT / "designs" / "fat-tree-16k.yaml", catalog)
    topology = pipeline.build(design, catalog)[0]
    policy = FailurePolicy(scenarios=(Scenario("s", "spine", "index", (0,)),))
    result = assess(topology, design, catalog, policy)
    assert result.interruptions.per_day == pytest.approx(419 / 54, rel=1e-9)
    assert result.interruptions.mtbf_h == pytest.approx(3.09, abs=0.005)
    assert result.goodput.young_interval_s == pytest.approx((2 * 100 * result.interruptions.mtbf_h * 3600) ** 0.5)


def test_spec_errors_point_into_the_failures_section(catalog, make_design):
    with pytest.raises(SpecError) as err:  # the schema's own checks
        make_design(failures={"scenarios": [{"name": "c", "fail": "nope", "index": 0}], "rates": ["made-up"],
                              "checkpoint_s": 0})
    text = "\n".join(str(p) for p in err.value.problems)
    for expected in ("failures.scenarios[0].fail", "failures.rates[0]", "failures.checkpoint_s"):
        assert expected in text
    with pytest.raises(SpecError) as err:  # the checks across keys, all at once
        make_design(failures={"scenarios": [{"name": "a", "fail": "spine"},
                                             {"name": "b", "fail": "spine", "index": 0, "every": True},
                                             {"name": "b", "fail": "spine", "index": [1, 1]}]})
    text = "\n".join(str(p) for p in err.value.problems)
    for expected in ("failures.scenarios[0]: give exactly one", "failures.scenarios[1]: give exactly one",
                     "failures.scenarios[2].name: duplicate", "failures.scenarios[2].index: list each"):
        assert expected in text
    design, topology = _small(make_design, catalog, scenarios=[{"name": "far", "fail": "core", "index": 3}])
    with pytest.raises(InfeasibleDesign, match="past the 0 core"):
        assess(topology, design, catalog, design.failures)


def test_cli_resilience_json_and_check_targets(tmp_path):
    spec = tmp_path / "ft.yaml"
    spec.write_text("""name: ft
cluster: {server: dgx-h100, gpus: 1024}
fabric: {topology: fat-tree, switch: nvidia-qm9700}
workload:
  parallelism: {tp: 8, dp: 128}
  collectives:
    - {name: grad-sync, op: allreduce, group: dp, size: 1GiB}
failures:
  scenarios:
    - {name: any-spine, fail: spine, every: true}
targets:
  max_interruptions_per_day: 0.4
  min_goodput: 0.9
""")
    run = subprocess.run([sys.executable, "-m", "topoplan", "resilience", str(spec), "--format", "json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["scenarios"][0]["classes"] == 1 and result["scenarios"][0]["elements"] == 16
    assert result["summary"]["interruptions_per_day"] == pytest.approx(419 / 54 / 16, rel=1e-6)
    check = subprocess.run([sys.executable, "-m", "topoplan", "check", str(spec)], capture_output=True, text=True)
    assert check.returncode == 1
    assert "MISS ft: max_interruptions_per_day" in check.stdout and "ok   ft: min_goodput" in check.stdout
    assert np.isfinite(result["goodput"]["daly_interval_s"])


@pytest.mark.parametrize("args, message", [
    (["--scheduler", "not-an-address"], "--scheduler"),
    (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler"),
    (["--executor", "process", "--scheduler", "tcp://127.0.0.1:8786"], "needs --executor dask"),
    (["--workers", "0"], "--workers"),
    (["--executor", "-rf"], "--executor"),
])
def test_bad_executor_options_are_exit_2(args, message):
    """resilience's executor options take hostile values as the sweeps do: one line, exit 2, no traceback."""
    from click.testing import CliRunner

    from topoplan.cli import main

    import importlib.util

    if message == "--scheduler" and importlib.util.find_spec("distributed") is None:
        message = "needs Dask's distributed package"   # without the [dask] extra, that is the one problem
    result = CliRunner().invoke(main, ["resilience", "designs/fat-tree-1k.yaml", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_huge_worker_count_is_capped_with_a_line():
    from click.testing import CliRunner

    from topoplan.cli import main

    result = CliRunner().invoke(main, ["resilience", "designs/fat-tree-1k.yaml", "--workers", "99999999999999999999",
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "worker(s), not 99999999999999999999" in result.stderr
