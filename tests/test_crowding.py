"""How crowded a phase is (flows into a GPU, the oversubscription it climbs) and the fair-share phase times
under ecmp-hash, through the pipeline: closed forms on small fabrics."""

from __future__ import annotations

import pytest

from topoplan.flow import fairshare
from topoplan.pipeline import evaluate

MiB = 2**20


def _evaluate(make_design, catalog, collectives, fabric=None, routing="ecmp", gpus=256, parallelism=None):
    design = make_design(cluster={"server": "dgx-h100", "gpus": gpus},
                         fabric={"switch": "nvidia-qm9700", **(fabric or {})},
                         workload={"parallelism": parallelism or {"tp": 8, "dp": gpus // 8},
                                   "collectives": collectives},
                         routing=routing)
    return evaluate(design, catalog, latency_scale=0.0)


def test_flows_into_a_gpu(make_design, catalog):
    """Incast of 12 senders over dp (one GPU per server): 12 network flows into rank 0. A world all-to-all
    over 32 servers of 8 GPUs: every GPU hears from the 248 GPUs of the other servers (PXN relays them
    through one GPU per rail, so the relay's count is what the phase shows). A tp all-gather stays inside
    the servers: none."""
    evaluation = _evaluate(make_design, catalog, [
        {"name": "incast", "op": "incast", "group": "dp", "size": "4MiB", "senders": 12},
        {"name": "dp-a2a", "op": "alltoall", "group": "dp", "size": "64MiB"},
        {"name": "tp-ag", "op": "allgather", "group": "tp", "size": "64MiB"}])
    incast, a2a, allgather = (c.phases[0] for c in evaluation.collectives)
    assert incast.flows_per_receiver == 12
    assert a2a.flows_per_receiver == 31
    assert allgather.flows_per_receiver == 0


def test_oversubscription_climbed(make_design, catalog):
    """A 3:1 two-tier fat-tree: a dp ring crosses the leaf uplinks (3:1); the tp all-gather climbs nothing."""
    evaluation = _evaluate(make_design, catalog, [
        {"name": "dp-ring", "op": "allreduce", "group": "dp", "size": "64MiB", "algorithm": "ring"},
        {"name": "tp-ag", "op": "allgather", "group": "tp", "size": "64MiB"}],
        fabric={"oversubscription": 3}, gpus=1024)
    ring, allgather = (c.phases[0] for c in evaluation.collectives)
    assert ring.oversubscription == pytest.approx(3.0)
    assert allgather.oversubscription == 1.0
    flat = _evaluate(make_design, catalog, [
        {"name": "dp-ring", "op": "allreduce", "group": "dp", "size": "64MiB", "algorithm": "ring"}], gpus=1024)
    assert flat.collectives[0].phases[0].oversubscription == 1.0


def test_fair_share_sets_the_phase_time_under_ecmp_hash(make_design, catalog):
    """The phase's bandwidth time is its last flow: for equal flows started together exactly the hottest
    link's load over capacity (the ``ecmp-hash`` loads); the ecmp time (spraying) is never above it."""
    collectives = [{"name": "perm", "op": "permutation", "group": "dp", "size": "16MiB", "seed": 3}]
    hashed = _evaluate(make_design, catalog, collectives, routing={"engine": "ecmp-hash", "seeds": 4})
    sprayed = _evaluate(make_design, catalog, collectives)
    phase = hashed.collectives[0].phases[0]
    assert phase.flows is not None and phase.flows.flows == 256 and not phase.flows.lockstep
    assert phase.bandwidth_s == pytest.approx(phase.flows.last_s, rel=1e-12)
    assert phase.flows.mean_s <= phase.flows.last_s
    assert sprayed.collectives[0].phases[0].flows is None
    assert sprayed.collectives[0].time_s <= hashed.collectives[0].time_s * (1 + 1e-12)
    seeds = hashed.collectives[0].seed_phase_flows
    assert len(seeds) == 4 and all(len(s) == 1 and s[0].flows == 256 for s in seeds)


def test_rings_move_in_lockstep(make_design, catalog):
    hashed = _evaluate(make_design, catalog, [
        {"name": "dp-ring", "op": "allreduce", "group": "dp", "size": "64MiB", "algorithm": "ring"}],
        routing={"engine": "ecmp-hash", "seeds": 2})
    flows = hashed.collectives[0].phases[0].flows
    assert flows.lockstep and flows.mean_s == flows.p50_s == flows.p99_s == flows.last_s


def test_too_many_flows_fall_back_to_the_hottest_link_with_a_note(make_design, catalog, monkeypatch):
    monkeypatch.setattr(fairshare, "MAX_ENTRIES", 10)
    hashed = _evaluate(make_design, catalog, [
        {"name": "perm", "op": "permutation", "group": "dp", "size": "16MiB"}],
        routing={"engine": "ecmp-hash", "seeds": 2})
    phase = hashed.collectives[0].phases[0]
    assert phase.flows is None and "256 flows on about" in phase.flows_note and "above 10 " in phase.flows_note
    assert phase.bandwidth_s > 0
