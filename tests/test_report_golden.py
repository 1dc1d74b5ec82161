"""Every shipped design's JSON report, held byte for byte to its golden file.

A change that moves any figure shows up here as a diff; when the change is intended, regenerate with
``python tests/golden.py`` and review the diff of ``tests/golden/reports/`` in the pull request."""

from __future__ import annotations

import difflib

import pytest

from golden import report_golden, report_json, shipped_designs

DESIGNS = shipped_designs()


def test_every_shipped_design_has_a_golden_report():
    assert DESIGNS and all(report_golden(d).exists() for d in DESIGNS), "run python tests/golden.py"


@pytest.mark.parametrize("design", DESIGNS, ids=[d.stem for d in DESIGNS])
def test_report_matches_golden(in_root, design):
    expected = report_golden(design).read_text()
    actual = report_json(design)
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                            "golden", "now", n=1))
        pytest.fail(f"{design.name}: report differs from its golden file "
                    f"(python tests/golden.py regenerates it):\n{diff[:4000]}")
