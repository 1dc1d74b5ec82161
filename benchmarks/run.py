"""Performance budgets of DESIGN section 11, measured side by side in one run.

    python benchmarks/run.py                 all cases, a table on stdout
    python benchmarks/run.py --markdown F    also write the table and the machine to F (docs/performance.md)
    python benchmarks/run.py --case NAME     one case in this process (used internally)

Each case runs in a fresh subprocess so that its peak memory (max RSS, imports included) is its own.
Budgets are checked here, never in the test suite: machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _load(spec: str):
    from topoplan.catalog import load_catalog
    from topoplan.spec import load_design

    catalog = load_catalog()
    return load_design(str(ROOT / spec), catalog), catalog


def _generate_bom(spec: str):
    from topoplan.cost import bill_of_materials
    from topoplan.generators import generate

    design, catalog = _load(spec)
    start = time.perf_counter()
    topology = generate(design, catalog)
    bom = bill_of_materials(topology, design, catalog)
    elapsed = time.perf_counter() - start
    return elapsed, {"gpus": design.gpus, "nodes": topology.num_nodes, "links": topology.num_links,
                     "switches": bom.quantity("switches"), "ocs": bom.quantity("ocs"),
                     "cost_per_gpu_usd": round(bom.total_usd / design.gpus)}


def case_generate_bom_131k():
    """Generate + bill of materials: 131,072-GPU three-tier rail-optimized fabric, two planes of 64x800G switches run as 128x400G."""
    return _generate_bom("benchmarks/specs/report-131k.yaml")


def case_generate_bom_fat_tree_131k():
    """Generate + bill of materials: 131,072-GPU fat-tree, two planes of three tiers (designs/fat-tree-131k-twin-plane.yaml)."""
    return _generate_bom("designs/fat-tree-131k-twin-plane.yaml")


def case_generate_bom_railx_100k():
    """Generate + bill of materials: RailX, 100,352 chips on a 112 x 112 grid of 8-chip nodes (designs/railx-100k.yaml)."""
    return _generate_bom("designs/railx-100k.yaml")


def case_generate_bom_fat_tree_524k():
    """Generate + bill of materials: 524,288-GPU three-tier fat-tree of 128-port switches (benchmarks/specs/fat-tree-524k.yaml), the most three tiers of 128 ports hold; budget 5 s and 4 GiB."""
    return _generate_bom("benchmarks/specs/fat-tree-524k.yaml")


def case_full_report_131k():
    """Full report on the same 131,072-GPU rail-optimized fabric: ring and hierarchical allreduce over dp and the world, all-to-all over ep=64, a world allreduce under NCCL's tuner (channel rings, trees, NVLS-Tree), bisection and a random permutation."""
    from topoplan.pipeline import evaluate
    from topoplan.report import build_report

    design, catalog = _load("benchmarks/specs/report-131k.yaml")
    start = time.perf_counter()
    report = build_report(evaluate(design, catalog))
    elapsed = time.perf_counter() - start
    figures = {c["name"] + " busbw GB/s": round(c["busbw_GBps"], 2) for c in report["collectives"]}
    figures["world-auto chosen"] = "{algorithm}/{protocol}".format(**report["collectives"][-1])
    figures["engine"] = report["collectives"][0]["engine"]
    return elapsed, figures


def case_nccl_sweep_16k():
    """nccl-tests style sweep, 24 sizes (8 B to 64 MiB), world AllReduce over 16,384 GPUs (designs/fat-tree-16k.yaml), every candidate algorithm routed once; budget 10 s."""
    from topoplan.generators import generate
    from topoplan.sweep import sizes_from, sweep

    design, catalog = _load("designs/fat-tree-16k.yaml")
    start = time.perf_counter()
    result = sweep(design, catalog, "allreduce", "world", sizes_from(8, 64 * 2**20, 2), topology=generate(design, catalog))
    elapsed = time.perf_counter() - start
    last = result.rows[-1]
    return elapsed, {"sizes": len(result.rows), "64 MiB busbw GB/s": round(last.busbw_GBps, 1),
                     "64 MiB choice": f"{last.algorithm}/{last.protocol}", "8 B choice": result.rows[0].algorithm}


def _refused_quickly(spec: str, within_s: float, cut: str):
    """Evaluate ``spec``, which must be refused up front: (seconds, the refusal's first clause, passed)."""
    from topoplan.errors import TopoplanError
    from topoplan.pipeline import evaluate

    design, catalog = _load(spec)
    start = time.perf_counter()
    try:
        evaluate(design, catalog)
        outcome = "routed"
    except TopoplanError as err:
        outcome = "refused: " + err.problems[0].message.split(cut)[0]
    elapsed = time.perf_counter() - start
    return elapsed, {"outcome": outcome}, outcome.startswith("refused") and elapsed < within_s


def case_hash_a2a_16k():
    """ecmp-hash, 8 seeds x 4 queue pairs, world all-to-all over 16,384 GPUs (benchmarks/specs/hash-a2a-16k.yaml): over a billion flows, so it must be refused, with its estimate, in under a second."""
    return _refused_quickly("benchmarks/specs/hash-a2a-16k.yaml", 1.0, ";")


