"""The command line through click's CliRunner: formats, exit codes, outputs."""

from __future__ import annotations

import json
import subprocess
import sys

import networkx as nx
import pytest
import yaml
from click.testing import CliRunner

from topoplan.cli import main

REPORT_KEYS = {
    "design": {"name", "topology", "gpus", "servers"},
    "fabric": {"tiers", "switches", "links"},
    "cost": {"total_usd", "per_gpu_usd", "by_category"},
    "power": {"total_w"},
    "bisection": {"gbps", "per_gpu_gbps", "method"},
}


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_help_lists_commands_with_examples():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("validate", "build", "report", "check", "catalog"):
        assert command in result.output
    assert "topoplan report designs/" in result.output


def test_python_dash_m_entry_point(in_root):
    done = subprocess.run([sys.executable, "-m", "topoplan", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and "topoplan" in done.stdout


def test_validate_shipped_designs(in_root):
    designs = sorted(str(p.relative_to(in_root)) for p in (in_root / "designs").glob("*.yaml"))
    assert len(designs) >= 3
    result = invoke("validate", *designs)
    assert result.exit_code == 0, result.stderr
    assert result.output.count("ok:") == len(designs)


def test_report_json_contract(in_root):
    result = invoke("report", "designs/fat-tree-1k.yaml", "--format", "json")
    assert result.exit_code == 0
    report = json.loads(result.output)
    for section, keys in REPORT_KEYS.items():
        assert keys <= set(report[section]), section
    assert {"total", "by_tier", "by_model"} <= set(report["fabric"]["switches"])
    assert {"total", "by_tier"} <= set(report["fabric"]["links"])
    assert set(report["fabric"]["switches"]["by_tier"]) <= {"leaf", "spine", "core", "ocs"}
    assert isinstance(report["diameter_hops"], int)
    assert isinstance(report["collectives"], list)
    assert report["design"]["gpus"] == 1024
    assert report["cost"]["per_gpu_usd"] == pytest.approx(report["cost"]["total_usd"] / 1024, abs=0.01)


def test_report_k48_fat_tree_counts(in_root):
    """topologies.md B1: k=48 -> 27,648 hosts on 2,880 switches (1,152 edge, 1,152 aggregation, 576 core)."""
    report = json.loads(invoke("report", "designs/fat-tree-k48.yaml", "--format", "json").output)
    assert report["design"]["gpus"] == 27648
    assert report["fabric"]["switches"]["total"] == 2880
    assert report["fabric"]["switches"]["by_tier"] == {"leaf": 1152, "spine": 1152, "core": 576}
    assert report["diameter_hops"] == 6
    assert report["bisection"]["per_gpu_gbps"] == pytest.approx(400)


@pytest.mark.parametrize("fmt,marker", [("table", "Bill of materials\n-----"), ("markdown", "| Metric | Value |")])
def test_report_text_formats(in_root, fmt, marker):
    result = invoke("report", "designs/fat-tree-16k.yaml", "--format", fmt)
    assert result.exit_code == 0
    assert marker in result.output
    assert "16,384" in result.output


def test_report_is_deterministic_and_written_atomically(in_root, tmp_path):
    out = tmp_path / "r.md"
    for _ in range(2):
        assert invoke("report", "designs/fat-tree-1k.yaml", "--format", "markdown", "-o", str(out)).exit_code == 0
    first = out.read_bytes()
    invoke("report", "designs/fat-tree-1k.yaml", "--format", "markdown", "-o", str(out))
    assert out.read_bytes() == first
    assert [p.name for p in tmp_path.iterdir()] == ["r.md"]


def _spec_with_targets(tmp_path, targets):
    data = yaml.safe_load(open("designs/fat-tree-1k.yaml"))
    data["targets"] = targets
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_check_exit_codes(in_root, tmp_path):
    report = json.loads(invoke("report", "designs/fat-tree-1k.yaml", "--format", "json").output)
    per_gpu = report["cost"]["per_gpu_usd"]
    passing = _spec_with_targets(tmp_path, {"max_cost_per_gpu_usd": per_gpu + 1, "max_diameter_hops": 4})
    result = invoke("check", passing)
    assert result.exit_code == 0, result.output
    assert result.output.count("ok ") == 2
    failing = _spec_with_targets(tmp_path, {"max_cost_per_gpu_usd": per_gpu - 1, "max_diameter_hops": 4})
    result = invoke("check", failing)
    assert result.exit_code == 1
    assert "MISS fat-tree-1k: max_cost_per_gpu_usd" in result.output
    assert invoke("check", "tests/bad_specs/11-unknown-switch.yaml").exit_code == 2


def test_check_shipped_designs_pass(in_root):
    designs = sorted(str(p.relative_to(in_root)) for p in (in_root / "designs").glob("*.yaml"))
    result = invoke("check", *designs)
    # collective targets are reported "not evaluated" until the flow solver fills collectives[]
    lines = [l for l in result.output.splitlines() if "not evaluated" not in l]
    assert all(l.startswith("ok") for l in lines), result.output


@pytest.mark.parametrize("suffix", [".graphml", ".gexf", ".json"])
def test_build_writes_readable_graphs(in_root, tmp_path, suffix):
    out = tmp_path / f"fabric{suffix}"
    result = invoke("build", "designs/fat-tree-1k.yaml", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    if suffix == ".json":
        data = json.loads(out.read_text())
        assert len(data["nodes"]["kind"]) == data["nodes"]["kind"].count("gpu") + \
            sum(1 for k in data["nodes"]["kind"] if k != "gpu")
        assert data["nodes"]["kind"].count("gpu") == 1024
        assert len(data["links"]["src"]) == len(data["links"]["dst"])
    else:
        graph = (nx.read_graphml if suffix == ".graphml" else nx.read_gexf)(str(out))
        kinds = nx.get_node_attributes(graph, "kind")
        assert sum(1 for k in kinds.values() if k == "gpu") == 1024
        assert sum(1 for k in kinds.values() if k == "switch") == 48


def test_build_rejects_unknown_extension(in_root, tmp_path):
    result = invoke("build", "designs/fat-tree-1k.yaml", "-o", str(tmp_path / "fabric.dot"))
    assert result.exit_code == 2
    assert "unknown output format '.dot'" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_catalog_list_and_show():
    listing = invoke("catalog", "list")
    assert listing.exit_code == 0
    for entry in ("nvidia-qm9700", "nvidia-connectx-7", "dgx-h100", "generic-48x400g"):
        assert entry in listing.output
    assert "estimates" in listing.output
    shown = invoke("catalog", "show", "nvidia-qm9700")
    assert shown.exit_code == 0
    data = yaml.safe_load(shown.output)
    assert data["ports"] == 64 and data["port_speed_gbps"] == 400 and data["source"]
    missing = invoke("catalog", "show", "nvidia-qm970")
    assert missing.exit_code == 2 and "did you mean 'nvidia-qm9700'" in missing.stderr


def test_internal_error_exit_70(in_root, monkeypatch):
    import topoplan.pipeline as pipeline

    def broken(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(pipeline, "generate", broken)
    result = invoke("report", "designs/fat-tree-1k.yaml")
    assert result.exit_code == 70
    assert "internal error" in result.stderr and "RuntimeError: boom" in result.stderr
