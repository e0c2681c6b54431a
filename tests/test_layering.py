"""The core must stay headless: no module under dmlviewer.core may import Qt or pyqtgraph."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import dmlviewer.core

FORBIDDEN = ("PySide6", "PySide2", "PyQt5", "PyQt6", "shiboken6", "pyqtgraph", "qtpy", "superqt")


def _core_modules() -> list[Path]:
    root = Path(dmlviewer.core.__file__).parent
    return sorted(root.rglob("*.py"))


def test_core_sources_import_no_qt():
    offenders = []
    for path in _core_modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__"
            ) and node.args and isinstance(node.args[0], ast.Constant):
                names = [str(node.args[0].value)]
            for name in names:
                if name.split(".")[0] in FORBIDDEN:
                    offenders.append(f"{path}:{node.lineno} imports {name}")
    assert not offenders, "\n".join(offenders)
    assert len(_core_modules()) > 5


def test_importing_every_core_module_loads_no_qt():
    """Import each core module in a fresh interpreter and check sys.modules afterwards."""
    names = [m.name for m in pkgutil.walk_packages(dmlviewer.core.__path__, "dmlviewer.core.")]
    code = (
        "import importlib, sys\n"
        f"for n in {names!r}: importlib.import_module(n)\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"core imported: {out.stdout}"
