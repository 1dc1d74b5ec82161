"""The cache keys' list of catalog entries (cache.entries_used) against what evaluations really read.

``entries_used`` names, from a candidate's spec, the catalog entries its evaluation depends on; the cache
key hashes exactly those, so an entry read but not named would leave a stale result in the cache when its
price or figures change. Here every evaluation runs on a catalog whose sections record each entry looked
up (an id found by ``[]``, ``get`` or ``in``; every entry of a section walked whole), and what was read
must be among the entries named."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from topoplan.cache import entries_used
from topoplan.catalog import SECTIONS, load_catalog
from topoplan.optimize.search import evaluate_candidate
from topoplan.optimize.space import candidate_specs, load_space
from topoplan.scaling import evaluate_point

ROOT = Path(__file__).resolve().parent.parent


class RecordingSection(dict):
    """A catalog section that notes ``(section, id)`` in ``seen`` for every entry read."""

    def __init__(self, name: str, entries: dict, seen: set):
        super().__init__(entries)
        self.name, self.seen = name, seen

    def _note(self, entry_id):
        if dict.__contains__(self, entry_id):
            self.seen.add((self.name, entry_id))

    def _note_all(self):
        self.seen.update((self.name, entry_id) for entry_id in dict.keys(self))

    def __getitem__(self, entry_id):
        self._note(entry_id)
        return super().__getitem__(entry_id)

    def get(self, entry_id, default=None):
        self._note(entry_id)
        return super().get(entry_id, default)

    def __contains__(self, entry_id):
        self._note(entry_id)
        return super().__contains__(entry_id)

    def __iter__(self):
        self._note_all()
        return super().__iter__()

    def keys(self):
        self._note_all()
        return super().keys()

    def values(self):
        self._note_all()
        return super().values()

    def items(self):
        self._note_all()
        return super().items()


def recording(catalog):
    seen: set = set()
    return dataclasses.replace(catalog, **{name: RecordingSection(name, catalog.section(name), seen)
                                           for name in SECTIONS}), seen


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_the_recording_catalog_notices_reads(catalog):
    watched, seen = recording(catalog)
    watched.switches["nvidia-qm9700"]
    assert "nvidia-sn5600" in watched.switches and watched.servers.get("no-such-server") is None
    assert seen == {("switches", "nvidia-qm9700"), ("switches", "nvidia-sn5600")}
    min(watched.cables.values(), key=lambda c: c.price_usd)
    assert {("cables", c) for c in catalog.cables} <= seen


def _sample(candidates, count):
    """Up to ``count`` candidates spread over the space, and every sized one's first."""
    step = max(1, len(candidates) // count)
    chosen = candidates[::step][:count]
    sized = [c for c in candidates if c[2] is not None][:1]
    return chosen + [c for c in sized if c not in chosen]


@pytest.mark.parametrize("space_file, gpus", [("designs/spaces/small.yaml", None),
                                              ("designs/spaces/training.yaml", None),
                                              ("designs/spaces/goodput.yaml", [1024]),   # goodput at 1k: faster
                                              ("designs/spaces/sites.yaml", None),
                                              ("benchmarks/specs/space-360.yaml", None)])
def test_optimize_candidates_read_only_the_entries_their_keys_name(catalog, space_file, gpus, tmp_path):
    import yaml

    if gpus is not None:
        data = yaml.safe_load((ROOT / space_file).read_text())
        data["gpus"] = gpus
        (tmp_path / "space.yaml").write_text(yaml.safe_dump(data))
    space = load_space(str(tmp_path / "space.yaml" if gpus else ROOT / space_file), catalog)
    candidates = [c for c in candidate_specs(space) if _gpus(c[1]) <= 16384]
    feasible = 0
    for name, spec, sizing in _sample(candidates, 2 if gpus else 4):
        watched, seen = recording(catalog)
        outcome = evaluate_candidate(watched, (name, spec, sizing, space.weights, space.constraints, space.resilience))
        feasible += not outcome.reason
        missing = seen - set(entries_used(spec, sizing, catalog))
        assert not missing, f"{space_file}: {name} reads {sorted(missing)} but its cache key leaves them out"
    assert feasible, f"{space_file}: no sampled candidate was evaluated to the end"


def test_railx_candidates_read_only_the_entries_their_keys_name(catalog):
    """The headline space's RailX candidates (a circuit switch, a RailX server) at 16k GPUs."""
    space = load_space(str(ROOT / "designs/spaces/headline.yaml"), catalog)
    candidates = [c for c in candidate_specs(space) if _gpus(c[1]) <= 16384 and "railx" in c[0]]
    assert candidates
    for name, spec, sizing in candidates[:1]:
        watched, seen = recording(catalog)
        outcome = evaluate_candidate(watched, (name, spec, sizing, space.weights, space.constraints, space.resilience))
        assert not outcome.reason and ("ocs", "polatis-7000-384") in seen
        assert not seen - set(entries_used(spec, sizing, catalog)), name


def _gpus(spec: dict) -> int:
    sites = spec["sites"] if isinstance(spec.get("sites"), list) else [spec]
    return sum(int((site.get("cluster") or {}).get("gpus") or 0) or
               int((site.get("cluster") or {}).get("servers") or 0) * 8 for site in sites)


@pytest.mark.parametrize("design", ["designs/megatron-530b-2240.yaml", "designs/gpt3-175b-12288.yaml"])
def test_scale_points_read_only_the_entries_their_keys_name(catalog, design):
    """A point of a scaling study (the design at its own size, with its model preset)."""
    import yaml

    path = ROOT / design
    data = yaml.safe_load(path.read_text())
    watched, seen = recording(catalog)
    point = evaluate_point(watched, (0, data, str(path)))
    assert not point.infeasible, point.infeasible
    assert ("models", data["workload"]["model"]) in seen or isinstance(data["workload"]["model"], dict)
    assert not seen - set(entries_used(data, None, catalog)), design
