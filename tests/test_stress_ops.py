"""The stress ops of issue 23: ``op: permutation`` (a seeded random derangement inside each group) and
``op: incast`` (ranks 1..N of each group to rank 0), held to closed forms computed here from the topology's
own arrays, not from the engines."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from topoplan.cli import main
from topoplan.errors import InfeasibleDesign
from topoplan.flow.algorithms import BY_KEY, derangements, plan_collective, plan_workload
from topoplan.flow.metrics import Timing, evaluate_collective
from topoplan.flow.placement import group_gpus
from topoplan.generators import generate
from topoplan.spec import Collective, load_design
from topoplan.topology import KIND

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = "tests/fixtures/stress-ops.yaml"
ZERO = Timing(latency_scale=0.0)  # bandwidth only
MiB = 2**20
DP_WORKLOAD = {"parallelism": {"tp": 8, "dp": 32}}   # 256 GPUs: dp groups of one GPU per server


def _design(make_design, catalog, cluster=None, fabric=None, collectives=(), parallelism=None):
    workload = {"parallelism": parallelism or DP_WORKLOAD["parallelism"], "collectives": list(collectives)}
    design = make_design(cluster=cluster or {"server": "dgx-h100", "gpus": 256},
                         fabric={"switch": "nvidia-qm9700", **(fabric or {})}, workload=workload)
    return design, generate(design, catalog)


def _flows(topology, design, collective):
    plan = plan_collective(topology, design, collective)
    assert len(plan.phases) == 1
    return plan, plan.phases[0].demand


def _time(topology, plan, engine="ecmp"):
    return evaluate_collective(topology, [plan], ZERO, engine, 4, 1).time_s


def _network(topology):
    """Per GPU its NIC and leaf; the NIC-leaf rate; per leaf its uplink count and rate; the GPU-NIC rate."""
    kind, src, dst, cap = topology.kind, topology.src, topology.dst, topology.capacity_gbps
    gpu_nic = (kind[src] == KIND["gpu"]) & (kind[dst] == KIND["nic"])
    nic_leaf = (kind[src] == KIND["nic"]) & (kind[dst] == KIND["switch"])
    nic_of = np.full(topology.num_nodes, -1)
    nic_of[src[gpu_nic]] = dst[gpu_nic]
    leaf_of = np.full(topology.num_nodes, -1)
    leaf_of[src[nic_leaf]] = dst[nic_leaf]
    leaves = np.unique(dst[nic_leaf])
    up = (kind[src] == KIND["switch"]) & (kind[dst] == KIND["switch"]) & np.isin(src, leaves)
    uplinks = np.bincount(src[up], minlength=topology.num_nodes)
    return (nic_of, leaf_of, float(cap[nic_leaf].min()), uplinks, float(cap[up].min()) if up.any() else math.inf,
            float(cap[gpu_nic].min()))


def _two_tier_ecmp_seconds(topology, src, dst, size):
    """The fractional-ECMP time of equal flows on a two-tier Clos, by hand: each GPU's host and NIC links
    carry what it sends and receives; each leaf's uplinks split the flows leaving it evenly, and the spines'
    links down to a leaf split the flows entering it evenly (every leaf has the same uplinks)."""
    nic_of, leaf_of, nic_gbps, uplinks, up_gbps, host_gbps = _network(topology)
    a, b = leaf_of[nic_of[src]], leaf_of[nic_of[dst]]
    assert (a >= 0).all() and (b >= 0).all()
    per_gpu = max(np.bincount(src).max(), np.bincount(dst).max())
    seconds = per_gpu * size * 8 / 1e9 / min(nic_gbps, host_gbps)
    cross = a != b
    if cross.any():
        most = max(np.bincount(a[cross]).max(), np.bincount(b[cross]).max())
        width = uplinks[np.unique(np.concatenate([a, b]))]
        assert (width == width[0]).all()
        seconds = max(seconds, most * size * 8 / 1e9 / (width[0] * up_gbps))
    return seconds


# --- the permutation itself ----------------------------------------------------------------------

@pytest.mark.parametrize("p", [2, 3, 4, 7, 32, 257])
def test_derangements_are_permutations_without_fixed_points(p):
    rows = derangements(50, p, seed=11)
    assert rows.shape == (50, p)
    assert (np.sort(rows, axis=1) == np.arange(p)).all()       # a permutation of the ranks
    assert not (rows == np.arange(p)).any()                   # nobody sends to itself
    if p == 2:
        assert (rows == [1, 0]).all()
    if p >= 4:
        assert len({tuple(r) for r in rows}) > 1              # the groups are drawn independently


def test_derangements_are_deterministic_per_seed():
    assert (derangements(8, 64, 5) == derangements(8, 64, 5)).all()
    assert (derangements(8, 64, 5) != derangements(8, 64, 6)).any()
    with pytest.raises(ValueError):
        derangements(1, 1, 0)


def test_derangements_are_uniform_over_the_derangements_of_three():
    """p = 3 has exactly two derangements, (1 2 0) and (2 0 1): each about half of many draws."""
    rows = derangements(20_000, 3, 0)
    first = (rows == [1, 2, 0]).all(axis=1).mean()
    assert ((rows == [1, 2, 0]).all(axis=1) | (rows == [2, 0, 1]).all(axis=1)).all()
    assert abs(first - 0.5) < 0.02


@pytest.mark.parametrize("group", ["dp", "tp", "world"])
def test_permutation_is_a_derangement_within_each_group(make_design, catalog, group):
    design, topology = _design(make_design, catalog)
    plan, demand = _flows(topology, design, Collective("c", "permutation", group, 16 * MiB, "auto", seed=4))
    members = group_gpus(topology, design, group)
    group_of = np.full(topology.num_nodes, -1)
    group_of[members.ravel()] = np.repeat(np.arange(members.shape[0]), members.shape[1])
    assert demand.src.size == members.size
    assert (np.sort(demand.src) == np.sort(members.ravel())).all()     # every GPU sends once
    assert (np.sort(demand.dst) == np.sort(members.ravel())).all()     # and receives once
    assert (demand.src != demand.dst).all()
    assert (group_of[demand.src] == group_of[demand.dst]).all()        # inside its own group
    assert (demand.bytes == 16 * MiB).all()
    assert plan.busbw_factor == 1.0 and plan.algorithm == "direct"


def test_same_seed_same_flows_other_seed_other_flows(make_design, catalog):
    design, topology = _design(make_design, catalog)

    def flows(seed):
        _, demand = _flows(topology, design, Collective("c", "permutation", "world", MiB, "auto", seed=seed))
        return demand.src[np.argsort(demand.src)], demand.dst[np.argsort(demand.src)]

    assert all((x == y).all() for x, y in zip(flows(3), flows(3)))
    assert (flows(3)[1] != flows(4)[1]).any()


# --- permutation times against the NIC bound -------------------------------------------------------

@pytest.mark.parametrize("group", ["dp", "world"])
def test_non_blocking_fat_tree_runs_a_permutation_at_nic_rate(make_design, catalog, group):
    """256 DGX H100 GPUs on 8 leaves and 4 spines, 400G: every GPU sends and receives exactly ``size``, so
    no permutation beats size / NIC rate; the fabric is non-blocking (checked from its arcs: every leaf has
    as many uplinks as NIC ports), so ECMP reaches the bound, and the LP (``optimal``) agrees."""
    design, topology = _design(make_design, catalog)
    nic_of, leaf_of, nic_gbps, uplinks, up_gbps, _ = _network(topology)
    ports = np.bincount(leaf_of[nic_of[topology.gpus]])
    leaves = np.flatnonzero(ports)
    assert (ports[leaves] * nic_gbps == uplinks[leaves] * up_gbps).all()   # non-blocking
    size = 16 * MiB
    bound = size * 8 / (nic_gbps * 1e9)
    for seed in range(4):
        plan, demand = _flows(topology, design, Collective("c", "permutation", group, size, "auto", seed=seed))
        assert (leaf_of[nic_of[demand.src]] != leaf_of[nic_of[demand.dst]]).any()  # it does cross the spines
        for engine in ("ecmp", "optimal", "clos"):
            assert _time(topology, plan, engine) == pytest.approx(bound, rel=1e-6)
        assert _time(topology, plan, "ecmp-hash") >= bound * (1 - 1e-9)   # collisions only slow it


def test_oversubscribed_permutation_is_slower_by_the_leaf_counts(make_design, catalog):
    """320 one-GPU servers on 4:1 leaves (32 down, 8 up): a random permutation sends most flows across
    leaves, so the time is the busiest leaf's crossing flows over its 8 uplinks, well above size / NIC."""
    design, topology = _design(make_design, catalog, cluster={"server": "generic-1gpu", "gpus": 320},
                               fabric={"switch": "nvidia-qm8700", "oversubscription": 4},
                               parallelism={"dp": 320})
    _, _, nic_gbps, _, _, _ = _network(topology)
    size = 4 * MiB
    bound = size * 8 / (nic_gbps * 1e9)
    for seed in (0, 1, 2):
        plan, demand = _flows(topology, design, Collective("c", "permutation", "world", size, "auto", seed=seed))
        expected = _two_tier_ecmp_seconds(topology, demand.src, demand.dst, size)
        assert expected > 3 * bound
        assert _time(topology, plan) == pytest.approx(expected, rel=1e-6)


