"""The engines against the packet simulator's figures of issue 23 (htsim, RoCE, per-flow ECMP on a 128-host
two-tier 400G fat-tree, 16 MiB permutation flows) and against closed forms. The figures come from
benchmarks/flow_vs_packet.py, which also writes the section of docs/validation.md that explains the gaps."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from conftest import ROOT


def _module():
    spec = importlib.util.spec_from_file_location("flow_vs_packet", ROOT / "benchmarks" / "flow_vs_packet.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["flow_vs_packet"] = module
    spec.loader.exec_module(module)
    return module


FVP = _module()


@pytest.fixture(scope="module")
def figures():
    return FVP.figures()


def test_mean_flow_completion_is_within_15_percent_of_the_simulator(figures):
    for permutation in figures["permutations"]:
        assert abs(np.median(permutation["mean_us"]) / FVP.SIM_MEAN_US - 1) <= 0.15, permutation["seed"]


def test_last_flow_is_the_collision_bound_and_below_the_simulator(figures):
    """Equal flows started together: the last ends exactly when the hottest link drains (max-min fair sharing
    cannot move it), seed by seed; the median over permutations lies between that bound and 1,551 us."""
    flow_us = figures["flow_us"]
    for permutation in figures["permutations"]:
        bounds = [flows * flow_us for flows in permutation["hottest_flows"]]
        assert permutation["last_us"] == pytest.approx(bounds, rel=1e-9)
    assert figures["median_bound_us"] * (1 - 1e-9) <= figures["median_last_us"] <= FVP.SIM_MEDIAN_LAST_US
    assert min(figures["hottest_flows"]) >= 2      # a random permutation over 4 spines always collides


def test_ideal_spraying_is_the_lower_bound(figures):
    """``ecmp`` on a non-blocking fabric: every flow at the NIC's payload rate, the fluid 335.5 us over the
    RoCEv2 payload share, below every per-flow ECMP last flow."""
    assert figures["goodput"] == pytest.approx(4096 / (4096 + 82), rel=1e-12)
    assert figures["spraying_us"] == pytest.approx(figures["flow_us"], rel=1e-9)
    assert abs(figures["spraying_us"] / 336 - 1) <= 0.03
    assert all(figures["spraying_us"] <= last for p in figures["permutations"] for last in p["last_us"])


def test_a_ring_meets_the_transport_floor(figures):
    """2(p-1)/p x size at the payload rate: about 2% above the fluid time on RoCEv2 (4096-byte MTU)."""
    assert figures["ring_ms"] == pytest.approx(figures["ring_floor_ms"], rel=1e-9)
    assert 0.02 <= figures["ring_ms"] / figures["ring_fluid_ms"] - 1 <= 0.04


def test_the_report_shows_the_distributions_and_labels(tmp_path):
    import json

    from click.testing import CliRunner

    from topoplan.cli import main

    out = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["report", str(FVP.FIXTURE / "fat-tree-128.yaml"), "--catalog",
                                       str(FVP.FIXTURE / "catalog.yaml"), "--format", "json", "-o", str(out)])
    assert result.exit_code == 0, result.output
    permutation = json.loads(out.read_text())["collectives"][0]
    assert permutation["engine_label"].startswith("per-flow ECMP")
    phase = permutation["phases"][0]
    flows = phase["flows"]
    assert flows["count"] == 128 and not flows["lockstep"]
    done = flows["completion_s"]
    assert done["mean_s"] < done["last_s"] and done["p50_s"] <= done["p99_s"] <= done["last_s"]
    spread = flows["over_seeds"]["last_s"]
    assert spread["min"] <= spread["median"] <= spread["max"]
    assert phase["flows_per_receiver"] == 1 and phase["oversubscription"] == 1.0
    assert len(permutation["seeds"]["time_s"]) == 16
    text = CliRunner().invoke(main, ["report", str(FVP.FIXTURE / "fat-tree-128.yaml"), "--catalog",
                                     str(FVP.FIXTURE / "catalog.yaml"), "--format", "markdown"]).output
    assert "| Collective | Phase | Time ms | Flows into a GPU |" in text and "over 16 seeds" in text
