"""Multi-site designs (topoplan/sites.py): placement, the joined topology, the WAN's part of the step and
the bandwidth the schemes need, held against closed forms, the reference's 405B example and networkx."""

from __future__ import annotations

import copy
import json
import math

import networkx as nx
import numpy as np
import pytest

from topoplan import sites
from topoplan.catalog import load_catalog
from topoplan.errors import SpecError
from topoplan.topology import KIND, LINK_TIER

from click.testing import CliRunner

from topoplan.cli import main

CATALOG = load_catalog()


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def spec(**wan):
    """Two sites of 64 DGX H100 (512 GPUs) on two-tier fat-trees, a Llama-3-70B job across them."""
    data = {
        "name": "two-small-sites",
        "sites": [{"name": name, "cluster": {"server": "dgx-h100", "gpus": 512},
                   "fabric": {"topology": "fat-tree", "switch": "nvidia-qm9700"}} for name in ("east", "west")],
        "wan": {"links": [{"between": ["east", "west"], "link_gbps": 400, "count": 4, "distance_km": 100,
                           "usd_per_port": 1000}]},
        "workload": {"parallelism": {"tp": 8, "pp": 4, "dp": 32}, "model": "llama3-70b",
                     "training": {"global_batch": 256, "gradient_bytes": 2}},
    }
    data["wan"].update(wan)
    return data


def load(data):
    return sites.multi_site_from_data(data, CATALOG, "two.yaml")


@pytest.fixture(scope="module")
def small():
    multi = load(spec())
    return multi, sites.evaluate(multi, CATALOG)


def problems(data) -> list[str]:
    with pytest.raises(SpecError) as info:
        load(data)
    return [str(p) for p in info.value.problems]


def test_each_site_holds_whole_replicas(small):
    multi, _ = small
    assert [s.design.workload.parallelism["dp"] for s in multi.sites] == [16, 16]
    assert [s.design.workload.training.global_batch for s in multi.sites] == [128, 128]
    assert multi.gpus == 1024


def test_local_step_is_the_one_site_step(small):
    """With a free WAN the job runs at one site's own step (each site is an ordinary design)."""
    from topoplan.pipeline import evaluate

    multi, ev = small
    alone = evaluate(multi.sites[0].design, CATALOG).training
    assert ev.cross.local_step_s == pytest.approx(alone.step_s, rel=1e-12)
    assert ev.training.step_s == pytest.approx(alone.step_s + ev.cross.exposed_s, rel=1e-12)


def test_two_site_exchange_moves_one_replica_of_gradients(small):
    """Two sites: each sends 2 (M - 1) / M = 1 replica's gradients; time = bytes / WAN + 2 one-way latencies."""
    multi, ev = small
    from topoplan.training import counts

    grads = counts(multi.workload.training.model).total * 2
    assert ev.cross.exchange.bytes_per_site == pytest.approx(grads, rel=1e-12)
    assert ev.cross.wan_s == pytest.approx(grads * 8 / 1600e9 + 2 * 100 * 4.9e-6, rel=1e-9)


def test_diloco_h1_is_synchronous_and_doubling_h_halves_the_wan_term(small):
    _, ev = small
    wan, local, mb = ev.cross.wan_s, ev.cross.local_step_s, ev.cross.compute_mb_s
    sync = sites.exposed_wan_s(sites.Sync("sync"), wan, local, mb)
    assert sites.exposed_wan_s(sites.Sync("diloco", 1), wan, local, mb) == sync == wan
    for h in (2, 10, 100):
        assert sites.exposed_wan_s(sites.Sync("diloco", 2 * h), wan, local, mb) == pytest.approx(
            sites.exposed_wan_s(sites.Sync("diloco", h), wan, local, mb) / 2, rel=1e-12)


def test_co2_is_exposed_only_past_its_window():
    assert sites.exposed_wan_s(sites.Sync("co2", 4), 3.0, 1.0, 0.1) == 0.0            # 3 s under 4 steps of 1 s
    assert sites.exposed_wan_s(sites.Sync("co2", 4), 6.0, 1.0, 0.1) == pytest.approx(0.5)   # (6 - 4) / 4


def test_utilisation_tends_to_one_as_the_wan_grows(small):
    _, ev = small
    gbps, curves = ev.curve
    for label, values in curves.items():
        assert np.all(np.diff(values) >= -1e-12), label          # never worse with more bandwidth
        assert values[-1] > 0.999, label
    # and the last point is bounded by latency only: 1 / (1 + 2 L / step) for sync
    lat = ev.cross.exchange.latency_s
    assert curves["sync"][-1] == pytest.approx(ev.cross.local_step_s / (ev.cross.local_step_s + lat
                                                                         + ev.cross.exchange.bandwidth_s / 1000),
                                               rel=1e-9)


