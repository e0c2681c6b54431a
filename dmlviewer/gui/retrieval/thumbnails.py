"""Thumbnails decoded off the GUI thread, only for what is on screen, kept in a bounded cache.

A :class:`ThumbnailLoader` serves every view that shows dataset images (the browser, the
retrieval results). ``thumbnail(index)`` answers from an LRU cache of ``QPixmap`` or queues a
decode in a ``QThreadPool`` and answers ``None`` (the view draws a placeholder). Views tell
the loader which images they show (:meth:`ThumbnailLoader.set_visible`): queued decodes of
images that scrolled away are dropped (``QThreadPool.clear``) and a decode whose image is no
longer shown when its turn comes is skipped, so scrolling through 120,000 images decodes only
what was actually on screen. Decoded pixels become a ``QImage`` in the worker (thread-safe) and
a ``QPixmap`` on the GUI thread. Unreadable files are reported once through :attr:`failed`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from typing import Callable, Iterable

import cv2
import numpy as np
from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal
from PySide6.QtGui import QImage, QPixmap

log = logging.getLogger(__name__)


def _default_load(path: str) -> np.ndarray:
    from dmlviewer.core.data import load_image

    return load_image(path)


def to_qimage(image: np.ndarray) -> QImage:
    """A deep-copied ``QImage`` of an H x W x 3 uint8 RGB array."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    h, w = image.shape[:2]
    return QImage(image.data, w, h, 3 * w, QImage.Format_RGB888).copy()


def make_thumbnail(image: np.ndarray, size: int) -> QImage:
    """Fit ``image`` in ``size x size`` (aspect kept, area interpolation) as a ``QImage``."""
    h, w = image.shape[:2]
    scale = min(size / max(w, 1), size / max(h, 1), 1.0)
    if scale < 1.0:
        image = cv2.resize(image, (max(1, round(w * scale)), max(1, round(h * scale))),
                           interpolation=cv2.INTER_AREA)
    return to_qimage(image)


class _Signals(QObject):
    # Emitted from pool threads; the receiver lives in the GUI thread (queued delivery).
    decoded = Signal(int, int, QImage)  # generation, index, thumbnail
    failed = Signal(int, int, str)  # generation, index, reason
    skipped = Signal(int, int)  # generation, index


class _Decode(QRunnable):
    def __init__(self, loader: "ThumbnailLoader", generation: int, index: int, path: str) -> None:
        super().__init__()
        self.setAutoDelete(True)
        self._loader = loader
        self._generation = generation
        self._index = index
        self._path = path

    def run(self) -> None:
        loader, gen, index = self._loader, self._generation, self._index
        if not loader._start(gen, index):
            loader._signals.skipped.emit(gen, index)
            return
        try:
            from dmlviewer.core.data.images import check_inside

            check_inside(loader._root, self._path)  # links out of the dataset folder are not followed
            thumb = make_thumbnail(loader.load(self._path), loader.size)
        except Exception as exc:  # noqa: BLE001 - any unreadable file becomes a reported problem
            reason = getattr(exc, "reason", None) or f"{type(exc).__name__}: {exc}"
            loader._signals.failed.emit(gen, index, str(reason))
            return
        loader._signals.decoded.emit(gen, index, thumb)


