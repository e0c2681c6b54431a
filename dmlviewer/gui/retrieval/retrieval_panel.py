"""Retrieval: the query's top-K neighbours, and interactive retrieval by a region of the query.

Neighbours come from the loaded HDF5 feature file (``core.evaluate.retrieve``), matched to the
open dataset by relative path. Without a feature file the panel asks the main window to
extract features of the current dataset with the current model (a background job whose HDF5
file is then opened), automatically for small datasets and on a button press for large ones.
Each result is framed green with a ✓ when its class equals the query's, red with a ✗
otherwise; clicking one makes it the reference.

Model B's neighbours (issue 41): while model B is open (File ▸ Compare With Model) and its own
feature file fits the dataset and model B (``Session.features_ready("compare")``; File ▸ Open
Features for Model B, or Compute Features for Model B, or the panel's button), a second column
beside A's shows B's top-K of the same query, marked right or wrong in the same way; clicking
one of B's makes it model B's own reference (``reference_b``). Both columns then draw smaller
thumbnails so that they fit the dock side by side. Without model B nothing of this shows.

The panel binds to the app's session (``core.session.Session``): it follows the session's
dataset, model, feature file, pair and jobs through their events, and its "top K" to
``session.display.neighbours``. Neighbours are shown only for features of the open dataset and
model (``Session.features_problem``: the file's ``dataset_fingerprint`` and
``checkpoint_sha256``). After another checkpoint is opened the panel re-extracts (small
datasets, in the job queue) or offers to; a feature file of another model or dataset is flagged
and its neighbours are not shown under this pair. While the features are being computed (an
``extract`` job of the session that works for what is open) the panel says so and its Compute
button waits. A search's result is shown only when the session still accepts the stamp taken
when it started (the one freshness rule; no counter of the panel's own).

Interactive retrieval (seed 000 Sec. 5.4): a rectangle drawn on the query pane gives the
partial feature of that region (``core.explain.region_feature``, the sum of the region's
contributions ``W_ij A_ij``), which is matched against the stored embeddings instead of the
query's whole embedding.

Cross-view data (issue 25; a CVUSA-layout folder) with a two-branch model: extraction runs
each image through its own branch, and a street query's neighbours are the aerial images of
its split (an aerial query's the streets; ``core.evaluate.retrieval.cross_view_gallery``), so
the correct aerial image is the green one. A region of a street query is embedded by the query
branch and searched among the same aerial images. A two-branch model with a dataset that does
not say which images are streets and which aerial images gets one line saying so, and no
features are computed.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
from PySide6.QtCore import QModelIndex, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import (QHBoxLayout, QListWidget, QListWidgetItem, QPushButton,
                               QSpinBox, QStyle, QStyledItemDelegate, QVBoxLayout, QWidget)

from dmlviewer.core.data.lookup import PathIndex
from dmlviewer.core.session import Session
from dmlviewer.gui.common import errors
from dmlviewer.gui.window.session_links import SessionLinks
from dmlviewer.gui.retrieval.thumbnails import ThumbnailLoader
from dmlviewer.gui.common.widgets import ElidedLabel, WrappedLabel, elide_words
from dmlviewer.gui.jobs.latest import LatestRunner

log = logging.getLogger(__name__)

CORRECT = QColor("#27ae60")
WRONG = QColor("#eb5757")

#: Datasets up to this size get their features extracted without asking.
AUTO_EXTRACT_MAX = 5000

_INDEX = Qt.UserRole + 1  # dataset index (or -1 when not in the open dataset)
_CORRECT = Qt.UserRole + 2  # True / False
_TEXT = Qt.UserRole + 3


#: The thumbnail size of each column while A's and B's neighbours are shown side by side.
COMPACT_SIZE = 84


class _ResultDelegate(QStyledItemDelegate):
    def __init__(self, loader: ThumbnailLoader, parent=None) -> None:
        super().__init__(parent)
        self.loader = loader
        self.size: int | None = None  # the thumbnail size drawn (None: the loader's)

    def sizeHint(self, option, index) -> QSize:  # noqa: N802 - Qt API
        size = self.size or self.loader.size
        return QSize(size + 12, size + 40)

    def paint(self, painter: QPainter, option, index: QModelIndex) -> None:
        painter.save()
        rect = option.rect.adjusted(3, 3, -3, -3)
        if option.state & QStyle.State_MouseOver:
            painter.fillRect(rect, option.palette.alternateBase())
        size = self.size or self.loader.size
        img = QRect(rect.x() + (rect.width() - size) // 2, rect.y() + 3, size, size)
        ds_index = index.data(_INDEX)
        pix = self.loader.thumbnail(ds_index) if ds_index is not None and ds_index >= 0 else None
        if pix is not None and max(pix.width(), pix.height()) > size:
            pix = pix.scaled(size, size, Qt.KeepAspectRatio, Qt.SmoothTransformation)
        if pix is not None:
            painter.drawPixmap(img.x() + (size - pix.width()) // 2, img.y() + (size - pix.height()) // 2, pix)
        else:
            painter.fillRect(img.adjusted(6, 6, -6, -6), QColor(70, 70, 70))
        correct = bool(index.data(_CORRECT))
        painter.setPen(QPen(CORRECT if correct else WRONG, 4))
        painter.drawRect(img.adjusted(1, 1, -1, -1))
        badge = QRect(img.x() + 3, img.y() + 3, 16, 16)  # the mark in words too, not by colour alone
        painter.setRenderHint(QPainter.Antialiasing)
        painter.setPen(Qt.NoPen)
        painter.setBrush(CORRECT if correct else WRONG)
        painter.drawEllipse(badge)
        painter.setPen(QColor("white"))
        painter.drawText(badge, Qt.AlignCenter, "✓" if correct else "✗")
        painter.setPen(option.palette.text().color())
        text_rect = QRect(rect.x(), img.bottom() + 3, rect.width(), rect.bottom() - img.bottom() - 3)
        lines = str(index.data(_TEXT) or "").split("\n")
        fm = option.fontMetrics
        painter.drawText(text_rect, Qt.AlignHCenter | Qt.AlignTop,
                         "\n".join(elide_words(fm, line, text_rect.width() - 2, Qt.ElideRight) for line in lines))
        painter.restore()


class RetrievalPanel(QWidget):
    """Top-K neighbours of the query (or of a query region); click one to make it the reference."""

    reference_chosen = Signal(int)
    reference_b_chosen = Signal(int)  # one of model B's neighbours: model B's own reference
    extract_requested = Signal()
    extract_b_requested = Signal()  # compute model B's features
    whole_image_chosen = Signal()  # "Whole image": back from a region (the pair view drops its rectangle)

    def __init__(self, loader: ThumbnailLoader, parent=None, model_lock: threading.RLock | None = None,
                 session: Session | None = None) -> None:
        super().__init__(parent)
        self.loader = loader
        self.model_lock = model_lock or threading.RLock()
        self.session = session if session is not None else Session()
        self.index = None  # approximate search index of the features (None: exact search)
        self.search_note = ""
        self.query_index: int | None = None
        self.region: tuple | None = None
        self.results: list[dict] = []
        self.results_b: list[dict] = []  # model B's neighbours of the same query (issue 41)
        self._row_of_path = PathIndex([])  # dataset row of a path
        self._feature_rows = PathIndex([])  # feature-file row of a path
        self._feature_rows_b = PathIndex([])  # the same in model B's feature file
        self._auto_requested = False
        self._auto_reextract = True  # features of another model may be replaced without asking

        self.header = ElidedLabel("Neighbours", Qt.ElideRight)
        self.header.setObjectName("panelHeader")
        # The query's file name on a line of its own, elided in the middle (a long name must
        # neither wrap mid-word nor widen the dock).
        self.query_label = ElidedLabel("")
        self.k_spin = QSpinBox()
        self.k_spin.setRange(1, 100)
        self.k_spin.setValue(min(100, self.session.display.neighbours))
        self.k_spin.setPrefix("top ")
        self.source = WrappedLabel("No features loaded")  # a long file name must not widen the dock
        self.extract_button = QPushButton("Compute features")
        self.extract_button.setToolTip("Embed the open dataset with the current model (background job, "
                                       "saved as HDF5 in the cache) and retrieve from it")
        self.whole_button = QPushButton("Whole image")
        self.whole_button.setToolTip("Back to retrieval by the whole query")
        self.whole_button.hide()
        self.list = self._result_list()
        self.list.itemClicked.connect(lambda item: self._on_item(item, self.reference_chosen))
        # model B's column (shown while model B is open)
        self.caption_a = ElidedLabel("Model A", Qt.ElideRight)
        self.caption_b = ElidedLabel("Model B", Qt.ElideRight)
        self.list_b = self._result_list()
        self.list_b.setObjectName("neighboursB")
        self.list_b.itemClicked.connect(lambda item: self._on_item(item, self.reference_b_chosen))
        self.source_b = WrappedLabel("")
        self.extract_b_button = QPushButton("Compute features of model B")
        self.extract_b_button.setToolTip("Embed the open dataset with model B (background job) and show B's "
                                         "neighbours beside A's")
        self.extract_b_button.clicked.connect(self.extract_b_requested)
        self.runner = LatestRunner(self)
        self.runner.result_ready.connect(self._on_results)
        self.runner.request_failed.connect(self._on_failed)
        self.runner_b = LatestRunner(self)
        self.runner_b.result_ready.connect(self._on_results_b)
        self.runner_b.request_failed.connect(self._on_failed)
        loader.ready.connect(lambda _i: (self.list.viewport().update(), self.list_b.viewport().update()))
        self.k_spin.valueChanged.connect(self._k_changed)
        self.extract_button.clicked.connect(self.extract_requested)
        self.whole_button.clicked.connect(self._whole_image)

        top = QHBoxLayout()
        top.addWidget(self.header, 1)
        top.addWidget(self.k_spin)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.query_label)
        layout.addWidget(self.source)
        buttons = QHBoxLayout()
        buttons.addWidget(self.extract_button)
        buttons.addWidget(self.whole_button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        layout.addWidget(self.source_b)
        layout.addWidget(self.extract_b_button)
        columns = QHBoxLayout()
        columns.setSpacing(4)
        column_a = QVBoxLayout()
        column_a.addWidget(self.caption_a)
        column_a.addWidget(self.list, 1)
        columns.addLayout(column_a, 1)
        self.column_b = QWidget()  # hidden as one (a hidden layout would keep its stretch)
        column_b = QVBoxLayout(self.column_b)
        column_b.setContentsMargins(0, 0, 0, 0)
        column_b.addWidget(self.caption_b)
        column_b.addWidget(self.list_b, 1)
        columns.addWidget(self.column_b, 1)
        layout.addLayout(columns, 1)
        self._update_columns()

        events = self.session.events
        self._links = SessionLinks()
        for signal, callback in ((events.dataset, self._on_dataset), (events.model, self._on_model),
                                 (events.features, self._on_features), (events.pair, self._on_pair),
                                 (events.jobs, self._update_source),
                                 (self.session.display.events.neighbours, self._on_neighbours)):
            self._links.connect(signal, callback)
        if self.session.dataset is not None:
            self._on_dataset()
        if self.session.features is not None:
            self._on_features()
        if self.session.slot_features["compare"].features is not None:
            self._on_features("compare")

    def _result_list(self) -> QListWidget:
        results = QListWidget()
        results.setViewMode(QListWidget.IconMode)
        results.setResizeMode(QListWidget.Adjust)
        results.setMovement(QListWidget.Static)
        results.setUniformItemSizes(True)
        results.setSpacing(2)
        results.setMouseTracking(True)
        results.setItemDelegate(_ResultDelegate(self.loader, results))
        return results

    # -- what the panel shows, read from the session
    @property
    def dataset(self):
        return self.session.dataset

    @property
    def features(self):
        return self.session.features

    @property
    def model(self):
        return self.session.model

    @property
    def device(self) -> str:
        return self.session.device

    @property
    def model_sha(self) -> str | None:
        return self.session.model_sha

    @property
    def computing(self) -> bool:
        """True while an extraction of the open dataset with the open model runs."""
        return bool(self.session.running("extract", "primary"))

    # -- session events
    def _on_dataset(self) -> None:
        dataset = self.dataset
        self._row_of_path = PathIndex([] if dataset is None else dataset.paths)
        self._auto_requested = False
        self.query_index = None
        self.region = None
        self.whole_button.hide()
        self._show([])
        self._show([], "compare")
        self._update_source()

    @property
    def comparing(self) -> bool:
        """True while model B is open: the panel has B's column."""
        return self.session.slot("compare") is not None

    def _update_columns(self) -> None:
        """Model B's column, its captions and the smaller thumbnails show while model B is open."""
        comparing = self.comparing
        for widget in (self.caption_a, self.column_b, self.source_b):
            widget.setVisible(comparing)
        if not comparing:
            self.extract_b_button.setVisible(False)
        for results in (self.list, self.list_b):
            delegate = results.itemDelegate()
            size = COMPACT_SIZE if comparing else None
            if delegate.size != size:
                delegate.size = size
                results.doItemsLayout()
        if comparing:
            info = self.session.slot("compare").info
            self.caption_b.setText("Model B" + (f": {info['label']}" if info.get("label") else ""))
            self.caption_b.setToolTip(self.caption_b.text())

    def _on_model(self, slot: str = "primary") -> None:
        """Another model: features of another model are then replaced by this model's
        (extracted in the job queue; automatically for small datasets). Model B's: its
        column follows (its features are computed when asked for)."""
        if slot != "primary":
            self._update_columns()
            self._update_source()
            self._search_b()
            return
        self._auto_requested = False
        self._auto_reextract = True
        self._update_source()
        self.refresh()

    def _on_features(self, slot: str = "primary") -> None:
        """Retrieve from the session's features; opened by the user (``features_chosen``), a
        file of another model is flagged, not replaced without asking. Model B's: its column
        searches them."""
        if slot != "primary":
            features = self.session.slot_features[slot].features
            self._feature_rows_b = PathIndex([] if features is None else features.paths)
            self._update_source()
            self._search_b()
            return
        features = self.features
        self.index = None
        self.search_note = ""
        self._auto_reextract = not self.session.features_chosen
        self._feature_rows = PathIndex([] if features is None else features.paths)
        self._update_source()
        self.refresh()

    def _on_pair(self) -> None:
        if self.session.query_index is not None:
            self.set_query(self.session.query_index)

    def _on_neighbours(self, value: int) -> None:
        value = max(self.k_spin.minimum(), min(self.k_spin.maximum(), int(value)))
        if value != self.k_spin.value():
            self.k_spin.setValue(value)

    def _k_changed(self, value: int) -> None:
        if self.session.display.neighbours != value:
            self.session.display.neighbours = value
        self.refresh()

    def cross_view_problem(self) -> str | None:
        """Why the open two-branch model cannot retrieve in the open dataset (None: it can, or the
        model has one branch)."""
        from dmlviewer.core.evaluate.extract import is_two_branch

        if self.model is None or self.dataset is None or not is_two_branch(self.model):
            return None
        if getattr(self.dataset, "branches", None) is not None:
            return None
        return ("A two-branch model retrieves across views only in cross-view data (street and aerial images in "
                f"CVUSA's layout); this {self.dataset.format} dataset does not say which images are which.")

    def mismatch(self, slot: str = "primary") -> str | None:
        """Why ``slot``'s features must not be shown with the open dataset and its model (None:
        they may); the session's rule."""
        return self.session.features_problem(slot=slot)

    def set_index(self, index) -> None:
        """Search through ``index`` (an ``ApproximateIndex`` of the open features; None: exact)."""
        self.index = index if index is not None and self.features is not None and len(index) == len(self.features) else None
        if self.index is not None:
            meta = self.index.meta
            self.search_note = (f"approximate search ({meta.get('kind')}, nprobe {meta.get('nprobe')}, "
                                f"recall@10 {meta.get('recall', float('nan')):.2f})")
        self._update_source()
        self.refresh()

    def set_search_note(self, text: str) -> None:
        if self.index is None:
            self.search_note = text
            self._update_source()

    def set_query(self, index: int | None) -> None:
        """Neighbours of dataset image ``index`` by its whole embedding."""
        self.query_index = index
        self.region = None
        self.whole_button.hide()
        self.refresh()

    def _whole_image(self) -> None:
        self.set_query(self.query_index)
        self.whole_image_chosen.emit()

    def region_search(self, image: np.ndarray, region: tuple) -> None:
        """Neighbours of the partial feature of ``region = (y0, x0, y1, x1)`` of the query."""
        if self.cross_view_problem():
            errors.show_error(self, "Region retrieval", self.cross_view_problem())
            return
        if self.model is None or self.features is None:
            errors.show_error(self, "Region retrieval", "Region retrieval needs a checkpoint and "
                              "features (open an HDF5 feature file or compute features first).")
            return
        if self.mismatch():
            errors.show_error(self, "Region retrieval", f"{self.mismatch()} Compute the features of the "
                              "open model first (Compute features in the Retrieval panel).")
            return
        self.region = tuple(float(v) for v in region)
        self.whole_button.show()
        self._show([], "compare")  # a region is searched by model A only
        if self.comparing:
            self.caption_b.setText("Model B: whole-image queries only")
        y0, x0, y1, x1 = self.region
        self.header.setText("Neighbours of a query region")
        self.query_label.setText(f"x {x0:.0f}–{x1:.0f}, y {y0:.0f}–{y1:.0f} of {self._query_name()}")
        model, device, lock, features, k = self.model, self.device, self.model_lock, self.features, self.k_spin.value()
        search_index, feature_rows = self.index, self._feature_rows
        region = self.region
        # The query itself is left out, as whole-image retrieval leaves it out (its row is
        # looked up in the worker).
        query_path, stamp = self._query_path(), self.session.stamp(features=True)

        def job(cancel):
            from dmlviewer.core.evaluate.region_retrieval import region_retrieve

            row = None if query_path is None else feature_rows.find(query_path)
            with lock:
                cancel.raise_if_cancelled()
                return stamp, region_retrieve(model, image, region, features, k=k, device=device,
                                              index=search_index, query_row=row)

        self.runner.submit(job, cancel_aware=True)

    def _query_name(self) -> str:
        if self.query_index is None or self.dataset is None:
            return ""
        return self.dataset.paths[self.query_index].rsplit("/", 1)[-1]

    def _query_path(self) -> str | None:
        """The query's path (None without a query)."""
        if self.query_index is None or self.dataset is None:
            return None
        return str(self.dataset.paths[self.query_index])

    def refresh(self) -> None:
        if self.region is not None:
            return
        index, ds = self.query_index, self.dataset
        if index is None or ds is None:
            self.header.setText("Neighbours: choose a query")
            self.query_label.setText("")
            self._show([])
            self._show([], "compare")
            return
        self.header.setText("Neighbours of the query")
        self.query_label.setText(self._query_name())
        self._search_b()  # model B's column, whatever becomes of A's
        mismatch = self.mismatch()
        if self.cross_view_problem():
            self._show([])
            return
        if self.features is None or mismatch:
            self._show([])
            if (self.model is not None and not self._auto_requested and len(ds) <= AUTO_EXTRACT_MAX
                    and (self.features is None or self._auto_reextract)):
                self._auto_requested = True
                self.extract_requested.emit()
            return
        self._update_source()
        self.runner.submit(self._search_job(self.features, self._feature_rows, ds.paths[index], self.index,
                                            self.session.stamp(features=True)), cancel_aware=True)

    def _search_job(self, features, feature_rows: PathIndex, path: str, search_index, stamp):
        """The job of one search (A's or B's column): the query's row in ``features`` by path,
        its top-K (through ``search_index``, None: exact); answers ``(stamp, results or None)``."""
        k, dataset_rows = self.k_spin.value(), self._row_of_path

        def job(cancel):
            from dmlviewer.core.evaluate import retrieve

            # The path look-ups build their indices on first use (a second or so on a million
            # rows): here in the worker, not on the GUI thread.
            row = feature_rows.find(path)
            if row is None:
                return stamp, None
            results = retrieve(features, row, k, index=search_index)
            dataset_rows.prepare()
            return stamp, results

        return job

    def _search_b(self) -> None:
        """Model B's neighbours of the query by its whole embedding, from B's own features
        (exact search), when model B is open with features that fit it."""
        self._update_columns()
        index, ds = self.query_index, self.dataset
        if (self.region is not None or index is None or ds is None or self.cross_view_problem()
                or not self.session.features_ready("compare")):
            self._show([], "compare")
            return
        self.runner_b.submit(self._search_job(self.session.slot_features["compare"].features, self._feature_rows_b,
                                              ds.paths[index], None, self.session.stamp("compare", features=True)),
                             cancel_aware=True)

    @property
    def searching(self) -> bool:
        """True while the newest search (A's or B's) has not answered (screenshots wait for it)."""
        return self.runner.pending or self.runner_b.pending

    # -- outputs
    def _on_results(self, request: int, value: object) -> None:
        stamp, results = value
        if not self.session.accepts(stamp):  # computed from features, a dataset or a model no longer open
            return
        if results is None:
            self.source.setText(f"{self._features_text()}<br><i>the query is not in this feature file</i>")
            self._show([])
            return
        self._show(list(results))

    def _on_results_b(self, request: int, value: object) -> None:
        stamp, results = value
        if not self.session.accepts(stamp) or self.region is not None:
            return
        if results is None:
            self.source_b.setText("Model B: <i>the query is not in its feature file</i>")
        self._show(list(results or []), "compare")

    def _on_failed(self, request: int, text: str) -> None:
        first, details = errors.split_failure(text)
        errors.show_error(self, "Retrieval failed", first, details)

    def _show(self, results: list[dict], slot: str = "primary") -> None:
        """List ``results`` in ``slot``'s column, each marked right (the query's class) or wrong."""
        target = self.list if slot == "primary" else self.list_b
        if slot == "primary":
            self.results = results
        else:
            self.results_b = results
        target.clear()
        ds = self.dataset
        query_label = None
        if ds is not None and self.query_index is not None:
            query_label = int(ds.labels[self.query_index])
        shown = []
        for rank, r in enumerate(results, 1):
            index = self._row_of_path.find(str(r["path"]))
            index = -1 if index is None else index
            label = int(r["label"])
            name = ds.class_names[label] if ds is not None and 0 <= label < ds.num_classes else str(label)
            item = QListWidgetItem()
            item.setData(_INDEX, index)
            item.setData(_CORRECT, query_label is not None and label == query_label)
            item.setData(_TEXT, f"{rank}. {float(r['similarity']):.3f}\n{name}")
            item.setToolTip(f"{r['path']}\nclass {name}\ncosine {float(r['similarity']):.4f}")
            target.addItem(item)
            if index >= 0:
                shown.append(index)
        # A new result set starts at hit 1 (the list kept the old scroll position, issue 23).
        target.scrollToTop()
        target.horizontalScrollBar().setValue(0)
        self.loader.set_visible("retrieval" if slot == "primary" else "retrieval-b", shown)

    @staticmethod
    def _on_item(item: QListWidgetItem, chosen) -> None:
        """A click on a neighbour: its dataset index to ``chosen`` (A's or B's reference signal)."""
        index = item.data(_INDEX)
        if index is not None and index >= 0:
            chosen.emit(int(index))

    def _features_text(self) -> str:
        f = self.features
        if f is None:
            return "No features loaded"
        path = getattr(f, "path", None)
        note = self.search_note
        if "branch" in getattr(f, "extra", {}) or "branch" in getattr(f, "datasets", ()):
            note = ("cross-view: a street query searches the aerial images of its split, an aerial "
                    "query the streets (exact search)")
        return (f"Features: {len(f):,} images" + (f" ({Path(path).name})" if path else "")
                + (f"<br><i>{note}</i>" if note else ""))

    def _update_source(self, *_args) -> None:
        self._update_source_a()
        self._update_source_b()

    def _update_source_b(self) -> None:
        """Model B's line: its features, why they are not shown, or how to get them."""
        if not self.comparing:
            return
        held = self.session.slot_features["compare"]
        found = self.session.features_mismatch(slot="compare")
        computing = bool(self.session.running("extract", "compare"))
        if computing:
            text = "Model B: computing its features (see View ▸ Jobs)…"
        elif held.features is None:
            text = ("Model B: no features. Compute them, or open B's feature file "
                    "(File ▸ Open Features for Model B).")
        elif found is not None:
            from dmlviewer.core.slot_features import FEATURES_MISMATCH_HEADINGS

            text = f"<span style='color:#eb5757'><b>{FEATURES_MISMATCH_HEADINGS[found[0]]}</b></span> {found[1]}"
        else:
            text = (f"Model B: features of {len(held.features):,} images"
                    + (f" ({Path(held.path).name})" if held.path else ""))
        self.source_b.setText(text)
        self.extract_b_button.setVisible(not computing and (held.features is None or found is not None))
        self.extract_b_button.setEnabled(self.dataset is not None)

    def _update_source_a(self) -> None:
        has = self.features is not None
        mismatch = self.mismatch()
        problem = self.cross_view_problem()
        if problem:
            self.source.setText(f"<span style='color:#eb5757'>{problem}</span>")
            self.extract_button.setVisible(False)
            return
        if self.computing:  # an extraction for what is open runs: no second request (issue 31 item 4)
            self.source.setText("Computing the features of the dataset with the open model (see View ▸ Jobs)…")
            self.extract_button.setText("Computing features…")
            self.extract_button.setVisible(True)
            self.extract_button.setEnabled(False)
            return
        if mismatch:
            from dmlviewer.core.slot_features import FEATURES_MISMATCH_HEADINGS

            cause = self.session.features_mismatch()[0]  # the heading agrees with the sentence (issue 42 item 3)
            self.source.setText(f"<span style='color:#eb5757'><b>{FEATURES_MISMATCH_HEADINGS[cause]}</b></span> "
                                f"{mismatch}")
            self.extract_button.setText("Compute features of the open dataset" if cause == "dataset"
                                        else "Compute features of the open model")
        else:
            self.source.setText(self._features_text() if has else
                                "No features loaded: open an HDF5 feature file, or compute them.")
            self.extract_button.setText("Compute features")
        self.extract_button.setVisible(not has or bool(mismatch))
        self.extract_button.setEnabled(self.model is not None and self.dataset is not None)

    def shutdown(self) -> None:
        self.runner.stop(1.0)
        self.runner_b.stop(1.0)
        self._links.close()  # the session may outlive the panel
