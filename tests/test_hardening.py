"""Hostile input is normal input (issue 13): git references that are options, YAML that expands without
bound, files that never end, designs added since a baseline."""

from __future__ import annotations

import os
import re
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

from topoplan.cli import main

from conftest import ROOT


def _run(args):
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stderr, result.stdout


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git repository holding one design and one binary file, committed; the working directory."""
    (tmp_path / "a.yaml").write_text((ROOT / "designs" / "fat-tree-1k.yaml").read_text())
    (tmp_path / "b.yaml").write_bytes(b"\xff\xfe\x00binary")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, env={**os.environ, **env})
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("ref", ["--output=pwned:a.yaml", "-p:a.yaml", "HEAD:--output=pwned"])
def test_a_git_reference_that_is_an_option_is_refused_and_writes_nothing(repo, ref):
    code, stderr, _ = _run(["compare", "--", ref, "a.yaml"])
    assert code == 2 and "starts with '-'" in stderr
    assert sorted(p.name for p in repo.iterdir()) == [".git", "a.yaml", "b.yaml"]
    baseline = ref.split(":")[0]
    if baseline.startswith("-"):
        code, stderr, _ = _run(["check", "a.yaml", "--baseline", baseline])
        assert code == 2 and "starts with '-'" in stderr
        assert sorted(p.name for p in repo.iterdir()) == [".git", "a.yaml", "b.yaml"]


@pytest.mark.parametrize("ref, message", [("HEAD:b.yaml", "not UTF-8 text"), ("nope:a.yaml", "is not a commit"),
                                          ("HEAD:missing.yaml", "no file missing.yaml at HEAD")])
def test_unreadable_references_are_clear_errors(repo, ref, message):
    code, stderr, _ = _run(["compare", ref, "a.yaml"])
    assert code == 2 and message in stderr and stderr.startswith(ref)


def test_check_baseline_treats_a_design_added_since_as_new(repo):
    (repo / "new.yaml").write_text((ROOT / "designs" / "fat-tree-1k.yaml").read_text())
    code, _, stdout = _run(["check", "new.yaml", "--baseline", "HEAD"])
    assert code == 0, stdout
    assert "new  fat-tree-1k: new.yaml is not in HEAD" in stdout


def test_yaml_alias_bomb_is_refused_quickly(tmp_path):
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    spec = tmp_path / "bomb.yaml"
    spec.write_text("\n".join(lines) + "\n")   # 9^9 = 387 million values once expanded
    code, stderr, _ = _run(["validate", str(spec)])
    assert code == 2 and "expands to more than 200,000 values" in stderr and stderr.startswith(f"{spec}:")


def test_deep_nesting_and_endless_files_are_refused(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 50_000 + "]" * 50_000)
    code, stderr, _ = _run(["validate", str(deep)])
    assert code == 2 and "nested too deeply" in stderr
    code, stderr, _ = _run(["validate", "/dev/zero"])
    assert code == 2 and "larger than 16 MiB" in stderr


# --- outputs -----------------------------------------------------------------------------------------------

def test_output_onto_an_input_is_refused(in_root, tmp_path):
    spec = tmp_path / "x.yaml"
    spec.write_text((ROOT / "designs" / "fat-tree-1k.yaml").read_text())
    before = spec.read_text()
    code, stderr, _ = _run(["report", str(spec), "-o", str(spec)])
    assert code == 2 and "it is an input of this command" in stderr
    assert spec.read_text() == before


def test_output_onto_a_device_writes_through_and_keeps_it(in_root):
    import stat

    code, _, _ = _run(["report", "designs/fat-tree-1k.yaml", "-o", "/dev/null"])
    assert code == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_outputs_have_the_usual_mode_and_os_errors_are_exit_2(in_root, tmp_path):
    out = tmp_path / "r.md"
    old = os.umask(0o022)
    try:
        code, _, _ = _run(["report", "designs/fat-tree-1k.yaml", "-o", str(out)])
    finally:
        os.umask(old)
    assert code == 0 and (out.stat().st_mode & 0o777) == 0o644
    for path, message in ((tmp_path / "missing" / "r.md", "cannot write: the directory"),
                          (tmp_path, "is a directory"),   # click refuses it before topoplan sees it
                          (tmp_path / ("x" * 300), "cannot write: the file name is longer than 255")):
        code, stderr, _ = _run(["report", "designs/fat-tree-1k.yaml", "-o", str(path)])
        assert code == 2 and message in stderr, stderr
        assert "Traceback" not in stderr


def test_a_chart_without_an_extension_says_what_it_wrote(in_root, tmp_path):
    out = tmp_path / "chart"
    code, stderr, _ = _run(["nccl", "designs/fat-tree-1k.yaml", "--group", "tp", "-e", "1M", "--plot", str(out)])
    assert code == 0 and f"wrote {out} (PNG)" in stderr
    assert out.read_bytes().startswith(b"\x89PNG")


def test_optimize_checks_its_outputs_before_searching(in_root, tmp_path):
    code, stderr, _ = _run(["optimize", "designs/spaces/headline.yaml", "--plot", str(tmp_path / "no" / "p.png")])
    assert code == 2 and "does not exist" in stderr and "candidates on" not in stderr  # refused before the search starts


# --- bounded work, signals -----------------------------------------------------------------------------

def test_optimize_counts_candidates_first_and_caps_workers(in_root):
    code, stderr, _ = _run(["optimize", "designs/spaces/headline.yaml", "--max-candidates", "5"])
    assert code == 2 and "more than --max-candidates 5 candidates" in stderr
    code, stderr, _ = _run(["optimize", "designs/spaces/small.yaml", "--workers", "999", "-o", os.devnull])
    cpus = os.cpu_count() or 1
    assert code == 0 and f"{min(28, cpus)} worker(s), not 999: 28 candidate(s) on {cpus} CPU(s)" in stderr


def test_ctrl_c_exits_130_with_one_line(monkeypatch, in_root):
    import topoplan.pipeline

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(topoplan.pipeline, "evaluate", interrupted)
    code, stderr, _ = _run(["report", "designs/fat-tree-1k.yaml"])
    assert code == 130 and stderr.strip() == "topoplan: interrupted; nothing was written"


@pytest.mark.parametrize("size, message", [("1e300", "more than 1 PiB"), (".inf", "positive whole number"),
                                           ("2048TiB", "more than 1 PiB")])
def test_sizes_have_an_upper_bound(tmp_path, size, message):
    spec = tmp_path / "x.yaml"
    spec.write_text("name: x\ncluster: {server: dgx-h100, gpus: 1024}\nfabric: {topology: fat-tree, switch: "
                    f"nvidia-qm9700}}\nworkload:\n  collectives:\n    - {{name: x, op: allreduce, group: world, "
                    f"size: {size}}}\n")
    code, stderr, _ = _run(["validate", str(spec)])
    assert code == 2 and stderr.startswith(f"{spec}:6: workload.collectives[0].size:") and message in stderr


def test_rates_have_an_upper_bound():
    from topoplan.units import parse_rate_gbps

    with pytest.raises(ValueError, match="at most 1 Pb/s"):
        parse_rate_gbps("1e9T")


def test_schema_takes_catalog_ids_from_catalog_files(tmp_path):
    import json

    extra = tmp_path / "mine.yaml"
    extra.write_text((ROOT / "tests" / "bad_catalogs" / "04-server-unknown-nic.yaml").read_text()
                     .replace("connectx-9", "nvidia-connectx-7"))
    code, stderr, stdout = _run(["schema", "--catalog", str(extra)])
    assert code == 0, stderr
    servers = json.loads(stdout)["$defs"]["one_site"]["properties"]["cluster"]["properties"]["server"]["examples"]
    assert "dgx-h100" in servers and len(servers) > len(json.loads(_run(["schema"])[2])["$defs"]["one_site"]
                                                         ["properties"]["cluster"]["properties"]["server"]["examples"])


def test_graph_exports_are_bounded_and_readable(in_root, tmp_path):
    import networkx as nx

    code, stderr, _ = _run(["build", "designs/fat-tree-131k-twin-plane.yaml", "-o", str(tmp_path / "x.graphml")])
    assert code == 2 and "GiB of memory" in stderr and "write .json" in stderr
    out = tmp_path / "small.graphml"
    spec = tmp_path / "small.yaml"
    spec.write_text("name: small\ncluster: {server: generic-1gpu, gpus: 8}\nfabric: {topology: fat-tree, "
                    "switch: nvidia-qm9700}\n")
    code, stderr, _ = _run(["build", str(spec), "-o", str(out)])
    assert code == 0, stderr
    assert all(not str(node).isdigit() for node in nx.read_graphml(out).nodes)


# --- catalogs ------------------------------------------------------------------------------------------------

def test_a_partial_override_changes_only_its_fields_and_is_named(in_root, tmp_path):
    from topoplan.catalog import load_catalog

    extra = tmp_path / "prices.yaml"
    extra.write_text("switches:\n  - {id: nvidia-qm9700, price_usd: 30000}\n")
    shipped, mine = load_catalog().switches["nvidia-qm9700"], load_catalog([str(extra)]).switches["nvidia-qm9700"]
    assert mine.price_usd == 30000 and mine.ports == shipped.ports and mine.source == shipped.source
    code, stderr, _ = _run(["validate", "designs/fat-tree-1k.yaml", "--catalog", str(extra)])
    assert code == 0 and f"catalog: {extra}:2: switches 'nvidia-qm9700' overrides the entry from" in stderr


def test_two_files_overriding_one_id_both_say_so(in_root, tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("switches:\n  - {id: nvidia-qm9700, price_usd: 30000}\n")
    second.write_text("switches:\n  - {id: nvidia-qm9700, price_usd: 400000}\n")
    code, stderr, _ = _run(["validate", "designs/fat-tree-1k.yaml", "--catalog", str(first), "--catalog", str(second)])
    assert code == 0 and stderr.count("overrides the entry") == 2 and f"from {first}:2" in stderr


def test_an_id_reused_across_sections_is_refused(tmp_path):
    extra = tmp_path / "x.yaml"
    extra.write_text("nics:\n  - {id: nvidia-qm9700, vendor: x, description: x, ports: 1, port_speed_gbps: 400, "
                     "cages: 1, form_factor: OSFP, pcie_gen: 5, pcie_lanes: 16, power_w: 20, price_usd: 1, "
                     "source: test}\n")
    code, stderr, _ = _run(["catalog", "list", "--catalog", str(extra)])
    assert code == 2 and "is already a switch" in stderr and stderr.startswith(f"{extra}:2:")


# --- bounded work of the per-destination search, and progress (issue 13, item 4) ---------------------

def _naive_railx(make_design, catalog, side=5, dp=True):
    from topoplan.pipeline import build

    gpus = side * side * 8
    workload = {"parallelism": {"dp": gpus},
                "collectives": [{"name": "grad-sync", "op": "allreduce", "group": "dp", "size": "1GiB"}]}
    design = make_design(cluster={"server": "railx-node-8", "gpus": gpus},
                         fabric={"topology": "railx", "switch": None,
                                 "railx": {"columns": side, "rows": side, "ring_assignment": "naive",
                                           "ocs": "calient-s320"}},
                         workload=workload if dp else None)
    return design, build(design, catalog)[0]


@pytest.mark.parametrize("fabric", ["fat-tree-3tier", "railx-5x5-naive", "railx-5x4", "rail-optimized"])
def test_the_search_estimate_counts_the_products_the_search_runs(fabric, monkeypatch):
    """``search_arc_visits`` replays the search on one probe GPU; routing a ring over every GPU at once, with
    the sparse products counted as they run (nonzeros x columns), must come to exactly that per destination."""
    from test_engine_invariants import fabric_topology

    from topoplan.flow import ecmp
    from topoplan.flow.traffic import Demand

    counted = [0]

    class Counting:
        def __init__(self, matrix):
            self.matrix = matrix

        def __matmul__(self, dense):
            counted[0] += self.matrix.nnz * dense.shape[1]
            return self.matrix @ dense

    real = ecmp.routing_graph

    def counting_graph(topology, arc_mask=None):
        graph = real(topology, arc_mask)
        graph.by_weight = [(w, Counting(a), Counting(a_t)) for w, a, a_t in graph.by_weight]
        return graph

    topology = fabric_topology(fabric)
    visits = ecmp.search_arc_visits(topology)
    monkeypatch.setattr(ecmp, "routing_graph", counting_graph)
    gpus = topology.gpus
    ecmp.route(topology, Demand(gpus, np.roll(gpus, 1), 1e9))
    assert counted[0] == sum(visits) * gpus.size > 0
    assert ecmp.search_ops(topology, gpus.size) == (sum(visits) + 2 * topology.num_arcs) * gpus.size


def test_the_generic_search_refuses_past_its_limit_before_any_work(make_design, catalog, monkeypatch):
    from topoplan.errors import EngineRefused
    from topoplan.flow import ecmp, hashed
    from topoplan.flow.traffic import Demand

    _design, topology = _naive_railx(make_design, catalog)
    gpus = topology.gpus
    demand = Demand(gpus, np.roll(gpus, 1), 1e9)
    visits = ecmp.search_arc_visits(topology)
    ops = ecmp.search_ops(topology, gpus.size)
    monkeypatch.setattr(ecmp, "MAX_SEARCH_OPS", ops)
    assert ecmp.route(topology, demand).load.sum() > 0                 # at the limit: routed
    monkeypatch.setattr(ecmp, "MAX_SEARCH_OPS", ops - 1)
    calls = []
    monkeypatch.setattr(ecmp, "distances_to", lambda *a: calls.append(a))   # the search must not start
    monkeypatch.setattr(ecmp, "search_arc_visits", lambda *a: visits)
    monkeypatch.setattr(hashed, "distances_to", lambda *a: calls.append(a))
    with pytest.raises(EngineRefused, match=re.escape(f"about {ops:.2g} multiply-adds")):
        ecmp.route(topology, demand)
    monkeypatch.setattr(ecmp, "MAX_SEARCH_OPS", visits[0] * gpus.size - 1)
    with pytest.raises(EngineRefused, match="the ecmp-hash engine would search"):
        hashed.route(topology, demand)
    assert calls == []


def test_the_workload_is_refused_whole_before_its_first_phase(make_design, catalog, monkeypatch):
    """The limit applies to the sum of every phase: a workload whose phases are each within it but whose
    sum is not is refused before any is routed, and the design is infeasible, exit 2 on the CLI."""
    from topoplan.errors import EngineRefused, InfeasibleDesign
    from topoplan.flow import ecmp
    from topoplan.flow.algorithms import plan_workload
    from topoplan.flow.metrics import evaluate_workload, routing_work
    from topoplan.pipeline import evaluate

    design, topology = _naive_railx(make_design, catalog)
    work = routing_work(topology, plan_workload(topology, design))
    assert work.engine == "ecmp" and work.routes >= 2
    largest = max(ecmp.search_ops(topology, p.demand.destinations().size)
                  for plans in plan_workload(topology, design) for plan in plans for p in plan.phases)
    assert largest < work.search_ops
    monkeypatch.setattr(ecmp, "MAX_SEARCH_OPS", largest)

    class Recorder:
        def start(self, work):
            raise AssertionError("started past the limit")

    with pytest.raises(EngineRefused):
        evaluate_workload(topology, design, catalog, progress=Recorder())
    with pytest.raises(InfeasibleDesign, match="routing: the ecmp engine would search"):
        evaluate(design, catalog)


def test_progress_hears_of_every_routing_call(make_design, catalog):
    from topoplan.flow.metrics import evaluate_workload

    design, topology = _naive_railx(make_design, catalog)
    heard = []

    class Recorder:
        def start(self, work):
            heard.append(("start", work.routes, work.engine))

        def step(self, label):
            heard.append(label)

    results = evaluate_workload(topology, design, catalog, progress=Recorder())
    assert heard[0][0] == "start" and heard[0][2] == "ecmp"
    assert len(heard) - 1 == heard[0][1] == sum(len(r.plan.phases) for c in results for r in c.choices)
    assert all(label.startswith("grad-sync: ") for label in heard[1:])


def test_routing_progress_prints_an_estimate_and_the_time_left(monkeypatch, capsys):
    """Quiet for a short run; for a long one the estimate first, then lines at most every 5 s with the
    phases done and the time left from the pace so far (a fake clock: 10 s a phase)."""
    import time

    from topoplan.cli import Progress
    from topoplan.flow.metrics import RoutingWork

    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(time, "monotonic", lambda: float(next(clock)))
    progress = Progress("report")
    progress.start(RoutingWork("ecmp", 4, 10**12))
    for phase in range(4):
        progress.step(f"phase {phase}")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "topoplan report: 4 phase(s) to route on ecmp: about 1e+12 multiply-adds, about 33.3 min"
    assert lines[1:] == ["topoplan report: 1/4 phases done (phase 0), about 30 s left",
                         "topoplan report: 2/4 phases done (phase 1), about 20 s left",
                         "topoplan report: 3/4 phases done (phase 2), about 10 s left"]
    quick = Progress("report")
    clock = iter([0.0, 0.5, 1.0])
    quick.start(RoutingWork("clos", 2, 0))
    quick.step("a")
    quick.step("b")
    assert capsys.readouterr().err == ""


def test_the_permutation_is_skipped_with_a_note_past_its_search_budget(make_design, catalog, monkeypatch):
    from topoplan import pipeline

    design, _topology = _naive_railx(make_design, catalog, dp=False)
    assert pipeline.evaluate(design, catalog).bisection.permutation_gbps_per_gpu > 0
    monkeypatch.setattr(pipeline, "MAX_PERMUTATION_SEARCH_OPS", 1000)
    cut = pipeline.evaluate(design, catalog).bisection
    assert cut.permutation_gbps_per_gpu is None
    assert cut.permutation_note.startswith("not computed: the ecmp engine would search about")