def test_the_closed_form_helper_agrees_with_ecmp_on_the_non_blocking_fabric(make_design, catalog):
    design, topology = _design(make_design, catalog)
    plan, demand = _flows(topology, design, Collective("c", "permutation", "dp", MiB, "auto", seed=9))
    assert _time(topology, plan) == pytest.approx(_two_tier_ecmp_seconds(topology, demand.src, demand.dst, MiB),
                                                  rel=1e-6)


# --- incast ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("senders", [1, 5, 31, None])
def test_incast_takes_n_times_size_over_the_root_nic(make_design, catalog, senders):
    """dp groups of 32 GPUs on 32 servers: ``senders`` GPUs each send ``size`` into rank 0's one 400G NIC,
    which takes N x size / R; nothing else is that busy (one sender's NIC carries size)."""
    design, topology = _design(make_design, catalog)
    _, _, nic_gbps, _, _, _ = _network(topology)
    size = 4 * MiB
    plan, demand = _flows(topology, design, Collective("c", "incast", "dp", size, "auto", senders=senders))
    n = senders or 31
    members = group_gpus(topology, design, "dp")
    assert demand.src.size == n * members.shape[0]
    assert set(demand.dst.tolist()) == set(members[:, 0].tolist())
    assert np.isin(demand.src, members[:, 1:n + 1]).all() and (demand.src != demand.dst).all()
    expected = n * size * 8 / (nic_gbps * 1e9)
    for engine in ("ecmp", "optimal", "clos", "ecmp-hash"):
        assert _time(topology, plan, engine) == pytest.approx(expected, rel=1e-6)
    assert plan.busbw_factor == 1.0


