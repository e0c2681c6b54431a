"""The environment of a dmlviewer process a test starts: its settings, data, cache, home and
documents folders (the documents folder holds the default output folder, where feature files are
written) under one temporary folder, never the user's."""

from __future__ import annotations

import os
from pathlib import Path


def app_env(folder: Path, **extra: str) -> dict[str, str]:
    """``os.environ`` with every per-user folder under ``folder`` (``config``, ``data``,
    ``cache``, ``documents``), plus ``extra``."""
    folder = Path(folder)
    (folder / "config").mkdir(parents=True, exist_ok=True)
    # Qt reads the documents folder from here (else $HOME/Documents)
    (folder / "config" / "user-dirs.dirs").write_text(f'XDG_DOCUMENTS_DIR="{folder / "documents"}"\n')
    return dict(os.environ, HOME=str(folder), XDG_CONFIG_HOME=str(folder / "config"),
                XDG_DATA_HOME=str(folder / "data"), XDG_CACHE_HOME=str(folder / "cache"), **extra)
