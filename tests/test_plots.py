"""Charts, held to the report's numbers (Agg backend, figure data, no pixels)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from topoplan.catalog import load_catalog
from topoplan.cli import main
from topoplan.pipeline import evaluate
from topoplan.report import build_report
from topoplan.report import plots
from topoplan.spec import load_design


@pytest.fixture(scope="module")
def evaluated(in_root_module):
    catalog = load_catalog()
    evaluation = evaluate(load_design("designs/superpod-h100-4su.yaml", catalog), catalog)
    return evaluation, build_report(evaluation)


@pytest.fixture(scope="module")
def in_root_module():
    import os
    from pathlib import Path

    previous = os.getcwd()
    os.chdir(Path(__file__).resolve().parent.parent)
    yield
    os.chdir(previous)


def test_collective_times_match_the_report(evaluated):
    _evaluation, report = evaluated
    fig = plots.collective_times_figure(report)
    axis = fig.axes[0]
    bars = axis.patches
    n = len(report["collectives"])
    latency, bandwidth = bars[:n], bars[n:2 * n]
    for c, lat, bw in zip(report["collectives"], latency, bandwidth):
        assert lat.get_width() + bw.get_width() == pytest.approx(c["time_s"] * 1e3)
        assert lat.get_width() == pytest.approx(sum(p["latency_s"] for p in c["phases"]) * 1e3)
    assert "ms" in axis.get_xlabel() and axis.get_title()
    assert [t.get_text() for t in axis.get_yticklabels()] == [c["name"] for c in report["collectives"]]


def test_utilization_bars_are_the_reports_max_per_tier(evaluated):
    """Grouped bars: per tier, each collective's busiest link (the report's utilization_by_tier) and p99."""
    evaluation, report = evaluated
    fig = plots.utilization_figure(evaluation)
    axis = fig.axes[0]
    tiers = [t.get_text().split()[0] for t in axis.get_xticklabels()]
    assert set(tiers) == {t for c in report["collectives"] for t in c["utilization_by_tier"]}
    bars = axis.patches
    n = len(report["collectives"])
    for i, collective in enumerate(report["collectives"]):   # bars go max, p99 per collective, each over tiers
        highest = bars[2 * i * len(tiers):(2 * i + 1) * len(tiers)]
        p99 = bars[(2 * i + 1) * len(tiers):(2 * i + 2) * len(tiers)]
        for tier, bar, inner in zip(tiers, highest, p99):
            assert bar.get_height() == pytest.approx(collective["utilization_by_tier"].get(tier, 0.0), rel=1e-6)
            assert inner.get_height() <= bar.get_height() + 1e-9
    assert len(bars) == 2 * n * len(tiers)


def test_pareto_has_one_panel_per_gpu_count_and_logs_wide_cost_ranges():
    result = {"space": "s", "pareto": ["a", "c"], "candidates": [
        {"name": "a", "gpus": 1024, "topology": "fat-tree", "switch": "x", "time_s": 0.1, "cost_per_gpu_usd": 5000},
        {"name": "b", "gpus": 1024, "topology": "railx", "switch": "y", "time_s": 0.3, "cost_per_gpu_usd": 40000},
        {"name": "c", "gpus": 8192, "topology": "rail-only", "switch": "x", "time_s": 0.2, "cost_per_gpu_usd": 6000}]}
    fig = plots.pareto_figure(result)
    panels = [a for a in fig.axes if a.get_title()]
    assert [a.get_title() for a in panels] == ["1,024 GPUs", "8,192 GPUs"]
    assert panels[0].get_yscale() == "log" and panels[1].get_yscale() == "linear"


def test_report_plots_option_writes_png(in_root, tmp_path):
    result = CliRunner().invoke(main, ["report", "designs/fat-tree-1k.yaml", "--plots", str(tmp_path / "charts")],
                                catch_exceptions=False)
    assert result.exit_code == 0
    files = sorted(p.name for p in (tmp_path / "charts").iterdir())
    assert files == ["fat-tree-1k-collectives.png", "fat-tree-1k-utilization.png"]
    assert all((tmp_path / "charts" / f).read_bytes()[:4] == b"\x89PNG" for f in files)


def test_no_blank_charts_without_a_workload(in_root, tmp_path):
    spec = tmp_path / "bare.yaml"
    spec.write_text("name: bare\ncluster: {server: dgx-h100, gpus: 64}\nfabric: {topology: fat-tree, "
                    "switch: nvidia-qm9700}\n")
    result = CliRunner().invoke(main, ["report", str(spec), "--plots", str(tmp_path / "charts")])
    assert result.exit_code == 0 and "no charts" in result.stderr
    assert not (tmp_path / "charts").exists()


def test_sweep_figure_plots_the_table(in_root_module, tmp_path):
    """busbw against size: the predicted line is the sweep's busbw column, the measured one the log's."""
    import json

    from topoplan.sweep import against_log
    from topoplan.nccltests import read_log
    from topoplan.spec import design_from_data

    catalog = load_catalog()
    design = design_from_data({"name": "a100", "cluster": {"server": "hgx-a100", "gpus": 8},
                               "fabric": {"topology": "fat-tree", "switch": "nvidia-qm8700"}}, catalog)
    sweep = against_log(design, catalog, "allreduce", "world",
                        read_log("tests/fixtures/nccl-tests/a100-sxm4-80gb-1node-8gpu-allreduce.txt")).to_json()
    fig = plots.sweep_figure([sweep])
    predicted, measured = fig.axes[0].get_lines()
    assert list(predicted.get_ydata()) == [r["busbw_GBps"] for r in sweep["rows"]]
    assert list(measured.get_ydata()) == [r["measured_busbw_GBps"] for r in sweep["rows"]]
    assert fig.axes[0].get_xscale() == "log"
    out = tmp_path / "busbw.png"
    spec = tmp_path / "a100.yaml"
    spec.write_text(json.dumps({"name": "a100", "cluster": {"server": "hgx-a100", "gpus": 8},
                                "fabric": {"topology": "fat-tree", "switch": "nvidia-qm8700"}}))
    result = CliRunner().invoke(main, ["nccl", str(spec), "-e", "1M", "--plot", str(out)])
    assert result.exit_code == 0 and out.stat().st_size > 0
