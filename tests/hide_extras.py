"""pytest plugin: run tests as if optional extras were not installed.

``pytest -p hide_extras --hide-modules=timm,safetensors,faiss ...`` (with ``tests`` on
``PYTHONPATH``) makes every import of those modules (and their sub-modules) fail with
``ModuleNotFoundError`` and ``importlib.util.find_spec`` return ``None`` for them, from before
collection on, as in an install without the extras. Tests of optional features must then skip
(``pytest.importorskip``), never fail. Not loaded by default.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys


class _Hidden(importlib.abc.MetaPathFinder):
    """Refuses to find the hidden top-level modules and everything below them."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def hidden(self, fullname: str) -> bool:
        return fullname.split(".")[0] in self.names

    def find_spec(self, fullname, path=None, target=None):  # noqa: D102 - importlib API
        if self.hidden(fullname):
            raise ModuleNotFoundError(f"No module named {fullname!r} (hidden by hide_extras)", name=fullname)
        return None


def pytest_addoption(parser) -> None:
    parser.addoption("--hide-modules", default="", help="comma-separated top-level modules to hide")


def pytest_configure(config) -> None:
    names = {n.strip() for n in config.getoption("--hide-modules").split(",") if n.strip()}
    if not names:
        return
    loaded = [m for m in sys.modules if m.split(".")[0] in names]
    for m in loaded:
        del sys.modules[m]
    finder = _Hidden(names)
    sys.meta_path.insert(0, finder)
    real_find_spec = importlib.util.find_spec

    def find_spec(name, package=None):
        return None if finder.hidden(importlib.util.resolve_name(name, package)) else real_find_spec(name, package)

    importlib.util.find_spec = find_spec
    config.hidden_modules = sorted(names)


def pytest_report_header(config) -> str | None:
    names = getattr(config, "hidden_modules", None)
    return f"hidden modules (hide_extras): {', '.join(names)}" if names else None
