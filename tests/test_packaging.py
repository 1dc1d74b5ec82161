"""The installed package must hold every subpackage and the catalogs (the tests themselves import the
source tree, so without this check a missing package would only show after `pip install .`)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_installed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "topoplan").rglob("__init__.py")}
    assert found <= listed, f"add to pyproject.toml [tool.setuptools] packages: {sorted(found - listed)}"
    assert config["package-dir"]["topoplan.catalogs"] == "catalogs"
    assert "*.yaml" in config["package-data"]["topoplan.catalogs"]


def test_console_script_points_at_the_cli():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["project"]["scripts"]["topoplan"] == "topoplan.cli:main"


def test_html_templates_ship_as_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = config["package-data"]["topoplan.report"]
    templates = sorted(p.relative_to(ROOT / "topoplan" / "report") for p in (ROOT / "topoplan/report/templates").iterdir())
    assert templates and all(any(t.match(pattern) for pattern in patterns) for t in templates), templates
