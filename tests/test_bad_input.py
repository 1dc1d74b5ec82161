"""Bad input: every malformed or impossible spec or catalog exits 2 with one located line per problem."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golden import bad_inputs, expected_path, run

LINE = re.compile(r"^\S+?(:\d+)?: .+$")
CASES = bad_inputs()


def test_corpus_is_large_enough():
    assert len(CASES) >= 25


@pytest.mark.parametrize("case,args", CASES, ids=[c.name for c, _ in CASES])
def test_bad_input_golden(in_root, case, args):
    code, stderr = run(args)
    assert code == 2, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr
    lines = stderr.splitlines()
    assert lines, "a refusal must say why"
    for line in lines:
        assert LINE.match(line), line
        assert line.startswith(str(case.relative_to(in_root))) or "--catalog" not in args
    assert stderr == expected_path(case).read_text(), "regenerate with: python tests/golden.py (then review)"


def test_many_problems_reported_at_once(in_root):
    code, stderr = run(["validate", "tests/bad_specs/33-many-problems.yaml"])
    assert code == 2
    assert len(stderr.splitlines()) >= 6


def test_infeasible_two_tier_says_why(in_root):
    code, stderr = run(["validate", "tests/bad_specs/17-two-tiers-too-small.yaml"])
    assert code == 2
    assert "tops out at 2,048" in stderr and "fabric.tiers" in stderr and "hint:" in stderr


def test_nothing_written_on_bad_input(in_root, tmp_path):
    out = tmp_path / "report.md"
    code, _ = run(["report", "tests/bad_specs/17-two-tiers-too-small.yaml", "-o", str(out)])
    assert code == 2
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


# --- property test: random mutations of a valid spec never crash -----------------------------------

VALID = yaml.safe_load((Path(__file__).resolve().parent.parent / "designs" / "fat-tree-1k.yaml").read_text())
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                 st.text(max_size=12), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=6), st.integers(), max_size=2),
                 st.sampled_from(["1GiB", "fat-tree", "dgx-h100", "nvidia-qm9700", "-1", "0", "ring", "2"]))


def _paths(data, prefix=()):
    yield prefix
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _paths(value, prefix + (index,))


PATHS = [p for p in _paths(VALID) if p]

# rail and RailX specs reach other code paths (scalable units, PXN, rings, OCS)
RAIL = yaml.safe_load((Path(__file__).resolve().parent.parent / "designs" / "superpod-h100-4su.yaml").read_text())
RAILX = {"name": "small-railx", "cluster": {"server": "railx-node-8", "gpus": 200},
         "fabric": {"topology": "railx", "railx": {"columns": 5, "rows": 5, "ocs": "calient-s320"}},
         "workload": {"parallelism": {"tp": 8, "dp": 25},
                      "collectives": [{"name": "grad", "op": "allreduce", "group": "dp", "size": "64MiB"}]}}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(st.tuples(st.sampled_from(PATHS), JUNK, st.sampled_from(["set", "delete", "rename"])),
                          min_size=1, max_size=3))
def test_mutated_specs_exit_0_or_2(in_root, tmp_path_factory, mutations):
    _mutate_and_validate(VALID, mutations, tmp_path_factory)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from([RAIL, RAILX]), data=st.data())
def test_mutated_rail_and_railx_specs_exit_0_or_2(in_root, tmp_path_factory, base, data):
    paths = [p for p in _paths(base) if p]
    mutations = data.draw(st.lists(st.tuples(st.sampled_from(paths), JUNK,
                                             st.sampled_from(["set", "delete", "rename"])), min_size=1, max_size=2))
    _mutate_and_validate(base, mutations, tmp_path_factory)


def _mutate_and_validate(base, mutations, tmp_path_factory):
    import copy

    data = copy.deepcopy(base)
    for path, value, action in mutations:
        parent = data
        try:
            for part in path[:-1]:
                parent = parent[part]
            key = path[-1]
            if action == "set":
                parent[key] = value
            elif action == "delete":
                del parent[key]
            elif isinstance(parent, dict):
                parent[str(value) + "x"] = parent.pop(key)
        except (KeyError, IndexError, TypeError):
            continue
    spec = tmp_path_factory.mktemp("mutant") / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    code, stderr = run(["validate", str(spec)])
    assert code in (0, 2), stderr
    assert "Traceback" not in stderr
    if code == 2:
        assert all(LINE.match(line) for line in stderr.splitlines()), stderr
