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


def test_utilization_panels_per_tier(evaluated):
    evaluation, report = evaluated
    fig = plots.utilization_figure(evaluation)
    tiers = {t for c in report["collectives"] for t in c["utilization_by_tier"]}
    assert {a.get_title().split()[0] for a in fig.axes} == tiers
    for axis in fig.axes:
        tier = axis.get_title().split()[0]
        highest = max(c["utilization_by_tier"].get(tier, 0) for c in report["collectives"])
        edges = [p.get_path().vertices[:, 0] for p in axis.patches]
        assert max(e.max() for e in edges) >= highest - 1e-9  # the busiest link is inside the last bin drawn
        assert axis.get_xlim()[0] == 0.0


def test_report_plots_option_writes_png(in_root, tmp_path):
    result = CliRunner().invoke(main, ["report", "designs/fat-tree-1k.yaml", "--plots", str(tmp_path / "charts")],
                                catch_exceptions=False)
    assert result.exit_code == 0
    files = sorted(p.name for p in (tmp_path / "charts").iterdir())
    assert files == ["fat-tree-1k-collectives.png", "fat-tree-1k-utilization.png"]
    assert all((tmp_path / "charts" / f).read_bytes()[:4] == b"\x89PNG" for f in files)
