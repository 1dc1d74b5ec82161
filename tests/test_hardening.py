"""Hostile input is normal input (issue 13): git references that are options, YAML that expands without
bound, files that never end, designs added since a baseline."""

from __future__ import annotations

import os
import subprocess

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
    assert code == 2 and "does not exist" in stderr and "evaluating candidates" not in stderr


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
    servers = json.loads(stdout)["properties"]["cluster"]["properties"]["server"]["examples"]
    assert "dgx-h100" in servers and len(servers) > len(json.loads(_run(["schema"])[2])["properties"]["cluster"]
                                                         ["properties"]["server"]["examples"])


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
