"""The session events a widget follows, disconnected together when the widget shuts down: the
session (a notebook's ``dmlviewer.view(...)`` session) may outlive every widget bound to it."""

from __future__ import annotations

from typing import Any, Callable


class SessionLinks:
    """``connect(signal, callback)`` for each followed event; :meth:`close` disconnects them all."""

    def __init__(self) -> None:
        self._links: list[tuple[Any, Callable]] = []

    def connect(self, signal, callback: Callable) -> None:
        signal.connect(callback)
        self._links.append((signal, callback))

    def close(self) -> None:
        for signal, callback in self._links:
            signal.disconnect(callback, missing_ok=True)
        self._links.clear()