def fairshare_a2a_4k(check: bool = True) -> dict:
    """The fair-share benchmark's steps, timed one by one (also run by the slow test in
    tests/test_fairshare.py): build the fabric, compile the world all-to-all's phase as the pipeline does
    (NCCL's PXN where the layout has it), list ecmp-hash's paths for the first seed, solve max-min fair
    completion times. ``check``: route the same demand with ``hashed.route`` (not timed) for the hottest
    arc's load over its capacity, the bound the last flow must meet."""
    from topoplan.flow import fairshare, hashed
    from topoplan.flow.algorithms import plan_workload
    from topoplan.flow.traffic import apply_pxn
    from topoplan.pipeline import build

    design, catalog = _load("benchmarks/specs/hash-a2a-4k.yaml")
    qps = design.routing.qps
    start = time.perf_counter()
    topology, _bom = build(design, catalog)
    (plan,), = plan_workload(topology, design)
    phase, = plan.phases
    demand = apply_pxn(topology, phase.demand) if topology.layout.pxn else phase.demand
    built = time.perf_counter()
    paths = hashed.flow_paths(topology, demand, seed=0, qps=qps)
    listed = time.perf_counter()
    capacity = topology.capacity_gbps * 1e9 / 8
    times = fairshare.solve(paths, capacity)
    solved = time.perf_counter()
    out = {"elapsed": solved - start, "build s": built - start, "paths s": listed - built, "solve s": solved - listed,
           "flows": paths.num_flows, "entries": paths.num_entries, "layout": "rows" if paths.rows is not None else "csr",
           "events": times.events, "rounds": times.rounds,
           "last": float(times.completion_s.max()), "mean": float(times.completion_s.mean()),
           "estimate": fairshare.entries_estimate(topology, demand, qps), "tiers": topology.layout.tiers,
           "peak MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}   # before the untimed check
    del paths, times
    if check:
        load = hashed.route(topology, demand, seed=0, qps=qps).load
        out["bound"] = float((load / capacity).max())
    return out


def case_fairshare_a2a_4k():
    """Max-min fair completion times (flow/fairshare.py) of ecmp-hash's flows, one seed, one queue pair: world all-to-all of 1 GiB over 4,096 DGX H100 GPUs (benchmarks/specs/hash-a2a-4k.yaml; 64-port switches, so three tiers: two hold 2,048), fabric built, demand compiled, paths listed and solved (issue 23: <= 10 s); the last flow must equal the hottest arc's load over its capacity (1e-6)."""
    run = fairshare_a2a_4k()
    last, bound = run["last"], run["bound"]
    equal = last >= bound * (1 - 1e-9) and abs(last / bound - 1) <= 1e-6
    figures = {"tiers": run["tiers"], "flows": run["flows"], "entries": run["entries"], "estimated entries": run["estimate"],
               "events": run["events"], "rounds": run["rounds"],
               "build + demand s": round(run["build s"], 2), "paths s": round(run["paths s"], 2),
               "solve s": round(run["solve s"], 2), "last ms": round(last * 1e3, 4),
               "mean ms": round(run["mean"] * 1e3, 4), "hottest arc bound ms": round(bound * 1e3, 4),
               "last = bound": equal, "layout": run["layout"], "peak MiB (timed steps)": round(run["peak MiB"])}
    return run["elapsed"], figures, equal and run["elapsed"] <= 10.0


def case_ecmp_refusal_100k():
    """Generic ECMP on 100,352 RailX chips whose rails all share one ring (tests/hostile/railx-naive-100k.yaml): no closed form applies and the search would take hours, so the report must be refused up front with its estimate."""
    return _refused_quickly("tests/hostile/railx-naive-100k.yaml", 10.0, ":")


def case_ecmp_search_rate():
    """The rate behind the generic ECMP search estimate (flow/ecmp.py MEASURED_OPS_PER_S): estimated multiply-adds against measured time, world ring phase, on a 2,048-chip naive RailX and a 4,096-GPU fat-tree with its structure hidden."""
    import dataclasses

    import numpy as np

    from topoplan.flow import ecmp
    from topoplan.flow.traffic import Demand
    from topoplan.pipeline import build

    import yaml

    from topoplan.catalog import load_catalog
    from topoplan.spec import design_from_data

    catalog = load_catalog()
    naive = yaml.safe_load((ROOT / "tests/hostile/railx-naive-100k.yaml").read_text())
    naive["cluster"]["gpus"] = naive["workload"]["parallelism"]["dp"] = 2048
    naive["fabric"]["railx"].update(columns=16, rows=16)
    fat_tree = yaml.safe_load((ROOT / "designs/fat-tree-16k.yaml").read_text())
    fat_tree["cluster"]["servers"] = 512
    fat_tree.pop("workload")
    figures, total_s, total_ops = {}, 0.0, 0
    for label, data, hide in (("railx-naive-2k", naive, False), ("fat-tree-4k", fat_tree, True)):
        design = design_from_data(data, catalog)
        topology, _ = build(design, catalog)
        if hide:
            topology = dataclasses.replace(topology, layout=dataclasses.replace(topology.layout, tree=None, grid=None))
        gpus = topology.gpus
        demand = Demand(gpus, np.roll(gpus, 1), 1e9)
        ops = ecmp.search_ops(topology, gpus.size)
        start = time.perf_counter()
        ecmp.route(topology, demand)
        seconds = time.perf_counter() - start
        figures[label] = f"{ops:.2g} ops in {seconds:.1f} s = {ops / seconds:.2g}/s"
        total_s, total_ops = total_s + seconds, total_ops + ops
    figures["estimate uses"] = f"{ecmp.MEASURED_OPS_PER_S:.0e}/s"
    return total_s, figures


def case_graphml_131k():
    """build -o x.graphml of the 131,072-GPU fat-tree (designs/fat-tree-131k-twin-plane.yaml): refused up front with the memory estimate (it took 144 s and 9.7 GB through networkx)."""
    from click.testing import CliRunner

    from topoplan.cli import main

    start = time.perf_counter()
    result = CliRunner().invoke(main, ["build", str(ROOT / "designs/fat-tree-131k-twin-plane.yaml"), "-o",
                                       "/tmp/topoplan-bench.graphml"])
    elapsed = time.perf_counter() - start
    refused = result.exit_code == 2 and "GiB of memory" in result.stderr
    return elapsed, {"exit": result.exit_code, "refused with estimate": refused}, refused and elapsed < 20


def case_optimal_1k():
    """optimal LP (OR-Tools PDLP), 1,024-GPU two-tier fat-tree, world all-to-all and ring allreduce; latency 0, so busbw must equal the analytic optimum, the 50 GB/s NIC rate times the transport's payload share (InfiniBand, 4096-byte MTU)."""
    from topoplan.flow.metrics import network_goodput
    from topoplan.pipeline import evaluate

    design, catalog = _load("benchmarks/specs/optimal-1k.yaml")
    start = time.perf_counter()
    evaluation = evaluate(design, catalog, latency_scale=0.0)
    elapsed = time.perf_counter() - start
    optimum = 50.0 * network_goodput(design, catalog, evaluation.topology)
    figures = {c.plan.collective.name + " busbw GB/s": round(c.busbw_GBps, 6) for c in evaluation.collectives}
    figures["optimum GB/s"] = round(optimum, 6)
    figures["max utilization"] = round(max(c.max_link_utilization for c in evaluation.collectives), 9)
    exact = all(abs(c.busbw_GBps - optimum) <= 1e-6 * optimum for c in evaluation.collectives)
    return elapsed, figures, exact


def _railx_world_alltoall(spec: str):
    from topoplan.flow import RouteRequest, route, select_engine
    from topoplan.flow.traffic import Demand
    from topoplan.generators import generate

    design, catalog = _load(spec)
    topology = generate(design, catalog)
    demand = Demand(a2a_members=topology.gpus.reshape(1, -1), a2a_bytes=2**30 / topology.gpus.size)
    start = time.perf_counter()
    routed = route(topology, demand, "ecmp")
    elapsed = time.perf_counter() - start
    seconds = (routed.load / (topology.capacity_gbps * 1e9 / 8)).max()
    return elapsed, {"chips": int(topology.gpus.size), "arcs": topology.num_arcs, "engine": select_engine(topology, RouteRequest("ecmp")).name,
                     "unreachable": routed.unreachable_pairs, "busbw GB/s (latency 0)": round(
                         2**30 / seconds / 1e9 * (topology.gpus.size - 1) / topology.gpus.size, 1)}


def case_ecmp_railx_16k():
    """ecmp on a 16,384-chip RailX (64 x 32 grid of 8-chip nodes), world all-to-all, as the facade runs it (the railx engine, index build included)."""
    return _railx_world_alltoall("benchmarks/specs/railx-16k.yaml")


def case_ecmp_railx_100k():
    """ecmp on the 100,352-chip RailX (112 x 112 grid, designs/railx-100k.yaml), world all-to-all, as the facade runs it."""
    return _railx_world_alltoall("designs/railx-100k.yaml")


def case_railx_vs_generic_2k():
    """The railx engine against the generic ecmp engine on a 2,048-chip RailX (16 x 16 grid), world all-to-all: same loads (1e-9), and the speed-up."""
    import numpy as np

    from topoplan.flow import ecmp, railx
    from topoplan.flow.traffic import Demand
    from topoplan.generators import generate
    from topoplan.spec import design_from_data

    _, catalog = _load("benchmarks/specs/railx-16k.yaml")
    design = design_from_data({"name": "railx-2k", "cluster": {"server": "railx-node-8", "gpus": 2048},
                               "fabric": {"topology": "railx",
                                          "railx": {"columns": 16, "rows": 16, "ocs": "polatis-7000-384"}}}, catalog)
    topology = generate(design, catalog)
    demand = Demand(a2a_members=topology.gpus.reshape(1, -1), a2a_bytes=2**30 / topology.gpus.size)
    start = time.perf_counter()
    fast = railx.route(topology, demand).load
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    generic = ecmp.route(topology, demand).load
    generic_s = time.perf_counter() - start
    same = bool(np.allclose(fast, generic, rtol=1e-9, atol=1e-9 * generic.max()))
    return ours_s, {"generic ecmp s": round(generic_s, 2), "speedup": round(generic_s / ours_s),
                    "same loads": same}, same


def _networkx_per_flow_ecmp(topology, src, dst):
    """The baseline: networkx, one flow at a time, every shortest path weighted by its per-hop split."""
    import itertools

    import networkx as nx
    import numpy as np

    graph = nx.MultiDiGraph()
    graph.add_nodes_from(range(topology.num_nodes))
    for arc, (a, b) in enumerate(zip(topology.src.tolist(), topology.dst.tolist())):
        graph.add_edge(a, b, key=arc)
    load = np.zeros(topology.num_arcs)
    for s, t in zip(src.tolist(), dst.tolist()):
        to_t = nx.single_target_shortest_path_length(graph, t)
        for path in nx.all_shortest_paths(graph, s, t):
            weight = 1.0
            for u, v in itertools.pairwise(path):
                on_path = sum(1 for _, x in graph.out_edges(u) if to_t.get(x, -9) == to_t[u] - 1)
                weight *= len(graph[u][v]) / on_path
            for u, v in itertools.pairwise(path):
                for arc in graph[u][v]:
                    load[arc] += weight / len(graph[u][v])
    return load


def _baseline(gpus: int):
    import numpy as np

    from topoplan.catalog import load_catalog
    from topoplan.flow import route
    from topoplan.flow.traffic import Demand
    from topoplan.generators import generate
    from topoplan.spec import design_from_data

    catalog = load_catalog()
    design = design_from_data({"name": "baseline", "cluster": {"server": "dgx-h100", "gpus": gpus},
                               "fabric": {"topology": "fat-tree", "switch": "nvidia-qm9700"}}, catalog)
    topology = generate(design, catalog)
    rng = np.random.default_rng(0)
    src = topology.gpus
    dst = rng.permutation(src)
    keep = src != dst
    demand = Demand(src[keep], dst[keep], 1.0)
    start = time.perf_counter()
    ours = route(topology, demand).load
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    theirs = _networkx_per_flow_ecmp(topology, src[keep], dst[keep])
    theirs_s = time.perf_counter() - start
    same = bool(np.allclose(ours, theirs, rtol=1e-9, atol=1e-9))
    speedup = theirs_s / ours_s
    return ours_s, {"networkx s": round(theirs_s, 2), "speedup": round(speedup), "same loads": same}, \
        speedup >= 100 and same


def case_baseline_1k():
    """Random permutation on 1,024 DGX H100 GPUs (two tiers): topoplan's ECMP against a plain networkx per-flow shortest-path (all paths, per-hop split) baseline; >= 100x faster, same loads."""
    return _baseline(1024)


def case_baseline_4k():
    """Random permutation on 4,096 DGX H100 GPUs (three tiers): topoplan's ECMP against the networkx per-flow baseline; >= 100x faster, same loads."""
    return _baseline(4096)


def case_scaling():
    """Growth of generate + ring allreduce evaluation from 8k to 128k GPUs (two-plane three-tier fat-tree, best of 3): log-log slope of time against GPUs <= 1.15."""
    import numpy as np

    from topoplan.catalog import load_catalog
    from topoplan.flow.metrics import evaluate_workload
    from topoplan.generators import generate
    from topoplan.spec import design_from_data

    catalog = load_catalog()
    sizes, times = [], []
    for gpus in (8192, 16384, 32768, 65536, 131072):
        design = design_from_data({
            "name": "scaling", "cluster": {"server": "hgx-b300", "gpus": gpus},
            "fabric": {"topology": "fat-tree", "switch": "nvidia-sn5600", "planes": 2, "tiers": 3},
            "workload": {"parallelism": {"tp": 8, "dp": gpus // 8},
                         "collectives": [{"name": "ring", "op": "allreduce", "group": "dp", "size": "1GiB"}]}},
            catalog)
        best = None
        for _ in range(3):
            start = time.perf_counter()
            evaluate_workload(generate(design, catalog), design, catalog)
            elapsed = time.perf_counter() - start
            best = elapsed if best is None else min(best, elapsed)
        sizes.append(gpus)
        times.append(best)
    slope = float(np.polyfit(np.log(sizes), np.log(times), 1)[0])
    figures = {f"{s // 1024}k s": round(t, 3) for s, t in zip(sizes, times)}
    figures["slope"] = round(slope, 3)
    return sum(times), figures, slope <= 1.15


def case_optimize_360():
    """Optimizer: 360 candidates from 1k to 131k GPUs (3 topologies, 4 switches, 2 servers, 3 ratios), two worker processes; budget 5 minutes."""
    from topoplan.catalog import load_catalog
    from topoplan.optimize.search import search
    from topoplan.optimize.space import load_space

    space = load_space(str(ROOT / "benchmarks/specs/space-360.yaml"), load_catalog())
    start = time.perf_counter()
    result = search(space, workers=2)
    elapsed = time.perf_counter() - start
    data = result.to_json()
    return elapsed, {"candidates": len(result.outcomes), "feasible": len(data["candidates"]),
                     "infeasible": data["infeasible"]["count"], "pareto": len(data["pareto"])}


def case_optimize_headline():
    """Optimizer on the headline space (designs/spaces/headline.yaml): 16k and 131k GPUs, four topologies with RailX, CP-SAT sized fat-trees; two workers."""
    from topoplan.catalog import load_catalog
    from topoplan.optimize.search import search
    from topoplan.optimize.space import load_space

    space = load_space(str(ROOT / "designs/spaces/headline.yaml"), load_catalog())
    start = time.perf_counter()
    result = search(space, workers=2)
    elapsed = time.perf_counter() - start
    data = result.to_json()
    return elapsed, {"candidates": len(result.outcomes), "feasible": len(data["candidates"]),
                     "sized": sum("-sized-" in c["name"] for c in data["candidates"]), "pareto": len(data["pareto"])}


def case_resilience_switches_16k():
    """Every single switch failure on the 16,384-GPU three-tier fat-tree (designs/fat-tree-16k.yaml): symmetry classes, two runs per class, each re-routing the whole workload with the switch down (issue 16: <= 60 s)."""
    from topoplan.pipeline import build
    from topoplan.resilience import assess
    from topoplan.spec import FailurePolicy, Scenario

    design, catalog = _load("designs/fat-tree-16k.yaml")
    start = time.perf_counter()
    topology, _bom = build(design, catalog)
    result = assess(topology, design, catalog, FailurePolicy((Scenario("every-switch", "switch", "every"),)))
    elapsed = time.perf_counter() - start
    scenario = result.scenarios[0]
    return elapsed, {"switches": scenario.elements, "classes": scenario.classes, "runs": scenario.runs,
                     "split classes": scenario.split_classes, "stop fraction": round(scenario.stop_fraction, 4)}


def case_resilience_two_links_131k():
    """100 random two-link failures on the 131,072-GPU twin-plane fat-tree (designs/fat-tree-131k-twin-plane.yaml), each re-routing the whole workload with both links down, on 2 workers (issue 16: <= 120 s)."""
    from topoplan.pipeline import build
    from topoplan.resilience import assess
    from topoplan.spec import FailurePolicy, Scenario

    design, catalog = _load("designs/fat-tree-131k-twin-plane.yaml")
    start = time.perf_counter()
    topology, _bom = build(design, catalog)
    policy = FailurePolicy((Scenario("two-links", "link", "random", count=2, samples=100, seed=16),))
    result = assess(topology, design, catalog, policy, workers=2)
    elapsed = time.perf_counter() - start
    scenario = result.scenarios[0]
    worst = scenario.worst(lambda o: o.worst_slowdown)
    return elapsed, {"links": scenario.elements, "runs": scenario.runs,
                     "stop fraction": round(scenario.stop_fraction, 4),
                     "worst slowdown": None if worst is None else round(worst, 4)}


def case_training_step_405b_131k():
    """Training-step model of a 405B-class dense model on 131,072 GPUs (designs/llama3-405b-131k.yaml): the fabric generated, the step's collectives derived and routed, compute, bubble and overlap (issue 15: <= 5 s)."""
    from topoplan.pipeline import build
    from topoplan.training import evaluate_step

    design, catalog = _load("designs/llama3-405b-131k.yaml")
    start = time.perf_counter()
    topology, _bom = build(design, catalog)
    step = evaluate_step(topology, design, catalog)
    elapsed = time.perf_counter() - start
    return elapsed, {"step s": round(step.step_s, 3), "MFU": round(step.mfu, 4), "collectives": len(step.collectives)}


def _sites_report(mixed: bool):
    import yaml

    from topoplan import sites
    from topoplan.catalog import load_catalog
    from topoplan.report import build_report
    from topoplan.report.writers import render

    data = yaml.safe_load((ROOT / "designs" / "llama3-405b-2-sites.yaml").read_text())
    if mixed:   # the second site on another fabric, so that nothing is shared between the two evaluations
        data["sites"][1]["fabric"] = {"topology": "rail-optimized", "switch": "nvidia-sn5600", "tiers": 3}
    catalog = load_catalog()
    start = time.perf_counter()
    multi = sites.multi_site_from_data(data, catalog)
    report = build_report(sites.evaluate(multi, catalog))
    render(report, "json")
    elapsed = time.perf_counter() - start
    return elapsed, {"GPUs": multi.gpus, "switches": report["fabric"]["switches"]["total"],
                     "step s": round(report["training"]["step_time_s"], 3),
                     "WAN for 90% (sync)": f"{report['wan_requirement']['schemes'][0]['needed_gbps']['0.9']:,.0f} Gb/s"}


def case_sites_report_2x64k():
    """Full report of designs/llama3-405b-2-sites.yaml: two 65,536-GPU fat-tree sites (equal, so evaluated once), border tier, WAN step term and the bandwidth each scheme needs (issue 17: <= 10 s)."""
    return _sites_report(mixed=False)


def case_sites_report_2x64k_mixed():
    """The same with the second site rail-optimized, so both 64k-GPU sites are built, routed and stepped (issue 17: <= 10 s)."""
    return _sites_report(mixed=True)


def case_scale_8_sizes():
    """`topoplan scale` of the 405B job over 8 sizes, 1,024 to 131,072 GPUs, each a full pipeline run with the step model (issue 15: <= 30 s)."""
    from topoplan.catalog import load_catalog
    from topoplan.scaling import scale_design

    catalog = load_catalog()
    start = time.perf_counter()
    study = scale_design("designs/llama3-405b-131k.yaml", catalog, [1024 << i for i in range(8)])
    elapsed = time.perf_counter() - start
    ran = [p for p in study.points if not p.infeasible]
    return elapsed, {"sizes": len(study.points), "ran": len(ran),
                     "MFU 1k -> 131k": f"{ran[0].mfu:.3f} -> {ran[-1].mfu:.3f}"}


def case_optimize_training_216():
    """Optimizer: 216 (fabric x layout) candidates of designs/spaces/training.yaml (24 fabrics x 9 parallel layouts of a 70B job at 2k and 8k GPUs), each with the training-step model, ranked by cost per million tokens, two worker processes (issue 15: 200 candidates <= 5 min)."""
    from topoplan.optimize.search import search
    from topoplan.optimize.space import load_space

    _design, catalog = _load("designs/fat-tree-1k.yaml")
    space = load_space("designs/spaces/training.yaml", catalog)
    start = time.perf_counter()
    result = search(space, workers=2).to_json()
    elapsed = time.perf_counter() - start
    best = result["ranking"][0]
    return elapsed, {"candidates": len(result["candidates"]) + result["infeasible"]["count"],
                     "feasible": len(result["candidates"]), "best": best}


def case_optimize_360_dask():
    """Optimizer: the 360-candidate space (benchmarks/specs/space-360.yaml) on a Dask LocalCluster of 2 single-threaded worker processes against one of 1 worker (issue 18: >= 1.8x on 2 cores), cluster start-up included in both, and against one process without Dask; the JSON must be byte-identical in all three."""
    from topoplan.catalog import load_catalog
    from topoplan.executors import DaskExecutor, ProcessExecutor
    from topoplan.optimize.search import search
    from topoplan.optimize.space import load_space
    from topoplan.report.writers import render_optimize

    catalog = load_catalog()
    space = load_space(str(ROOT / "benchmarks/specs/space-360.yaml"), catalog)

    def timed(executor):
        start = time.perf_counter()
        out = render_optimize(search(space, executor=executor, catalog=catalog, keep_infeasible=False).to_json(), "json")
        return time.perf_counter() - start, out

    one_process_s, one_process = timed(ProcessExecutor(1))
    start = time.perf_counter()
    with DaskExecutor(2):   # the start-up alone, measured apart
        pass
    startup_s = time.perf_counter() - start
    one_s, one = timed(DaskExecutor(1))
    two_s, two = timed(DaskExecutor(2))
    speedup = one_s / two_s
    same = one_process == one == two
    return two_s, {"1 process s": round(one_process_s, 2), "LocalCluster(1) s": round(one_s, 2),
                   "LocalCluster(2) s": round(two_s, 2), "cluster start-up s": round(startup_s, 2),
                   "speedup over LocalCluster(1)": round(speedup, 2),
                   "speedup over 1 process": round(one_process_s / two_s, 2), "byte-identical": same}, \
        speedup >= 1.8 and same


def case_html_report_131k():
    """`topoplan report --format html -o` against `--format json -o`, end to end in one process (evaluation included), on the two shipped 131,072-GPU designs (designs/fat-tree-131k-twin-plane.yaml, designs/llama3-405b-131k.yaml) and benchmarks/specs/report-131k.yaml: median of 3 alternating runs after a warm-up; issue 22: the page <= 2 MB and written in <= 2x the JSON report's time."""
    import statistics
    import tempfile

    from click.testing import CliRunner

    from topoplan.cli import main

    figures, ok, total = {}, True, 0.0
    with tempfile.TemporaryDirectory() as folder:
        for spec in ("designs/fat-tree-131k-twin-plane.yaml", "designs/llama3-405b-131k.yaml",
                     "benchmarks/specs/report-131k.yaml"):
            times = {"json": [], "html": []}
            for fmt in ("json", "json", "html", "json", "html", "json", "html"):
                out = os.path.join(folder, f"r.{fmt}")
                start = time.perf_counter()
                result = CliRunner().invoke(main, ["report", str(ROOT / spec), "--format", fmt, "-o", out])
                elapsed = time.perf_counter() - start
                if result.exit_code:
                    raise RuntimeError(result.output)
                times[fmt].append(elapsed)
            json_s, html_s = statistics.median(times["json"][1:]), statistics.median(times["html"])
            size = os.path.getsize(os.path.join(folder, "r.html"))
            name = Path(spec).stem
            figures[f"{name} json s"] = round(json_s, 2)
            figures[f"{name} html s"] = round(html_s, 2)
            figures[f"{name} ratio"] = round(html_s / json_s, 2)
            figures[f"{name} html kB"] = round(size / 1e3, 1)
            ok = ok and html_s <= 2 * json_s and size <= 2 * 2**20
            total += html_s
    return total, figures, ok


def stream_space(path: Path) -> Path:
    """10^5 small candidates: 8 to 1,000 GPUs x 2 servers x 2 families x 5 switches x 20 ratios x 2 planes."""
    import yaml

    space = {"name": "stream-100k", "description": "10^5 cheap candidates (benchmarks/run.py stream-100k)",
             "gpus": [8 * k for k in range(1, 126)], "servers": ["dgx-h100", "dgx-b200"],
             "topologies": ["fat-tree", "rail-only"],
             "switches": ["nvidia-qm9700", "broadcom-th5-64x800g", "nvidia-sn5600", "nvidia-qm8700", "generic-48x400g"],
             "oversubscription": list(range(1, 21)), "planes": [1, 2],
             "workload": {"parallelism": {"tp": 8},
                          "collectives": [{"name": "grad-sync", "op": "allreduce", "group": "dp", "size": "1GiB",
                                           "algorithm": "ring"}]}}
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def case_stream_100k():
    """Optimizer streaming 10^5 cheap candidates (8-1,000 GPUs, generated by stream_space) on 2 worker processes, no cache: candidates generated lazily, at most 8 in flight, infeasible ones only counted; peak RSS of this process and of the largest worker (issue 18: <= 1 GiB)."""
    import tempfile

    from topoplan.catalog import load_catalog
    from topoplan.executors import ProcessExecutor
    from topoplan.optimize.search import search
    from topoplan.optimize.space import load_space
    from topoplan.report.writers import render_optimize

    catalog = load_catalog()
    with tempfile.TemporaryDirectory() as tmp:
        space = load_space(str(stream_space(Path(tmp) / "stream-100k.yaml")), catalog)
    start = time.perf_counter()
    result = search(space, executor=ProcessExecutor(2), catalog=catalog, keep_infeasible=False)
    text = render_optimize(result.to_json(), "json")
    elapsed = time.perf_counter() - start
    parent_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    data = json.loads(text)
    return elapsed, {"candidates": result.stats.tasks, "feasible": len(data["candidates"]),
                     "infeasible": data["infeasible"]["count"], "JSON MiB": round(len(text) / 2**20, 1),
                     "parent peak MiB": round(parent_mib), "largest worker peak MiB": round(child_mib),
                     "per candidate ms": round(elapsed / result.stats.tasks * 1e3, 3)}, \
        max(parent_mib, child_mib) <= 1024 and result.stats.tasks == 100_000


def _export_131k(fmt: str):
    """One export of the 131k benchmark fabric, generation included (as `topoplan export` runs it)."""
    from topoplan.interop import ExportOptions, export
    from topoplan.pipeline import build

    design, catalog = _load("benchmarks/specs/report-131k.yaml")
    start = time.perf_counter()
    topology, _bom = build(design, catalog)
    result = export(topology, design, catalog, fmt, ExportOptions(suffix=".json"))
    elapsed = time.perf_counter() - start
    return elapsed, {"kB": round(sum(len(data) for _name, data in result.files) / 1e3), "summary": result.summary}


def _export_case(fmt: str):
    def case():
        return _export_131k(fmt)
    case.__doc__ = (f"topoplan export --to {fmt} of the 131,072-GPU rail-optimized fabric "
                    "(benchmarks/specs/report-131k.yaml), generation included (issue 19: <= 10 s).")
    return case


def case_import_ibnetdiscover_16k():
    """Import of a 16,384-GPU ibnetdiscover file (designs/fat-tree-16k.yaml as ibnetdiscover prints it, three tiers, 1,280 switches): parse, infer tiers, build the topology and its bill of materials (issue 19: <= 10 s); the report then equals the generated design's."""
    import tempfile

    from topoplan.cost import bill_of_materials
    from topoplan.generators import generate
    from topoplan.interop import export
    from topoplan.spec import design_from_data

    design, catalog = _load("designs/fat-tree-16k.yaml")
    text = export(generate(design, catalog), design, catalog, "ibnetdiscover").files[0][1]
    with tempfile.NamedTemporaryFile(suffix=".txt") as handle:
        handle.write(text)
        handle.flush()
        data = {"name": "imported-16k", "cluster": {"server": design.cluster.server},
                "fabric": {"topology": "imported", "file": handle.name}}
        start = time.perf_counter()
        imported = design_from_data(data, catalog)
        topology = generate(imported, catalog)
        bom = bill_of_materials(topology, imported, catalog)
        elapsed = time.perf_counter() - start
    return elapsed, {"file MB": round(len(text) / 1e6, 1), "lines": text.count(b"\n"), "gpus": imported.gpus,
                     "switches": bom.quantity("switches"), "family": topology.layout.family,
                     "bisection Gb/s": topology.layout.bisection_gbps}


CASES = {
    "generate-bom-131k": (case_generate_bom_131k, 1.0, 1024),
    "generate-bom-fat-tree-131k": (case_generate_bom_fat_tree_131k, 1.0, 1024),
    "generate-bom-railx-100k": (case_generate_bom_railx_100k, 5.0, None),
    "generate-bom-fat-tree-524k": (case_generate_bom_fat_tree_524k, 5.0, 4096),
    "full-report-131k": (case_full_report_131k, 5.0, 2048),
    "nccl-sweep-16k": (case_nccl_sweep_16k, 10.0, None),
    "hash-a2a-16k": (case_hash_a2a_16k, 60.0, None),
    "fairshare-a2a-4k": (case_fairshare_a2a_4k, 10.0, None),
    "graphml-131k": (case_graphml_131k, 20.0, 2048),
    "ecmp-refusal-100k": (case_ecmp_refusal_100k, 10.0, None),
    "ecmp-search-rate": (case_ecmp_search_rate, None, None),
    "ecmp-railx-16k": (case_ecmp_railx_16k, 60.0, None),
    "ecmp-railx-100k": (case_ecmp_railx_100k, None, None),
    "railx-vs-generic-2k": (case_railx_vs_generic_2k, None, None),
    "optimal-1k": (case_optimal_1k, 30.0, None),
    "baseline-1k": (case_baseline_1k, None, None),
    "baseline-4k": (case_baseline_4k, None, None),
    "scaling-8k-128k": (case_scaling, None, None),
    "optimize-360": (case_optimize_360, 300.0, None),
    "optimize-headline": (case_optimize_headline, None, None),
    "resilience-switches-16k": (case_resilience_switches_16k, 60.0, None),
    "resilience-two-links-131k": (case_resilience_two_links_131k, 120.0, None),
    "training-step-405b-131k": (case_training_step_405b_131k, 5.0, None),
    "sites-report-2x64k": (case_sites_report_2x64k, 10.0, None),
    "sites-report-2x64k-mixed": (case_sites_report_2x64k_mixed, 10.0, None),
    "scale-8-sizes": (case_scale_8_sizes, 30.0, None),
    "optimize-training-216": (case_optimize_training_216, 300.0, None),
    "optimize-360-dask": (case_optimize_360_dask, None, None),
    "stream-100k": (case_stream_100k, None, 1024),
    **{f"export-131k-{fmt}": (_export_case(fmt), 10.0, None)
       for fmt in ("slurm-tree", "slurm-block", "astra-sim", "simai", "htsim", "infragraph", "ibnetdiscover")},
    "import-ibnetdiscover-16k": (case_import_ibnetdiscover_16k, 10.0, None),
    "html-report-131k": (case_html_report_131k, None, None),
}


def run_case(name: str) -> dict:
    """Run one case; a case returns (seconds, figures) or (seconds, figures, its own pass/fail)."""
    func, budget_s, budget_mib = CASES[name]
    result = func()
    elapsed, figures = result[0], result[1]
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ok = (budget_s is None or elapsed <= budget_s) and (budget_mib is None or peak_mib <= budget_mib)
    if len(result) > 2:
        ok = ok and bool(result[2])
    return {"case": name, "doc": func.__doc__.strip(), "seconds": elapsed, "peak_mib": peak_mib,
            "budget_s": budget_s, "budget_mib": budget_mib, "figures": figures, "ok": ok}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def table(results: list[dict]) -> str:
    lines = ["| case | budget | measured | peak memory | figures | within budget |",
             "| --- | ---: | ---: | ---: | --- | --- |"]
    for r in results:
        budget = ", ".join(([f"<= {r['budget_s']:g} s"] if r["budget_s"] else []) +
                           ([f"<= {r['budget_mib']:,} MiB"] if r["budget_mib"] else [])) or "see case"
        figures = ", ".join(f"{k} {v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{k} {v}"
                            for k, v in r["figures"].items())
        lines.append(f"| {r['doc']} | {budget} | {r['seconds']:.2f} s | {r['peak_mib']:,.0f} MiB | {figures} | "
                     f"{'yes' if r['ok'] else 'NO'} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=sorted(CASES))
    parser.add_argument("--markdown", metavar="FILE")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return 0
    results = []
    for name in CASES:
        done = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True)
        if done.returncode:
            print(done.stderr, file=sys.stderr)
            return 1
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    text = table(results)
    print(text)
    print(f"\nmachine: {machine()}")
    if args.markdown:
        missed = [r["case"] for r in results if not r["ok"]]
        verdict = ("Every case is within its budget." if not missed else
                   "Not within budget: " + ", ".join(missed) + ". These stay open until they are.")
        target = Path(args.markdown)
        # the hand-written sections after the table (from the first "## " heading on) are kept
        kept = ""
        if target.exists():
            previous = target.read_text()
            at = previous.find("\n## ")
            kept = "\n" + previous[at + 1:] if at >= 0 else ""
        target.write_text(
            "# Performance\n\nMeasured by `python benchmarks/run.py --markdown docs/performance.md` "
            f"on {time.strftime('%Y-%m-%d')}, every case in a fresh process, one after another.\n\n"
            f"Machine: {machine()}.\n\n{text}\n\n{verdict}\n\n"
            "Peak memory is the process's maximum resident set size, Python and library imports included. "
            "The baseline cases time topoplan's `ecmp` as the facade runs it (the closed form on these "
            "trees) against networkx enumerating every shortest path of every flow; both give the same "
            "loads. The budgets come from the design document; no test asserts a time.\n" + kept)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
