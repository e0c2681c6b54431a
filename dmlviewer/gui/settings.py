"""Persistent options, recent files and user folders of the app (QSettings, QStandardPaths).

Settings are an INI file in the user scope (``QSettings.IniFormat``), so that tests can move
them to a temporary folder with ``QSettings.setPath(QSettings.IniFormat, QSettings.UserScope,
tmp)``. The data folder (logs) and the cache folder (demo data) come from
``QStandardPaths`` with a home-folder fallback when Qt reports none.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QSettings, QStandardPaths

ORGANIZATION = "dmlviewer"
APPLICATION = "dmlviewer"

#: Entries kept in each recent-files list.
RECENT_MAX = 10


def app_settings() -> QSettings:
    """The app's settings store (INI file in the user scope)."""
    return QSettings(QSettings.IniFormat, QSettings.UserScope, ORGANIZATION, APPLICATION)


def _location(kind: QStandardPaths.StandardLocation, fallback: str) -> Path:
    path = QStandardPaths.writableLocation(kind)
    if not path:
        path = str(Path.home() / fallback / APPLICATION)
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def data_dir() -> Path:
    """The user's data folder for the app (``AppDataLocation``), created on demand."""
    return _location(QStandardPaths.AppDataLocation, ".local/share")


def cache_dir() -> Path:
    """The user's cache folder for the app (``CacheLocation``), created on demand."""
    return _location(QStandardPaths.CacheLocation, ".cache")


def log_dir() -> Path:
    folder = data_dir() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def recent(key: str, settings: QSettings | None = None) -> list[str]:
    """The recent-files list ``key`` (newest first)."""
    settings = settings or app_settings()
    value = settings.value(f"recent/{key}", [])
    if isinstance(value, str):  # QSettings returns a lone string for a one-item list
        value = [value]
    return [str(v) for v in (value or []) if v]


def add_recent(key: str, path: str | os.PathLike, settings: QSettings | None = None) -> list[str]:
    """Put ``path`` first in the recent list ``key`` (no duplicates, at most RECENT_MAX)."""
    settings = settings or app_settings()
    path = str(Path(path).expanduser().resolve())
    items = [path] + [p for p in recent(key, settings) if p != path]
    items = items[:RECENT_MAX]
    settings.setValue(f"recent/{key}", items)
    return items


def remove_recent(key: str, path: str, settings: QSettings | None = None) -> None:
    settings = settings or app_settings()
    settings.setValue(f"recent/{key}", [p for p in recent(key, settings) if p != path])