def test_needed_bandwidth_matches_the_closed_form_for_sync(small):
    """sync: u = S / (S + V / B + L)  =>  B = V / (S (1 / u - 1) - L)."""
    _, ev = small
    s, lat = ev.cross.local_step_s, ev.cross.exchange.latency_s
    volume_gbit = ev.cross.exchange.bandwidth_s * ev.cross.wan_gbps   # seconds at the design's Gb/s
    row = next(r for r in ev.requirements if r.sync.scheme == "sync")
    for level, got in row.needed_gbps.items():
        assert got == pytest.approx(volume_gbit / (s * (1 / level - 1) - lat), rel=1e-6)


def test_latency_alone_can_miss_a_target():
    far = spec(links=[{"between": ["east", "west"], "link_gbps": 400, "count": 4, "latency_ms": 5000}],
               target_utilization=0.9)
    ev = sites.evaluate(load(far), CATALOG)
    row = next(r for r in ev.requirements if r.sync.scheme == "sync")
    assert row.needed_gbps[0.99] is None      # 10 s of round trips against a step of a few seconds


@pytest.mark.parametrize("gbps, seconds", [(100, 64.8), (400, 16.2), (3200, 2.025)])
def test_the_reference_405b_two_site_example(gbps, seconds):
    """training_and_resilience.md section D: 810 GB of bf16 gradients per sync between two sites take
    64.8 s at 100 Gb/s, 16.2 s at 400 Gb/s and 2.0 s at 3.2 Tb/s (405B rounded; the catalog model has
    405.85B parameters, so 0.2% more)."""
    data = spec(links=[{"between": ["east", "west"], "link_gbps": gbps, "count": 1, "distance_km": 0}])
    data["workload"] = {"parallelism": {"tp": 8, "pp": 16, "dp": 8}, "model": "llama3-405b",
                        "training": {"global_batch": 64, "gradient_bytes": 2, "recompute": "full"}}
    for site in data["sites"]:
        site["cluster"]["gpus"] = 512
    multi = load(data)
    exchange = sites.allreduce_exchange(multi, sites.replica_gradient_bytes(multi.workload.training))
    assert exchange.bytes_per_site == pytest.approx(810e9, rel=0.003)
    assert exchange.time_s() == pytest.approx(seconds, rel=0.003)
    assert sites.allreduce_exchange(multi, 810e9).time_s() == pytest.approx(seconds, rel=1e-12)


def test_three_sites_ring_and_direct():
    """Three sites in a triangle: both patterns move 2 (M - 1) / M of the data per site; on a full mesh the
    direct one uses every link at once (2 phases of a third to each neighbour) where the ring leaves half
    of them idle and takes 2 (M - 1) latency steps, so direct wins."""
    data = spec()
    data["sites"].append({"name": "north", "cluster": {"server": "dgx-h100", "gpus": 512},
                          "fabric": {"topology": "fat-tree", "switch": "nvidia-qm9700"}})
    data["workload"]["parallelism"]["dp"] = 48
    data["workload"]["training"]["global_batch"] = 384
    data["wan"]["links"] = [{"between": pair, "link_gbps": 400, "count": 1, "distance_km": 1000}
                            for pair in (["east", "west"], ["west", "north"], ["north", "east"])]
    multi = load(data)
    exchange = sites.allreduce_exchange(multi, 3e9)
    assert exchange.bytes_per_site == pytest.approx(2 * 2 / 3 * 3e9)
    assert exchange.pattern == "direct"
    assert exchange.bandwidth_s == pytest.approx(2 * 1e9 * 8 / 400e9)   # 1e9 to each neighbour, twice
    assert exchange.latency_s == pytest.approx(2 * 1000 * 4.9e-6)


def test_a_lossy_link_carries_the_mathis_bound():
    link = sites.WanLink(0, 1, 400.0, 1, 0.005, 1000, loss=1e-4, streams=8, mss_bytes=1460)
    expected = 8 * 1460 * 8 / 0.01 * math.sqrt(1.5 / 1e-4) / 1e9
    assert link.goodput_gbps == pytest.approx(expected) and expected < 400
    assert sites.WanLink(0, 1, 400.0, 1, 0.005, 1000).goodput_gbps == 400.0