def test_incast_inside_one_server_crosses_no_network(make_design, catalog):
    design, topology = _design(make_design, catalog)
    plan, demand = _flows(topology, design, Collective("c", "incast", "tp", MiB, "auto"))
    phase = plan.phases[0]
    assert (topology.server[demand.src] == topology.server[demand.dst]).all()
    assert (phase.intra_steps, phase.inter_steps) == (1, 0)
    plan, _ = _flows(topology, design, Collective("c", "incast", "dp", MiB, "auto"))
    assert (plan.phases[0].intra_steps, plan.phases[0].inter_steps) == (0, 1)


def test_incast_with_too_many_senders_is_refused_outside_the_spec(make_design, catalog):
    """A collective built in Python skips the spec's check; the planner refuses it itself."""
    design, topology = _design(make_design, catalog)
    with pytest.raises(InfeasibleDesign, match="32 senders, but a dp group of 32 ranks has 31 others"):
        plan_collective(topology, design, Collective("c", "incast", "dp", MiB, "auto", senders=32))


def test_the_table_lists_both_as_direct_and_outside_nccls_tuner():
    for op in ("permutation", "incast"):
        entry = BY_KEY[(op, "direct")]
        assert entry.default and not entry.nccl and entry.protocols == ("Simple",)


# --- specs and the pipeline --------------------------------------------------------------------------

