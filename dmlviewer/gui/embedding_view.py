"""A 2-D map of an HDF5 features file: PCA always, t-SNE on request, coloured by class.

The projection is computed in the :class:`JobRunner` (t-SNE from scikit-learn can take
minutes); the GUI only draws it as one ``ScatterPlotItem``. Hovering a point shows its image
(decoded off the GUI thread by a :class:`ThumbnailLoader`) with its path and class; clicking a
point emits ``query_selected(row, path)`` so the main window can make that image the query.

PCA: the embeddings are centred and projected on their first two right singular vectors (the
directions of largest variance). t-SNE: scikit-learn's ``TSNE`` (cosine metric, PCA
initialisation, perplexity min(30, (n - 1) / 3)) on at most ``max_points`` rows drawn at
random (seeded), with its OpenMP threads limited to all cores but one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import (
    QComboBox, QFrame, QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QPushButton, QSpinBox,
    QVBoxLayout, QWidget,
)

from dmlviewer.core.progress import CancelToken, Progress
from dmlviewer.gui.training_dialog import PLOT_BACKGROUND, PathEdit, no_si_prefix
from dmlviewer.gui.widgets import fit_to_screen, guard_wheel
from dmlviewer.gui.worker import Job, JobRunner

log = logging.getLogger(__name__)

METHODS = ("pca", "tsne")


def pca_2d(x: np.ndarray) -> np.ndarray:
    """N x 2 coordinates on the two directions of largest variance."""
    x = np.asarray(x, dtype=np.float64)
    centred = x - x.mean(axis=0, keepdims=True)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return (centred @ vt[:2].T).astype(np.float32) if vt.shape[0] >= 2 else np.zeros((len(x), 2), np.float32)


def projection_job(features_path: str, method: str = "pca", max_points: int = 5000, seed: int = 0,
                   cancel: CancelToken | None = None) -> Iterator[Progress]:
    """Read a features file and project its embeddings to 2-D. Result: ``rows`` (the file's
    rows that were projected), ``xy`` (len(rows) x 2), ``labels``, ``paths``, ``root``."""
    from dmlviewer.core.evaluate import read_features

    if method not in METHODS:
        raise ValueError(f"unknown projection {method!r}; choose from {', '.join(METHODS)}")
    features = read_features(features_path, include_raw=False, include_groups=False)
    n = len(features)
    rows = np.arange(n)
    if method == "tsne" and n > max_points:
        rows = np.sort(np.random.default_rng(seed).choice(n, size=max_points, replace=False))
    x = features.embeddings[rows]
    yield Progress("log", 0, 1, f"{method.upper()} of {len(rows)} embeddings of size {x.shape[1]}")
    if cancel is not None:
        cancel.raise_if_cancelled()
    variance = None  # share of the variance along each PCA axis
    if method == "pca" or len(rows) < 5:
        xy = pca_2d(x)
        total = float(np.var(x, axis=0).sum())
        variance = [float(v) / total for v in np.var(xy, axis=0)] if total > 0 else None
    else:
        from sklearn.manifold import TSNE
        from threadpoolctl import threadpool_limits

        perplexity = float(min(30.0, (len(rows) - 1) / 3.0))
        # One core is left to the GUI: with every core busy, TSNE's OpenMP threads spin and
        # 2000 points took 45 s instead of 7 s on a 2-core machine.
        with threadpool_limits(max(1, (os.cpu_count() or 2) - 1), user_api="openmp"):
            xy = TSNE(n_components=2, perplexity=perplexity, metric="cosine", init="pca",
                      random_state=seed).fit_transform(x).astype(np.float32)
    yield Progress("done", 1, 1, data={"result": {
        "rows": rows, "xy": xy, "labels": features.labels[rows],
        "paths": [features.paths[i] for i in rows],
        "root": str(features.attrs.get("dataset_root", "")), "method": method,
        "class_names": features.class_names, "variance": variance,
    }})


#: Classes that get a legend entry (and a hue of their own); beyond, hues repeat and the legend
#: says so: hover a point for its class.
LEGEND_CLASSES = 24


def class_colors(labels: np.ndarray) -> dict[int, object]:
    """A colour per class: the distinct marker colours of the pair view for up to 16 classes,
    else evenly spaced hues (repeating beyond ``LEGEND_CLASSES`` classes)."""
    from dmlviewer.gui.image_pane import MARKER_COLORS

    classes = np.unique(labels)
    if len(classes) <= len(MARKER_COLORS):
        return {int(c): pg.mkColor(MARKER_COLORS[k]) for k, c in enumerate(classes)}
    hues = max(min(len(classes), LEGEND_CLASSES), 1)
    return {int(c): pg.intColor(k, hues=hues, values=1, alpha=220) for k, c in enumerate(classes)}


def class_brushes(labels: np.ndarray) -> list:
    """One brush per point, coloured by class (:func:`class_colors`)."""
    colors = {c: pg.mkBrush(color) for c, color in class_colors(labels).items()}
    return [colors[int(c)] for c in labels]


def _dot(color) -> QIcon:
    """A round colour swatch for the legend."""
    pixmap = QPixmap(12, 12)
    pixmap.fill(Qt.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.Antialiasing)
    painter.setPen(Qt.NoPen)
    painter.setBrush(QColor(color))
    painter.drawEllipse(1, 1, 10, 10)
    painter.end()
    return QIcon(pixmap)


def class_name(projection: dict, label: int) -> str:
    """A class's name from the feature file (``class <label>`` when the file has none)."""
    names = projection.get("class_names") or []
    return names[label] if 0 <= label < len(names) else f"class {label}"