def test_joined_topology_counts_and_diameter_against_networkx(small):
    multi, ev = small
    topology = ev.topology
    assert topology.check() == []
    site_switches = [e.topology.switches_by_tier() for e in ev.sites]
    by_tier = topology.switches_by_tier()
    for tier in ("leaf", "spine"):
        assert by_tier[tier] == sum(s[tier] for s in site_switches)
    assert by_tier["border"] == sum(b.count for b in ev.borders) == 2
    links = topology.links_by_tier()
    assert links["wan"] == 4 and links["border"] == sum(b.down_links for b in ev.borders) == 8
    # diameter: network links on the longest GPU-to-GPU shortest path (host links weigh nothing)
    graph = nx.Graph()
    host = LINK_TIER["host"]
    for s, d, tier in zip(topology.src[0::2], topology.dst[0::2], topology.link_tier[0::2]):
        graph.add_edge(int(s), int(d), weight=0 if tier == host else 1)
    gpus = topology.gpus
    source = int(gpus[0])
    far = nx.single_source_dijkstra_path_length(graph, source, weight="weight")
    assert max(far[int(g)] for g in gpus) == topology.layout.diameter_hops == 2 + 1 + 1 + 1 + 2


def test_border_is_non_blocking(small):
    _, ev = small
    topology = ev.topology
    border = np.flatnonzero((topology.kind == KIND["switch"]) & (topology.tier == sites.BORDER_TIER))
    for node in border:
        out = topology.capacity_gbps[topology.src == node]
        tiers = topology.link_tier[topology.src == node]
        assert out[tiers == LINK_TIER["border"]].sum() >= out[tiers == LINK_TIER["wan"]].sum()


def test_bill_of_materials_adds_border_and_wan(small):
    _, ev = small
    site_total = sum(e.bom.total_usd for e in ev.sites)
    categories = ev.bom.by_category()
    assert categories["wan"] == 2 * 4 * 1000
    border = [l for l in ev.bom.lines if l.tier == "border"]
    assert {l.category for l in border} == {"switches", "transceivers"}
    assert ev.bom.total_usd == pytest.approx(site_total + sum(l.price_usd for l in border) + categories["wan"])


def test_pipeline_crossing_sends_only_the_stage_boundary():
    multi = load(spec(crossing="pp"))
    assert [s.design.workload.parallelism["pp"] for s in multi.sites] == [2, 2]
    assert [s.design.workload.parallelism["dp"] for s in multi.sites] == [32, 32]
    ev = sites.evaluate(multi, CATALOG)
    arch = multi.workload.training.model
    assert ev.cross.exchange.bytes_per_site == arch.seq_len * arch.hidden * 2 * 32
    assert ev.training.step_s >= ev.cross.local_step_s
    assert [r.sync.scheme for r in ev.requirements] == ["sync"]
    assert ev.curve[1]["sync"][-1] > 0.999


@pytest.mark.parametrize("change, expected", [
    (lambda d: d["sites"][0]["cluster"].update(gpus=516), "sites[0].cluster.gpus: 516 GPUs is not a whole number"),
    (lambda d: d["sites"][1]["cluster"].update(gpus=496) or d["workload"]["parallelism"].pop("dp"),
     "sites[1].cluster: site west's 496 GPUs are not a whole number of model replicas"),
    (lambda d: d["wan"]["links"][0].update(between=["east", "mars"]), "no site named 'mars'"),
    (lambda d: d["wan"]["links"][0].update(between=["east", "east"]), "joins two different sites"),
    (lambda d: d["wan"]["links"][0].update(latency_ms=3), "distance_km or its one-way latency_ms"),
    (lambda d: d["wan"].update(crossing="pp", sync="diloco"), "crossing: pp keeps data parallelism"),
    (lambda d: d["sites"][1].update(name="east"), "two sites are named 'east'"),
    (lambda d: d["sites"][1]["fabric"].update(topology="railx"), "RailX site has no switch tier"),
    (lambda d: d["workload"].update(collectives=[{"name": "g", "op": "allreduce", "group": "dp", "size": "1GiB"}]),
     "the dp group crosses sites"),
    (lambda d: d["workload"].pop("model") and d["workload"].pop("training"), "needs the training-step model"),
    (lambda d: d.update(cluster={"server": "dgx-h100", "gpus": 8}), "unknown key 'cluster'"),
    (lambda d: d["wan"].update(border_switch="nvidia-qm9701"), "unknown switch 'nvidia-qm9701'"),
])
def test_bad_multi_site_specs(change, expected):
    data = copy.deepcopy(spec())
    change(data)
    found = problems(data)
    assert any(expected in p for p in found), found
    assert all(p.startswith("two.yaml") for p in found)


