"""The hostile-input corpus (tests/hostile/cases.yaml): every case exits as documented (0 success,
1 a target missed, 2 refused, 130 interrupted), prints no traceback, and writes nothing it should not.
Bounded time and memory are the outcome itself: the refusals happen before the work they refuse."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from topoplan.cli import main

HOSTILE = Path(__file__).resolve().parent / "hostile"
CASES = yaml.safe_load((HOSTILE / "cases.yaml").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_hostile_input(case, tmp_path, monkeypatch):
    monkeypatch.chdir(HOSTILE)
    before = sorted(p.name for p in HOSTILE.iterdir())
    args = [a.replace("{tmp}", str(tmp_path)) for a in case["args"]]
    result = CliRunner().invoke(main, args)
    output = result.stdout + result.stderr
    assert result.exit_code in case["exit"], (result.exit_code, output[-2000:])
    assert result.exit_code in (0, 1, 2, 130)
    assert "Traceback" not in output and "internal error" not in output, output[-2000:]
    if "says" in case:
        assert case["says"] in result.stderr, result.stderr[-2000:]
    if "prints" in case:
        assert case["prints"] in result.stdout, result.stdout[-2000:]
    assert sorted(p.name for p in HOSTILE.iterdir()) == before          # nothing written beside the inputs
    assert sorted(p.name for p in tmp_path.iterdir()) == case.get("writes", [])


def test_the_corpus_covers_the_issue():
    """At least the cases issue 13 names, and every file in the corpus is used by some case."""
    assert len(CASES) >= 50
    used = {Path(a).name for c in CASES for a in c["args"] if len(a) < 200} | {"cases.yaml"}
    assert sorted(p.name for p in HOSTILE.iterdir()) == sorted(n for n in used if n and (HOSTILE / n).exists())
