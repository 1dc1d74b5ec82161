"""Spec loading: line numbers, duplicate keys, normalization, and the parallelism rules."""

from __future__ import annotations

import pytest

from topoplan import yamlio
from topoplan.errors import SpecError
from topoplan.spec import design_from_data


def test_line_numbers_point_into_the_file():
    data, lines = yamlio.load("a: 1\nb:\n  c: [1, 2]\n  d:\n    - x: 3\n", "f.yaml")
    assert data == {"a": 1, "b": {"c": [1, 2], "d": [{"x": 3}]}}
    assert lines[("a",)] == 1 and lines[("b", "c")] == 3 and lines[("b", "d", 0, "x")] == 5
    assert lines.line_of(("b", "d", 0, "missing")) == 5


def test_duplicate_keys_rejected_with_both_lines():
    with pytest.raises(SpecError) as err:
        yamlio.load("a: 1\nb: 2\na: 3\n", "f.yaml")
    assert str(err.value.problems[0]) .startswith("f.yaml:3: a: duplicate key 'a' (first on line 1)")


def test_unsafe_tags_are_not_executed():
    with pytest.raises(SpecError):
        yamlio.load("a: !!python/object/apply:os.system ['echo hi']\n", "f.yaml")


def test_normalized_design(make_design):
    design = make_design(cluster={"gpus": None, "servers": 16},
                         workload={"parallelism": {"tp": 8, "pp": 2},
                                   "collectives": [{"name": "g", "op": "allreduce", "group": "dp", "size": "1GiB"}]})
    assert design.gpus == 128 and design.cluster.servers == 16
    assert design.workload.parallelism == {"tp": 8, "cp": 1, "dp": 8, "pp": 2, "ep": 1}
    assert design.workload.collectives[0].size_bytes == 2**30
    assert design.workload.collectives[0].algorithm == "auto"  # NCCL's tuner picks per size
    assert design.fabric.switch == {"leaf": "nvidia-qm9700", "spine": "nvidia-qm9700", "core": "nvidia-qm9700"}
    assert design.fabric.oversubscription == {"leaf": 1.0, "spine": 1.0}
    assert design.routing.engine == "ecmp" and design.routing.seeds == 8


def test_per_tier_switches_inherit_upwards(make_design):
    design = make_design(fabric={"switch": {"leaf": "nvidia-qm9700", "spine": "nvidia-q3400"}})
    assert design.fabric.switch == {"leaf": "nvidia-qm9700", "spine": "nvidia-q3400", "core": "nvidia-q3400"}


def test_every_problem_is_collected(catalog):
    data = {"name": "Bad Name", "cluster": {"server": "nope", "gpus": -1},
            "fabric": {"topology": "mesh", "switch": "nope"}, "colour": "red"}
    with pytest.raises(SpecError) as err:
        design_from_data(data, catalog, "x.yaml")
    paths = {p.path for p in err.value.problems}
    assert {"name", "cluster.gpus", "fabric.topology", "colour"} <= paths


def test_shipped_designs_load(in_root, catalog):
    from topoplan import sites

    for spec in sorted((in_root / "designs").glob("*.yaml")):
        design = sites.load(str(spec), catalog)   # one-site designs, and multi-site ones
        assert design.name == spec.stem