def test_too_many_sites_are_refused_before_any_work():
    data = spec()
    data["sites"] = [{"name": f"s{i}", "cluster": {"server": "dgx-h100", "gpus": 512},
                      "fabric": {"topology": "fat-tree", "switch": "nvidia-qm9700"}} for i in range(40)]
    assert any("40 sites; topoplan models at most 16" in p for p in problems(data))


def test_pipeline_crossing_needs_equal_sites():
    data = spec(crossing="pp")
    data["sites"][1]["cluster"]["gpus"] = 1024
    data["workload"]["parallelism"]["dp"] = 48
    data["workload"]["training"]["global_batch"] = 384
    assert any("equal GPU counts" in p for p in problems(data))


def test_site_without_wan_path():
    data = spec()
    data["sites"].append({"name": "north", "cluster": {"server": "dgx-h100", "gpus": 512},
                          "fabric": {"topology": "fat-tree", "switch": "nvidia-qm9700"}})
    data["workload"]["parallelism"]["dp"] = 48
    data["workload"]["training"]["global_batch"] = 384
    assert any("north have no WAN path" in p for p in problems(data))


def test_cli_reports_a_multi_site_design(in_root, tmp_path):
    design = "designs/llama3-405b-2-sites.yaml"
    for fmt in ("table", "markdown"):
        result = invoke("report", design, "--format", fmt)
        assert result.exit_code == 0, result.stderr
        assert "WAN bandwidth needed" in result.output and "latency-bound" not in result.output
    result = invoke("report", design, "--format", "json", "-o", str(tmp_path / "r.json"), "--plots", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["design"]["topology"] == "multi-site" and report["design"]["gpus"] == 131072
    assert report["fabric"]["switches"]["by_tier"]["border"] >= 2
    assert report["training"]["cross_site"]["scheme"] == "diloco"
    assert (tmp_path / "llama3-405b-2-sites-wan.png").stat().st_size > 10_000
    assert invoke("check", design).exit_code == 0
    out = tmp_path / "joined.json"
    assert invoke("build", design, "-o", str(out)).exit_code == 0
    assert json.loads(out.read_text())["links"]["tier"].count("wan") == 16


def test_one_site_commands_refuse_a_multi_site_spec(in_root):
    result = invoke("resilience", "designs/llama3-405b-2-sites.yaml")
    assert result.exit_code == 2
    assert "this spec has sites" in result.stderr and "Traceback" not in result.stderr


def test_optimizer_varies_site_count_wan_capacity_and_scheme(in_root):
    """designs/spaces/sites.yaml: one site, or 2 and 3 sites x 3 WAN capacities x 2 schemes = 13 candidates.
    More WAN never slows a step down, DiLoCo never loses to per-step sync, and a 3-site split of 6,144 GPUs
    is three 2,048-GPU two-tier fabrics (cheaper per GPU than one three-tier fabric, border and WAN included)."""
    from topoplan.optimize.search import search
    from topoplan.optimize.space import load_space

    result = search(load_space("designs/spaces/sites.yaml", CATALOG), catalog=CATALOG)
    figures = {o.name: o.figures for o in result.feasible}
    assert len(figures) == 13 and not result.reasons
    one = figures["fat-tree-dgx-h100-nvidia-qm9700-6144-o1-p1"]
    for count in (2, 3):
        for sync in ("sync", "diloco100"):
            steps = [figures[f"fat-tree-dgx-h100-nvidia-qm9700-6144-o1-p1-s{count}-w{w}-{sync}"]["step_time_s"]
                     for w in (800, 3200, 12800)]
            assert steps == sorted(steps, reverse=True)
        for w in (800, 3200, 12800):
            name = f"fat-tree-dgx-h100-nvidia-qm9700-6144-o1-p1-s{count}-w{w}"
            assert figures[name + "-diloco100"]["step_time_s"] <= figures[name + "-sync"]["step_time_s"]
            assert figures[name + "-sync"]["sites"] == count
    three = figures["fat-tree-dgx-h100-nvidia-qm9700-6144-o1-p1-s3-w800-sync"]
    assert one["tiers"] == 3 and three["tiers"] == 3        # 2 fabric tiers + the border
    assert three["cost_per_gpu_usd"] < one["cost_per_gpu_usd"]


def test_sites_doc_is_current():
    """docs/sites.md is what docs/sites_study.py computes now (regenerate it after a model change)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(root / "docs" / "sites_study.py"), "--check"], capture_output=True,
                          text=True)
    assert done.returncode == 0, "run python docs/sites_study.py" + done.stderr
