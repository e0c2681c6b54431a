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


def _module_imports() -> dict[str, set[str]]:
    """``module -> dmlviewer modules it imports`` (at any depth of the file, so imports inside
    functions count too), with ``from X import name`` resolved to the module ``X.name`` when
    that is a module."""
    import dmlviewer

    root = Path(dmlviewer.__file__).parent
    modules = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def test_no_import_cycles_between_modules():
    """One direction per pair of modules (the developers' guide): a cycle, even through an import
    inside a function, means two modules that know each other. Package ``__init__`` modules
    gather their own submodules: a cycle that stays inside one package through its ``__init__``
    is that, not two modules knowing each other."""
    graph = _module_imports()
    packages = _packages()
    cycles = []

    def visit(node, stack, on_stack, done):
        on_stack.add(node)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_stack:
                cycle = stack[stack.index(nxt):] + [nxt]
                inits = [m for m in cycle if m in packages]
                inside_one_package = any(all(m == c or m.startswith(c + ".") for m in cycle) for c in inits)
                if not inside_one_package:
                    cycles.append(" -> ".join(cycle))
            elif nxt not in done:
                visit(nxt, stack, on_stack, done)
        stack.pop()
        on_stack.discard(node)
        done.add(node)

    done: set[str] = set()
    for start in sorted(graph):
        if start not in done:
            visit(start, [], set(), done)
    assert not cycles, "\n".join(cycles)


def _packages() -> set[str]:
    import dmlviewer

    root = Path(dmlviewer.__file__).parent
    return {".".join(p.parent.relative_to(root.parent).parts) for p in root.rglob("__init__.py")}


def test_no_module_over_800_lines():
    """One module, one idea (issue 39): a file past 800 lines holds several; split it."""
    import dmlviewer

    root = Path(dmlviewer.__file__).parent
    long = {str(p.relative_to(root)): n for p in root.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 800}
    assert not long, f"modules over 800 lines: {long}"


def test_gui_modules_live_in_feature_folders():
    """gui/ is grouped by what the user sees (issue 39): no widget module loose at its top."""
    import dmlviewer.gui

    root = Path(dmlviewer.gui.__file__).parent
    loose = sorted(p.name for p in root.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules at the top of gui/: {loose}"
    assert all((d / "__init__.py").is_file() for d in root.iterdir() if d.is_dir() and d.name != "__pycache__")
