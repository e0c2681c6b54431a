"""The latest-only runner: interactive requests (pair preparation, neighbours, an import's
analysis) where only the newest request matters, served one at a time in a daemon thread."""

from __future__ import annotations

import itertools
import threading
import traceback
from typing import Any, Callable

from PySide6.QtCore import QObject, Signal

from dmlviewer.core.progress import Cancelled, CancelToken


class _LatestWorker:
    """Serves the newest pending request of a :class:`LatestRunner`, one at a time, in a
    daemon thread (so an app that quits mid-request is not held up)."""

    def __init__(self, deliver: Callable[[str, int, Any], None]) -> None:
        self._deliver = deliver
        self._cond = threading.Condition()
        self._pending: tuple[int, Callable, bool, CancelToken] | None = None
        self._running: CancelToken | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="dmlviewer-latest", daemon=True)
        self._thread.start()

    def put(self, request: tuple[int, Callable, bool, CancelToken] | None) -> None:
        """Replace the pending request (None: drop it) and cancel the running one."""
        with self._cond:
            self._pending = request
            if self._running is not None:
                self._running.cancel()
            self._cond.notify()

    def stop(self, timeout_s: float) -> bool:
        with self._cond:
            self._stopping = True
        self.put(None)
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                request_id, func, cancel_aware, token = self._pending
                self._pending = None
                self._running = token
            try:
                value = func(token) if cancel_aware else func()
                outcome = ("result", value)
            except Cancelled:
                outcome = None
            except Exception as exc:  # noqa: BLE001 - reported to the requester
                outcome = ("failed", f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}")
            with self._cond:
                self._running = None
            if outcome is not None and not token.cancelled:
                try:
                    self._deliver(outcome[0], request_id, outcome[1])
                except RuntimeError:  # the runner's Qt object is gone (app quitting)
                    return


class LatestRunner(QObject):
    """Interactive work where only the newest request matters (pair preparation, neighbours).

    ``submit(func)`` returns a request id; ``func()`` (or ``func(cancel)`` with
    ``cancel_aware=True``, so that a superseded request can stop early) runs in a worker
    thread. A new request replaces one still pending and cancels the token of the one
    running; ``result_ready(request_id, value)`` and ``request_failed(request_id, text)``
    are emitted only for the newest request: stale results are dropped. ``pending`` says
    whether the newest request has not answered yet (so a caller keeps no request id of its
    own). Whether a result still belongs to what is open is the session's stamp check
    (``core.session.Session.accepts``), not the runner's.
    """

    result_ready = Signal(int, object)
    request_failed = Signal(int, str)
    # Emitted from the worker thread, delivered queued in the GUI thread, filtered there.
    _raw_result = Signal(int, object)
    _raw_failed = Signal(int, str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._ids = itertools.count(1)
        self._latest = 0
        self._pending = False
        self._raw_result.connect(self._on_result)
        self._raw_failed.connect(self._on_failed)
        self._worker = _LatestWorker(self._emit_raw)

    @property
    def pending(self) -> bool:
        """True while the newest request has not answered (nor been cancelled)."""
        return self._pending

    def submit(self, func: Callable[..., Any], cancel_aware: bool = False) -> int:
        self._pending = True
        self._latest = next(self._ids)
        self._worker.put((self._latest, func, cancel_aware, CancelToken()))
        return self._latest

    def cancel(self) -> None:
        """Forget every request: nothing pending runs and no result is delivered."""
        self._pending = False
        self._latest = next(self._ids)
        self._worker.put(None)

    def stop(self, timeout_s: float = 5.0) -> bool:
        """End the worker thread (at most ``timeout_s`` for the running request)."""
        self._pending = False
        self._latest = next(self._ids)
        return self._worker.stop(timeout_s)

    def _emit_raw(self, kind: str, request_id: int, value: Any) -> None:
        (self._raw_result if kind == "result" else self._raw_failed).emit(request_id, value)

    def _on_result(self, request_id: int, value: object) -> None:
        if request_id == self._latest:
            self._pending = False
            self.result_ready.emit(request_id, value)

    def _on_failed(self, request_id: int, text: str) -> None:
        if request_id == self._latest:
            self._pending = False
            self.request_failed.emit(request_id, text)
