"""Golden files: run ``python tests/golden.py`` from the repository root to regenerate
``tests/bad_specs/*.expected``, ``tests/bad_catalogs/*.expected`` and ``tests/golden/*.md``, then review
the diff."""

from __future__ import annotations

import sys
from pathlib import Path

from click.testing import CliRunner

from topoplan.cli import main

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
VALID_SPEC = "designs/fat-tree-1k.yaml"
GOLDEN_COMPARE = TESTS / "golden" / "compare-fat-tree-1k-superpod.md"


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