class EmbeddingView(QWidget):
    """The 2-D projection of a features file (see the module docstring)."""

    query_selected = Signal(int, str)  # row in the features file, its path (relative to the dataset root)

    THUMB = 128

    def __init__(self, runner: JobRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        from dmlviewer.gui.thumbnails import ThumbnailLoader

        self.setWindowTitle("Embedding projection")
        self.runner = runner
        self.job: Job | None = None
        self.projection: dict | None = None
        self.hovered: int | None = None
        self.features = PathEdit("open", "Choose a features file", "HDF5 features (*.h5)")
        self.method = QComboBox()
        self.method.addItem("PCA", "pca")
        self.method.addItem("t-SNE", "tsne")
        self.max_points = QSpinBox()
        self.max_points.setRange(100, 200_000)
        self.max_points.setValue(5000)
        self.max_points.setToolTip("t-SNE uses at most this many points (a seeded random sample)")
        self.run_button = QPushButton("Project")
        self.status = QLabel("Choose a features file (Evaluation writes one).")
        self.plot = pg.PlotWidget()
        self.plot.setBackground(PLOT_BACKGROUND)  # the dark theme's, as the other plots
        self.plot.setAspectLocked(True)
        self.plot.showGrid(x=True, y=True, alpha=0.15)
        no_si_prefix(self.plot)
        # The legend sits beside the plot, never over points (which it would hide from hovering).
        self.legend = QListWidget()
        self.legend.setObjectName("classLegend")
        self.legend.setSelectionMode(QListWidget.NoSelection)
        self.legend.setFocusPolicy(Qt.NoFocus)
        self.legend.setMaximumWidth(220)
        self.legend.setToolTip("Colour of each class")
        self.scatter = pg.ScatterPlotItem(size=8, pen=None, hoverable=True, hoverSize=13,
                                          hoverPen=pg.mkPen("w", width=1.5), tip=None)
        self.plot.addItem(self.scatter)
        self.preview = QLabel(self.plot)
        self.preview.setFrameShape(QFrame.Box)
        self.preview.setStyleSheet("background: #2d2d30; color: #e0e0e0; padding: 3px;")
        self.preview.setAlignment(Qt.AlignCenter)
        self.preview.hide()
        self.loader = ThumbnailLoader(size=self.THUMB, capacity=500, threads=1, parent=self)
        row = QHBoxLayout()
        row.addWidget(QLabel("Features"))
        row.addWidget(self.features, 1)
        row.addWidget(self.method)
        row.addWidget(QLabel("t-SNE points"))
        row.addWidget(self.max_points)
        row.addWidget(self.run_button)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        body = QHBoxLayout()
        body.addWidget(self.plot, 1)
        body.addWidget(self.legend)
        layout.addLayout(body, 1)
        layout.addWidget(self.status)
        fit_to_screen(self, 980, 760)
        guard_wheel(self)

        self.run_button.clicked.connect(self._on_run_clicked)
        self.scatter.sigHovered.connect(self._on_hovered)
        self.scatter.sigClicked.connect(self._on_clicked)
        self.loader.ready.connect(self._on_thumbnail)
        runner.job_finished.connect(self._on_finished)
        runner.job_failed.connect(self._on_failed)

    def set_features(self, path: str) -> None:
        self.features.setText(str(path))

    def _on_run_clicked(self) -> None:  # no lambda holding self: see evaluation_view
        self.project()

    def project(self, method: str | None = None) -> Job | None:
        path = self.features.text()
        if not Path(path).is_file():
            self.status.setText(f"features file not found: {path or '(none chosen)'}")
            return None
        method = method or self.method.currentData()
        self.method.setCurrentIndex(self.method.findData(method))
        self.job = self.runner.submit(f"{self.method.currentText()} of {Path(path).name}",
                                      (projection_job, (path, method, self.max_points.value()), {}))
        self.status.setText(f"Computing {self.method.currentText()}...")
        return self.job

    def _on_finished(self, job: Job, result: Any) -> None:
        if job is self.job:
            self.show_projection(result)

    def _on_failed(self, job: Job, text: str) -> None:
        if job is self.job:
            self.status.setText(f"Projection failed: {text.strip().splitlines()[0] if text.strip() else ''}")
            self.status.setToolTip(text)

    def show_projection(self, projection: dict) -> None:
        """Draw a ``projection_job`` result."""
        self.projection = projection
        xy, labels = projection["xy"], projection["labels"]
        self.scatter.setData(x=xy[:, 0], y=xy[:, 1], data=np.arange(len(xy)), brush=class_brushes(labels))
        self._axes(projection)
        self._legend(projection)
        self.plot.autoRange()
        self.loader.set_paths(projection["root"], list(projection["paths"]))
        self.hovered = None
        self.preview.hide()
        method = {"pca": "PCA", "tsne": "t-SNE"}.get(projection["method"], projection["method"])
        self.status.setText(f"{method}: {len(xy)} images, {len(np.unique(labels))} classes. "
                            "Hover a point to see its image; click to make it the query.")

    def _axes(self, projection: dict) -> None:
        variance = projection.get("variance")
        if projection["method"] == "pca":
            for axis, k in (("bottom", 0), ("left", 1)):
                share = f" ({100 * variance[k]:.0f}% of the variance)" if variance else ""
                self.plot.setLabel(axis, f"principal component {k + 1}{share}")
        else:
            self.plot.setLabel("bottom", "t-SNE 1 (no unit: only neighbourhoods mean something)")
            self.plot.setLabel("left", "t-SNE 2")

    def _legend(self, projection: dict) -> None:
        """One entry per class (a dot of its colour and its name) up to ``LEGEND_CLASSES``."""
        self.legend.clear()
        labels = projection["labels"]
        colors = class_colors(labels)
        for label in sorted(colors)[:LEGEND_CLASSES]:
            self.legend.addItem(QListWidgetItem(_dot(colors[label]), class_name(projection, label)))
        if len(colors) > LEGEND_CLASSES:
            self.legend.addItem(f"… {len(colors) - LEGEND_CLASSES} more classes (colours repeat: hover a point)")

    # -- interaction
    def _on_hovered(self, item, points, event) -> None:
        if points is None or len(points) == 0:
            self.hovered = None
            self.preview.hide()
            return
        k = int(points[0].data())
        if k != self.hovered:
            self.hovered = k
            self._show_preview(k)
        pos = self.plot.mapFromScene(event.scenePos()) if event is not None and hasattr(event, "scenePos") else None
        if pos is not None:
            self._place_preview(QPoint(int(pos.x()), int(pos.y())))

    def _show_preview(self, k: int) -> None:
        p = self.projection
        self.loader.set_visible("embedding", [k])  # drops decodes of points hovered earlier
        pix = self.loader.thumbnail(k)
        text = f"{p['paths'][k]}\n{class_name(p, int(p['labels'][k]))}"
        if pix is not None:
            self.preview.setPixmap(pix)
            self.preview.setToolTip(text)
        else:
            self.preview.setText(text)
        self.preview.adjustSize()
        self.preview.show()
        self.preview.raise_()
        self.plot.setToolTip(text)

    def _place_preview(self, at: QPoint) -> None:
        x = at.x() + 16
        y = at.y() + 16
        if x + self.preview.width() > self.plot.width():
            x = at.x() - 16 - self.preview.width()
        if y + self.preview.height() > self.plot.height():
            y = at.y() - 16 - self.preview.height()
        self.preview.move(max(0, x), max(0, y))

    def _on_thumbnail(self, index: int) -> None:
        if index == self.hovered:
            self._show_preview(index)

    def _on_clicked(self, item, points, event) -> None:
        if points is None or len(points) == 0 or self.projection is None:
            return
        self.select(int(points[0].data()))

    def select(self, k: int) -> None:
        """Make point ``k`` the query: emits ``query_selected(row, path)``."""
        p = self.projection
        self.query_selected.emit(int(p["rows"][k]), str(p["paths"][k]))
