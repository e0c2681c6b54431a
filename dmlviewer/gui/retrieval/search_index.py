"""Keeps the approximate search index of the open feature file (``core.evaluate.search``).

When a feature file of at least :data:`INDEX_MIN_ROWS` rows is opened and faiss is installed
(the ``search`` extra), one job in the job queue (visible and cancellable in the Jobs dock)
builds the index if it is missing or stale (another checkpoint or extraction) and loads it;
``index_ready`` then hands it to the retrieval panel. Until then, and always for smaller files
or without faiss, retrieval is exact (streamed from the file in chunks). A cross-view feature
file (a per-row ``branch``) gets no index: each query searches only the other branch's rows,
exactly (``core.evaluate.retrieval``).
"""

from __future__ import annotations

import logging
import os

from PySide6.QtCore import QObject, Signal

log = logging.getLogger(__name__)

#: Feature files from this many rows get an approximate index (exact search over fewer rows
#: takes well under a second).
INDEX_MIN_ROWS = 100_000


class IndexKeeper(QObject):
    """``set_features(features)`` -> (maybe) a job -> ``index_ready(index or None)``."""

    index_ready = Signal(object)
    status = Signal(str)

    def __init__(self, runner, parent=None) -> None:
        super().__init__(parent)
        self.runner = runner
        self.job = None
        self.features = None

    def set_features(self, features) -> None:
        from dmlviewer.core.evaluate.retrieval import branch_column
        from dmlviewer.core.evaluate.search import faiss_module, prepare_index

        if self.job is not None:
            self.runner.cancel(self.job)
            self.job = None
        self.features = features
        self.index_ready.emit(None)
        if features is None or len(features) < INDEX_MIN_ROWS or not hasattr(features, "iter_chunks"):
            return
        try:
            cross_view = branch_column(features) is not None
        except ValueError:  # a bad 'branch' column: the retrieval panel says so
            cross_view = True
        if cross_view:  # each query searches a gallery subset, exactly
            self.status.emit("exact search (cross-view: a query searches the other branch's images)")
            return
        if faiss_module() is None:
            self.status.emit("exact search (install the search extra for an index)")
            return
        path = str(features.path)
        threads = max(1, (os.cpu_count() or 2) - 1)  # one core is left to the GUI

        def factory(cancel):
            return prepare_index(path, cancel, threads=threads)

        self.status.emit("exact search until the index is ready (see Jobs)")
        self.job = self.runner.submit(f"Search index of {os.path.basename(path)}", factory, finished=self._on_finished,
                                      failed=self._on_ended, cancelled=self._on_ended)

    def _on_finished(self, job, result) -> None:
        if job is self.job:
            self.job = None
            self.index_ready.emit(result)

    def _on_ended(self, job, *_args) -> None:
        if job is self.job:
            self.job = None
            self.status.emit("exact search (no index)")
