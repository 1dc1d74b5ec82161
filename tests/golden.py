"""Golden files: run ``python tests/golden.py`` from the repository root to regenerate
``tests/bad_specs/*.expected``, ``tests/bad_catalogs/*.expected``, ``tests/golden/*.md`` and the JSON report
of every shipped design (``tests/golden/reports/*.json``), then review the diff."""

from __future__ import annotations

import sys
from pathlib import Path

from click.testing import CliRunner

from topoplan.cli import main

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
VALID_SPEC = "designs/fat-tree-1k.yaml"
GOLDEN_COMPARE = TESTS / "golden" / "compare-fat-tree-1k-superpod.md"
GOLDEN_REPORTS = TESTS / "golden" / "reports"


def shipped_designs():
    return sorted((ROOT / "designs").glob("*.yaml"))


def report_golden(design: Path) -> Path:
    return GOLDEN_REPORTS / (design.stem + ".json")


def report_json(design: Path) -> str:
    """The design's JSON report, as ``topoplan report --format json`` prints it."""
    result = CliRunner().invoke(main, ["report", str(design.relative_to(ROOT)), "--format", "json"],
                                catch_exceptions=False)
    if result.exit_code != 0:
        raise RuntimeError(f"{design.name}: exit {result.exit_code}:\n{result.stderr}")
    return result.stdout


def compare_golden_args():
    return ["compare", "designs/fat-tree-1k.yaml", "designs/superpod-h100-4su.yaml", "--format", "markdown"]


def bad_inputs():
    specs = sorted((TESTS / "bad_specs").glob("*.yaml"))
    catalogs = sorted((TESTS / "bad_catalogs").glob("*.yaml"))
    return [(s, ["validate", str(s.relative_to(ROOT))]) for s in specs] + \
           [(c, ["validate", VALID_SPEC, "--catalog", str(c.relative_to(ROOT))]) for c in catalogs]


def run(args):
    """Exit code and standard error of the CLI, run from the repository root."""
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    return result.exit_code, result.stderr


def expected_path(case: Path) -> Path:
    return case.with_suffix(".expected")


if __name__ == "__main__":
    import os

    os.chdir(ROOT)
    for case, args in bad_inputs():
        code, stderr = run(args)
        if code != 2:
            sys.exit(f"{case.name}: exit {code}, expected 2:\n{stderr}")
        expected_path(case).write_text(stderr)
        print(f"{case.name}: {len(stderr.splitlines())} line(s)")
    GOLDEN_COMPARE.parent.mkdir(exist_ok=True)
    result = CliRunner().invoke(main, compare_golden_args(), catch_exceptions=False)
    GOLDEN_COMPARE.write_text(result.output)
    print(f"{GOLDEN_COMPARE.name}: {len(result.output.splitlines())} line(s)")
    GOLDEN_REPORTS.mkdir(exist_ok=True)
    for design in shipped_designs():
        report_golden(design).write_text(report_json(design))
        print(f"{report_golden(design).name}: report")
