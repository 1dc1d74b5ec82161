"""Shared fixtures: the shipped catalog and a small spec builder."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from topoplan.catalog import load_catalog
from topoplan.spec import design_from_data

ROOT = Path(__file__).resolve().parent.parent

BASE_SPEC = {
    "name": "test-design",
    "cluster": {"server": "dgx-h100", "gpus": 1024},
    "fabric": {"topology": "fat-tree", "switch": "nvidia-qm9700"},
}


@pytest.fixture(autouse=True)
def _private_cache_dir(tmp_path_factory, monkeypatch):
    """Every test gets its own sweep cache (the default of --cache), never the user's ~/.cache."""
    monkeypatch.setenv("TOPOPLAN_CACHE_DIR", str(tmp_path_factory.mktemp("topoplan-cache")))
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


def spec_data(**sections):
    """BASE_SPEC with sections merged in (one level deep); a value of None deletes the key."""
    data = copy.deepcopy(BASE_SPEC)
    for key, value in sections.items():
        if value is None:
            data.pop(key, None)
        elif isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
            data[key] = {k: v for k, v in data[key].items() if v is not None}
        else:
            data[key] = value
    return data


@pytest.fixture
def make_design(catalog):
    def make(**sections):
        return design_from_data(spec_data(**sections), catalog)

    return make


@pytest.fixture
def in_root(monkeypatch):
    """Run from the repository root so relative paths in golden files match."""
    monkeypatch.chdir(ROOT)
    return ROOT