def run(*args):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.usefixtures("in_root")
def test_bad_seed_and_senders_are_spec_errors_with_lines():
    code, _, err = run("validate", "tests/bad_specs/48-stress-op-keys.yaml")
    assert code == 2
    lines = err.splitlines()
    assert lines[0].startswith("tests/bad_specs/48-stress-op-keys.yaml:12: workload.collectives[0].seed: seed is a "
                               "key of op: permutation, not of allreduce (hint:")
    assert lines[1].startswith("tests/bad_specs/48-stress-op-keys.yaml:13: workload.collectives[1].senders: "
                               "senders is a key of op: incast, not of permutation")
    assert lines[2].startswith("tests/bad_specs/48-stress-op-keys.yaml:14: workload.collectives[2].senders: 32 "
                               "senders, but the dp group has 32 ranks: at most 31 others")
    code, _, err = run("validate", "tests/bad_specs/49-stress-op-types.yaml")
    assert code == 2
    assert [line.split(": ")[1] for line in err.splitlines()] == [
        "workload.collectives[0].seed", "workload.collectives[1].seed", "workload.collectives[2].senders",
        "workload.collectives[3].senders"]
    assert [line.split(":")[1] for line in err.splitlines()] == ["12", "13", "14", "15"]


@pytest.mark.usefixtures("in_root")
def test_the_fixture_runs_through_report_in_every_format(catalog, tmp_path):
    design = load_design(FIXTURE, catalog)
    by_name = {c.name: c for c in design.workload.collectives}
    assert by_name["world-permutation"].seed == 7 and by_name["dp-permutation"].seed == 0
    assert by_name["dp-incast"].senders == 8 and by_name["world-permutation"].senders is None
    for fmt in ("table", "markdown", "html"):
        code, _, err = run("report", FIXTURE, "--format", fmt, "-o", str(tmp_path / f"r.{fmt}"))
        assert code == 0, err
        assert "dp-incast" in (tmp_path / f"r.{fmt}").read_text()
    code, out, err = run("report", FIXTURE, "--format", "json")
    assert code == 0, err
    rows = {c["name"]: c for c in json.loads(out)["collectives"]}
    size = 16 * MiB
    assert rows["dp-permutation"]["op"] == "permutation"
    assert rows["dp-permutation"]["algbw_GBps"] == pytest.approx(rows["dp-permutation"]["busbw_GBps"])
    assert rows["dp-permutation"]["time_s"] >= size * 8 / 400e9
    assert rows["dp-incast"]["time_s"] >= 8 * 4 * MiB * 8 / 400e9
    code, out, err = run("compare", FIXTURE, FIXTURE, "--format", "markdown")
    assert code == 0, err


@pytest.mark.usefixtures("in_root")
def test_the_fixture_plans_every_collective_under_every_tree_engine(catalog):
    design = load_design(FIXTURE, catalog)
    topology = generate(design, catalog)
    for plans in plan_workload(topology, design):
        for engine in ("ecmp", "ecmp-hash", "optimal", "clos"):
            result = evaluate_collective(topology, plans, ZERO, engine, 2, 1)
            assert result.time_s is not None and result.time_s > 0


@pytest.mark.usefixtures("in_root")
def test_nccl_sweeps_them_but_no_log_can_measure_them(tmp_path):
    code, out, err = run("nccl", FIXTURE, "--op", "permutation", "--group", "dp", "-b", "1M", "-e", "4M")
    assert code == 0, err
    assert "direct/Simple" in out
    log = tmp_path / "all_reduce.log"
    log.write_text("# nothing\n")
    code, _, err = run("nccl", FIXTURE, "--op", "incast", "--group", "dp", "--measured", str(log))
    assert code == 2
    assert "--measured: incast has no nccl-tests binary, so no log measures it" in err


@pytest.mark.usefixtures("in_root")
def test_astra_sim_export_notes_the_ops_it_cannot_hold(tmp_path):
    code, _, err = run("export", FIXTURE, "--to", "astra-sim", "-o", str(tmp_path / "astra"))
    assert code == 0, err
    notes = (tmp_path / "astra" / "NOTES.md").read_text()
    assert "collective dp-incast: incast is a pattern of point-to-point flows" in notes
    assert "permutation" not in (tmp_path / "astra" / "system.json").read_text()
