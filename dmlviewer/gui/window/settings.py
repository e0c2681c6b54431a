"""Persistent options, recent files and user folders of the app (QSettings, QStandardPaths).

Settings are an INI file in the user scope (``QSettings.IniFormat``), so that tests can move
them to a temporary folder with ``QSettings.setPath(QSettings.IniFormat, QSettings.UserScope,
tmp)``. The data folder (logs) and the cache folder (demo data) come from
``QStandardPaths`` with a home-folder fallback when Qt reports none.

What the user asks the app to compute (feature files, training runs) goes to the *output
folder*: ``~/Documents/dmlviewer`` (Qt's documents location) unless changed with File > Output
Folder, never into the installed package or a cache folder (:func:`is_private`).
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


def output_dir(settings: QSettings | None = None) -> Path:
    """The user-visible folder for the app's outputs (the ``paths/output`` setting, else
    ``<documents>/dmlviewer``), created on demand."""
    settings = settings or app_settings()
    chosen = str(settings.value("paths/output", "") or "")
    if chosen:
        folder = Path(chosen).expanduser()
    else:
        docs = QStandardPaths.writableLocation(QStandardPaths.DocumentsLocation) or str(Path.home())
        folder = Path(docs) / APPLICATION
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def set_output_dir(path: str | os.PathLike, settings: QSettings | None = None) -> Path:
    settings = settings or app_settings()
    settings.setValue("paths/output", str(Path(path).expanduser().resolve()))
    return output_dir(settings)


def package_dir() -> Path:
    """The folder of the installed dmlviewer package."""
    import dmlviewer

    return Path(dmlviewer.__file__).resolve().parent


def is_private(path: str | os.PathLike) -> bool:
    """Whether ``path`` lies in the installed package (e.g. the shipped demo checkpoint), its
    resources or the app's cache: no place for the user's outputs or to start browsing."""
    from dmlviewer.resources import resource_path

    target = expand_user(path).resolve()
    roots = {package_dir(), resource_path("").resolve(), Path(QStandardPaths.writableLocation(
        QStandardPaths.CacheLocation) or (Path.home() / ".cache" / APPLICATION)).resolve()}
    return any(target == root or root in target.parents for root in roots)


def expand_user(path: str | os.PathLike) -> Path:
    """``~`` expanded where it names a home folder; ``~nobody/x`` (no such user) stays as typed
    (``Path.expanduser`` raises there, and a typed field must never raise)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        return Path(path)


def output_path_for(preferred: str | os.PathLike, kind: str, settings: QSettings | None = None) -> Path:
    """``preferred`` when the user may write there, else the same file name in
    ``<output folder>/<kind>/`` (an output next to the shipped demo checkpoint, or in a
    read-only folder, moves to the output folder)."""
    preferred = expand_user(preferred)
    folder = preferred.parent
    if not is_private(folder) and folder.is_dir() and os.access(folder, os.W_OK):
        return preferred
    target = output_dir(settings) / kind
    target.mkdir(parents=True, exist_ok=True)
    return target / preferred.name


def start_dir(*candidates: str | os.PathLike | None, settings: QSettings | None = None) -> str:
    """Where a file dialog opens: the first candidate folder (a file's folder) that exists and
    is not private (:func:`is_private`), else the output folder."""
    for candidate in candidates:
        if not candidate:
            continue
        path = expand_user(candidate)
        folder = path if path.is_dir() else path.parent
        if folder.is_dir() and not is_private(folder):
            return str(folder)
    return str(output_dir(settings))


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


# -- model sources and the last session (core.last_session; issue 23 item 2)
def recent_models(settings: QSettings | None = None) -> list:
    """The recent models as ``ModelSource``s, newest first: ``recent/models`` (source dicts as
    JSON) followed by the plain paths of ``recent/checkpoints`` that older versions wrote."""
    from dmlviewer.core.last_session import recent_sources

    settings = settings or app_settings()
    return recent_sources(recent("models", settings) + recent("checkpoints", settings))


def add_recent_model(source, settings: QSettings | None = None, info: dict | None = None) -> None:
    """Remember ``source`` (a ``ModelSource``) first in the recent models; ``info`` (``open_model``'s):
    its loss and backbone are kept beside it, for the Recent Models menus' names."""
    import json

    from dmlviewer.core.models.naming import traits
    from dmlviewer.core.last_session import add_recent_source

    settings = settings or app_settings()
    items = add_recent_source(recent("models", settings) + recent("checkpoints", settings), source)
    settings.setValue("recent/models", [json.dumps(item, sort_keys=True) for item in items])
    settings.remove("recent/checkpoints")  # folded into recent/models
    known = _recent_traits(settings)
    if info is not None and items and source.persistent:
        known[_traits_key(items[0])] = traits(info)
    keys = {_traits_key(item) for item in items}
    settings.setValue("recent/model_traits", json.dumps({k: v for k, v in known.items() if k in keys}))


def _traits_key(item: dict) -> str:
    """A recent model's entry without the user's label (the key of its traits)."""
    import json

    return json.dumps({k: v for k, v in item.items() if k != "label"}, sort_keys=True)


def _recent_traits(settings: QSettings) -> dict[str, list[str]]:
    """The remembered traits of the recent models (settings text: untrusted, checked)."""
    import json

    try:
        data = json.loads(str(settings.value("recent/model_traits", "") or "{}"))
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): [str(t)[:40] for t in v[:4]] for k, v in data.items() if isinstance(v, list)}


def recent_model_names(sources: list, settings: QSettings | None = None) -> list[str]:
    """Names a person can tell apart for the Recent Models menus (``core.models.naming``): each
    source's run folder and file, its loss and backbone when it was opened here, distinct."""
    from dmlviewer.core.models.naming import distinct_names

    settings = settings or app_settings()
    known = _recent_traits(settings)
    return distinct_names([(s, known.get(_traits_key(s.to_dict())) if s.persistent else None) for s in sources])


def clear_recent_models(settings: QSettings | None = None) -> None:
    settings = settings or app_settings()
    settings.setValue("recent/models", [])
    settings.remove("recent/checkpoints")


#: The settings keys of the last session (``session/last`` is core.last_session's JSON; the others
#: are what older versions wrote, still read).
SESSION_KEYS = ("last", "dataset", "format", "checkpoint", "query", "reference", "features")


def session_values(settings: QSettings | None = None) -> dict[str, str]:
    """The raw text of the last session's settings (untrusted: read it with
    ``core.last_session.LastSession.from_settings``)."""
    settings = settings or app_settings()
    return {key: str(settings.value(f"session/{key}", "") or "") for key in SESSION_KEYS}


def save_session(data: dict, settings: QSettings | None = None) -> None:
    """Remember ``Session.to_dict()`` as the last session (older keys removed)."""
    import json

    settings = settings or app_settings()
    settings.setValue("session/last", json.dumps(data, sort_keys=True))
    for key in SESSION_KEYS[1:]:
        settings.remove(f"session/{key}")