class ThumbnailLoader(QObject):
    """Asynchronous, cached thumbnails of one dataset's images (see the module docstring).

    ``load(path) -> H x W x 3 uint8`` decodes one file (default: ``core.data.load_image``).
    Signals: ``ready(index)`` when a thumbnail (or a failure) is known, ``failed(index, path,
    reason)`` once per unreadable file.

    The loader's own generation (one more per :meth:`set_paths`) is not a second freshness
    rule beside ``Session.accepts`` (issue 39 item 5): it guards only this cache, whose keys are
    indices into the current path list, so that a decode queued for the previous list is not
    cached under an index that now names another file. Nothing it guards is a result shown for
    the session's dataset or model: the views ask for thumbnails by index and draw what the
    cache holds.
    """

    ready = Signal(int)
    failed = Signal(int, str, str)

    def __init__(
        self,
        size: int = 112,
        capacity: int = 1500,
        threads: int = 2,
        load: Callable[[str], np.ndarray] | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.size = size
        self.capacity = capacity
        self.load = load or _default_load
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(max(1, threads))
        self._signals = _Signals()
        self._signals.decoded.connect(self._on_decoded)
        self._signals.failed.connect(self._on_failed)
        self._signals.skipped.connect(self._on_skipped)
        self._lock = threading.Lock()
        self._generation = 0
        self._root = ""
        self._paths: list[str] = []
        self._cache: OrderedDict[int, QPixmap] = OrderedDict()
        self._broken: dict[int, str] = {}
        self._queued: set[int] = set()
        self._running: set[int] = set()
        self._visible: dict[str, frozenset[int]] = {}
        self._wanted: frozenset[int] = frozenset()

    # -- setup
    def set_paths(self, root: str, paths: list[str]) -> None:
        """Serve new images, ``root``/``paths[i]`` (a new dataset): drop everything old."""
        with self._lock:
            self._generation += 1
            self._root = str(root)
            self._paths = paths
            self._queued.clear()
            self._running.clear()
            self._visible.clear()
            self._wanted = frozenset()
        self._pool.clear()
        self._cache.clear()
        self._broken.clear()

    # -- queries
    def thumbnail(self, index: int) -> QPixmap | None:
        """The cached thumbnail, or None after queueing its decode (if not broken)."""
        pix = self._cache.get(index)
        if pix is not None:
            self._cache.move_to_end(index)
            return pix
        if index not in self._broken:
            self._request(index)
        return None

    def path(self, index: int) -> str:
        return os.path.join(self._root, self._paths[index])

    def cached(self, index: int) -> QPixmap | None:
        return self._cache.get(index)

    def broken_reason(self, index: int) -> str | None:
        return self._broken.get(index)

    def set_visible(self, client: str, indices: Iterable[int]) -> None:
        """``client`` (a view) now shows exactly ``indices``: queued decodes of images no view
        shows are dropped, missing thumbnails of shown ones are queued."""
        shown = frozenset(int(i) for i in indices)
        with self._lock:
            self._visible[client] = shown
            self._wanted = frozenset().union(*self._visible.values())
            wanted = self._wanted
            dropped = self._queued - wanted
            self._queued &= wanted
        if dropped:
            # Queued runnables of dropped rows would only be skipped; clearing the pool removes
            # them at once and the rows still wanted are queued again below.
            self._pool.clear()
            with self._lock:
                self._queued.clear()
        for index in sorted(wanted):
            if index not in self._cache and index not in self._broken:
                self._request(index)

    def wait_idle(self, timeout_ms: int = 10000) -> bool:
        """Block until no decode is running or queued (tests, screenshots)."""
        return self._pool.waitForDone(timeout_ms)

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._queued or self._running)

    # -- internals
    def _request(self, index: int) -> None:
        with self._lock:
            if index in self._queued or index in self._running or not 0 <= index < len(self._paths):
                return
            self._queued.add(index)
            gen, path = self._generation, self.path(index)
        self._pool.start(_Decode(self, gen, index, path))

    def _start(self, generation: int, index: int) -> bool:
        """Called by a decode in its thread: may it run?"""
        with self._lock:
            self._queued.discard(index)
            if generation != self._generation or (self._wanted and index not in self._wanted):
                return False
            self._running.add(index)
            return True

    def _finish(self, generation: int, index: int) -> bool:
        with self._lock:
            self._running.discard(index)
            return generation == self._generation

    def _on_decoded(self, generation: int, index: int, image: QImage) -> None:
        if not self._finish(generation, index):
            return
        self._cache[index] = QPixmap.fromImage(image)
        while len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        self.ready.emit(index)

    def _on_failed(self, generation: int, index: int, reason: str) -> None:
        if not self._finish(generation, index):
            return
        self._broken[index] = reason
        path = self.path(index)
        log.info("cannot read %s: %s", path, reason)
        self.failed.emit(index, path, reason)
        self.ready.emit(index)

    def _on_skipped(self, generation: int, index: int) -> None:
        self._finish(generation, index)
