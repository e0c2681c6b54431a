"""The package list in pyproject.toml must name every package, and resources load through the package."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "dmlviewer").rglob("__init__.py")
    }
    found.add("dmlviewer.resources")
    assert found == listed, f"missing: {sorted(found - listed)}, stale: {sorted(listed - found)}"


def test_resources_resolve_through_the_package(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # never relative to the working directory
    from dmlviewer.resources import resource_path

    assert resource_path("__init__.py").is_file()
