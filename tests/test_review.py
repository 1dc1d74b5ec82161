"""Design review: compare, check --baseline, schema, deterministic reports, and docs/review.md's commands."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from golden import GOLDEN_COMPARE, compare_golden_args
from topoplan.cli import main

ROOT = Path(__file__).resolve().parent.parent


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _git(repo: Path, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args], cwd=repo, check=True,
                   capture_output=True)


@pytest.fixture
def design_repo(tmp_path, monkeypatch):
    """A git repository with two commits of one design: the second oversubscribes the leaves 3:1."""
    repo = tmp_path / "repo"
    (repo / "designs").mkdir(parents=True)
    spec = repo / "designs" / "pod.yaml"
    data = yaml.safe_load((ROOT / "designs" / "fat-tree-1k.yaml").read_text())
    data["name"] = "pod"
    data.pop("targets")
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    data["fabric"]["oversubscription"] = 3
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    _git(repo, "commit", "-q", "-am", "oversubscribe")
    monkeypatch.chdir(repo)
    return repo


def test_compare_shipped_designs_in_every_format(in_root):
    out = json.loads(invoke("compare", "designs/fat-tree-1k.yaml", "designs/superpod-h100-4su.yaml",
                            "--format", "json").output)
    assert {"base", "head", "spec_changes", "metrics", "regressions"} <= set(out)
    changed = {c["path"] for c in out["spec_changes"]}
    assert {"fabric.topology", "name", "cluster.servers"} <= changed
    metrics = {m["metric"]: m for m in out["metrics"]}
    for key in ("cost.total_usd", "cost.per_gpu_usd", "power.total_w", "bisection.gbps",
                "fabric.switches.by_tier.spine", "fabric.links.by_tier.leaf", "cost.by_category.switches",
                "collectives.grad-sync.busbw_GBps", "collectives.grad-sync.time_s",
                "collectives.grad-sync.max_link_utilization", "collectives.grad-sync.bottleneck"):
        assert key in metrics, key
    gpus = metrics["cost.total_usd"]
    assert gpus["delta"] == pytest.approx(gpus["head"] - gpus["base"])
    table = invoke("compare", "designs/fat-tree-1k.yaml", "designs/superpod-h100-4su.yaml").output
    assert "Spec changes" in table and "fabric.topology" in table


def test_compare_markdown_golden(in_root):
    result = invoke(*compare_golden_args())
    assert result.exit_code == 0
    assert result.output == GOLDEN_COMPARE.read_text(), "regenerate with: python tests/golden.py (then review)"


def test_compare_git_references_marks_regressions(design_repo):
    result = invoke("compare", "main~1:designs/pod.yaml", "designs/pod.yaml", "--format", "json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.output)
    assert out["spec_changes"] == [{"path": "fabric.oversubscription", "base": 1, "head": 3}]
    assert "bisection.per_gpu_gbps" in out["regressions"]
    assert "cost.total_usd" not in out["regressions"]  # fewer spines: cheaper
    markdown = invoke("compare", "main~1:designs/pod.yaml", "designs/pod.yaml", "--format", "markdown").output
    assert "REGRESSION" in markdown and "`fabric.oversubscription`" in markdown
    text = invoke("compare", "main~1:designs/pod.yaml", "designs/pod.yaml", "--format", "table").output
    assert "fabric.oversubscription" in text and "REGRESSION" in text


def test_check_baseline_exit_codes(design_repo):
    regressed = invoke("check", "designs/pod.yaml", "--baseline", "main~1")
    assert regressed.exit_code == 1
    assert "MISS pod: bisection.per_gpu_gbps regressed against main~1" in regressed.output
    same = invoke("check", "designs/pod.yaml", "--baseline", "main")
    assert same.exit_code == 0, same.output
    tolerant = invoke("check", "designs/pod.yaml", "--baseline", "main~1", "--max-regression", "1000")
    assert tolerant.exit_code == 0
    bad = invoke("check", "designs/pod.yaml", "--baseline", "no-such-branch")
    assert bad.exit_code == 2 and "is not a commit in this repository" in bad.stderr


def test_review_doc_commands_run(design_repo):
    """The commands in docs/review.md, with $BASE and $SPEC filled in, behave as the page says."""
    text = (ROOT / "docs" / "review.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    commands = [line for line in block.splitlines() if line.startswith("topoplan ")]
    assert len(commands) == 3
    for base, expected in (("main", 0), ("main~1", 1)):
        codes = []
        for command in commands:
            args = shlex.split(command.replace("$BASE", base).replace("$SPEC", "designs/pod.yaml"))[1:]
            codes.append(invoke(*args).exit_code)
        assert codes == [0, expected, 0]
        assert "topoplan compare" in (design_repo / "compare.md").read_text()


# --- schema ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def schema():
    return json.loads(invoke("schema").output)


def test_schema_accepts_every_shipped_design(schema):
    jsonschema.Draft202012Validator.check_schema(schema)
    for spec in sorted((ROOT / "designs").glob("*.yaml")):
        jsonschema.validate(yaml.safe_load(spec.read_text()), schema)


@pytest.mark.parametrize("case", ["05-wrong-type", "06-negative-gpus", "12-unknown-topology", "04-unknown-nested-key",
                                  "03-unknown-top-key", "14-missing-name", "15-missing-fabric", "13-name-not-kebab",
                                  "19-billion-gpus", "23-unknown-op", "26-oversubscription-below-one",
                                  "32-unknown-reach-class", "35-wrong-version", "37-fractional-gpus"])
def test_schema_rejects_what_a_schema_can_express(schema, case):
    data = yaml.safe_load((ROOT / "tests" / "bad_specs" / f"{case}.yaml").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


# --- deterministic reports -------------------------------------------------------------------------

@pytest.mark.parametrize("spec", sorted(p.name for p in (ROOT / "designs").glob("*.yaml")))
def test_report_twice_gives_identical_bytes(in_root, tmp_path, spec):
    outputs = []
    for run in range(2):
        out = tmp_path / f"{run}.json"
        assert invoke("report", f"designs/{spec}", "--format", "json", "-o", out).exit_code == 0
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]


def test_committed_schema_is_current():
    """docs/design.schema.json, which the designs' modelines point at, is what `topoplan schema` prints."""
    assert (ROOT / "docs" / "design.schema.json").read_text() == invoke("schema").output
    for spec in (ROOT / "designs").glob("*.yaml"):
        assert spec.read_text().startswith("# yaml-language-server: $schema=../docs/design.schema.json\n")
