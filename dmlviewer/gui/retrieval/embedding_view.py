"""A 2-D map of an HDF5 features file: PCA always, t-SNE on request, coloured by class.

The projection is computed in the :class:`JobRunner` (t-SNE from scikit-learn can take
minutes); the GUI only draws it as one ``ScatterPlotItem``. Hovering a point shows its image
(decoded off the GUI thread by a :class:`ThumbnailLoader`) with its path and class; clicking a
point emits ``query_selected(row, path)`` so the main window can make that image the query.

PCA: the embeddings are centred and projected on their first two right singular vectors (the
directions of largest variance), always over every row: the file is read in chunks of rows
(``core.evaluate.projection``), so a million rows need no more memory than their 2-D
coordinates. t-SNE: scikit-learn's ``TSNE`` (cosine metric, PCA initialisation, perplexity
min(30, (n - 1) / 3)) on at most ``max_points`` rows drawn at random (seeded), with its OpenMP
threads limited to all cores but one; the status line says how many of how many rows it used.
Above :data:`SCATTER_MAX` projected points, all of them are shown as a shaded density image
and a seeded sample of ``SCATTER_MAX`` as the interactive points (hover, click): a scatter
item of a million points would take seconds to draw and to hit-test.
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
from dmlviewer.gui.window.export import add_plot_entry
from dmlviewer.gui.common import errors
from dmlviewer.gui.common.widgets import PLOT_BACKGROUND, PathEdit, fit_to_screen, guard_wheel, no_si_prefix
from dmlviewer.gui.jobs.job import Job
from dmlviewer.gui.jobs.runner import JobRunner

log = logging.getLogger(__name__)

METHODS = ("pca", "tsne")
#: Most points drawn as individual (hoverable) markers; beyond, a density image shows them all.
SCATTER_MAX = 50_000
DENSITY_BINS = 400


def pca_2d(x: np.ndarray) -> np.ndarray:
    """N x 2 coordinates on the two directions of largest variance (of rows in memory)."""
    from dmlviewer.core.evaluate.projection import pca_project

    x = np.asarray(x)
    if len(x) < 2 or x.shape[1] < 2:
        return np.zeros((len(x), 2), np.float32)
    return pca_project(lambda: iter([(0, x)]))


def projection_job(features_path: str, method: str = "pca", max_points: int = 5000, seed: int = 0,
                   cancel: CancelToken | None = None) -> Iterator[Progress]:
    """Read a features file and project its embeddings to 2-D. Result: ``rows`` (the file's
    rows drawn as points), ``xy`` (len(rows) x 2), ``labels``, ``paths``, ``root``, ``method``,
    ``total`` (rows in the file), ``projected`` (rows the projection used) and, when not every
    projected row is drawn, ``density`` (``image``: bins x bins counts, ``rect``: x, y, w, h)."""
    from dmlviewer.core.evaluate import open_features

    if method not in METHODS:
        raise ValueError(f"unknown projection {method!r}; choose from {', '.join(METHODS)}")
    features = open_features(features_path)
    n = len(features)
    rng = np.random.default_rng(seed)
    density = None
    variance = None  # share of the variance along each PCA axis
    if method == "pca" or n < 5:
        yield Progress("log", 0, 1, f"PCA of all {n} embeddings of size {features.dim}")
        xy_all = np.zeros((n, 2), np.float32)
        if n >= 2 and features.dim >= 2:
            variance = yield from _streamed_pca(features, xy_all, cancel)
        projected = n
        rows = np.arange(n)
        if n > SCATTER_MAX:
            density = _density(xy_all)
            rows = np.sort(rng.choice(n, size=SCATTER_MAX, replace=False))
        xy = xy_all[rows]
    else:
        rows = np.arange(n)
        if n > max_points:
            rows = np.sort(rng.choice(n, size=max_points, replace=False))
        x = features.read("embeddings", rows)
        projected = len(rows)
        yield Progress("log", 0, 1, f"t-SNE of {len(rows)} of {n} embeddings of size {x.shape[1]}")
        if cancel is not None:
            cancel.raise_if_cancelled()
        from sklearn.manifold import TSNE
        from threadpoolctl import threadpool_limits

        perplexity = float(min(30.0, (len(rows) - 1) / 3.0))
        # One core is left to the GUI: with every core busy, TSNE's OpenMP threads spin and
        # 2000 points took 45 s instead of 7 s on a 2-core machine.
        with threadpool_limits(max(1, (os.cpu_count() or 2) - 1), user_api="openmp"):
            xy = TSNE(n_components=2, perplexity=perplexity, metric="cosine", init="pca",
                      random_state=seed).fit_transform(x).astype(np.float32)
    result = {  # labels and paths of the drawn rows only
        "rows": rows, "xy": xy, "labels": features.read("labels", rows).astype(np.int64),
        "paths": features.read("paths", rows).tolist(),
        "root": str(features.attrs.get("dataset_root", "")), "method": method,
        "total": n, "projected": projected, "class_names": features.class_names, "variance": variance,
    }
    if density is not None:
        result["density"] = density
    yield Progress("done", 1, 1, data={"result": result})


def _streamed_pca(features, out: np.ndarray, cancel: CancelToken | None):
    """Two passes over the file's embedding chunks (``core.evaluate.projection``): the
    scatter matrix, then the coordinates into ``out``; progress and cancellation per chunk.
    Returns each axis's share of the total variance (None when there is none)."""
    from dmlviewer.core.evaluate.projection import Scatter

    n, scatter = len(features), Scatter()
    for pass_, what in ((0, "PCA: covariance"), (1, "PCA: projecting")):
        if pass_ == 1:
            mean, axes = scatter.axes(2)
        for start, x in features.iter_chunks("embeddings"):
            if cancel is not None:
                cancel.raise_if_cancelled()
            if pass_ == 0:
                scatter.add(x)
            else:
                out[start:start + len(x)] = Scatter.project(x, mean, axes)
            done = pass_ * n + start + len(x)
            yield Progress("step", done, 2 * n, what)
    total = (float(np.trace(scatter.scatter)) - n * float(mean @ mean)) / n  # summed variance of the rows
    return [float(v) / total for v in np.var(out, axis=0)] if total > 0 else None


def _density(xy: np.ndarray, bins: int = DENSITY_BINS) -> dict:
    """Point counts on a ``bins x bins`` grid over the points' bounding box (x along axis 0)."""
    lo, hi = xy.min(0), xy.max(0)
    span = np.maximum(hi - lo, 1e-9)
    counts, _, _ = np.histogram2d(xy[:, 0], xy[:, 1], bins=bins, range=[[lo[0], hi[0]], [lo[1], hi[1]]])
    return {"image": counts.astype(np.float32), "rect": (float(lo[0]), float(lo[1]), float(span[0]), float(span[1]))}


#: Classes that get a legend entry (and a hue of their own); beyond, hues repeat and the legend
#: says so: hover a point for its class.
LEGEND_CLASSES = 24


def class_colors(labels: np.ndarray) -> dict[int, object]:
    """A colour per class: the distinct marker colours of the pair view for up to 16 classes,
    else evenly spaced hues (repeating beyond ``LEGEND_CLASSES`` classes)."""
    from dmlviewer.gui.pair.image_pane import MARKER_COLORS

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
        from dmlviewer.gui.retrieval.thumbnails import ThumbnailLoader

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
        self.status.setWordWrap(True)  # a long line must not widen the window under the pointer
        self.plot = pg.PlotWidget()
        self.plot.setBackground(PLOT_BACKGROUND)  # the dark theme's, as the other plots
        self.plot.setAspectLocked(True)
        self.plot.showGrid(x=True, y=True, alpha=0.15)
        no_si_prefix(self.plot)
        add_plot_entry(self.plot)  # Export View in its right-click menu, as every tool window's plot
        # The legend sits beside the plot, never over points (which it would hide from hovering).
        self.legend = QListWidget()
        self.legend.setObjectName("classLegend")
        self.legend.setSelectionMode(QListWidget.NoSelection)
        self.legend.setFocusPolicy(Qt.NoFocus)
        self.legend.setMaximumWidth(220)
        self.legend.setToolTip("Colour of each class")
        self.scatter = pg.ScatterPlotItem(size=8, pen=None, hoverable=True, hoverSize=13,
                                          hoverPen=pg.mkPen("w", width=1.5), tip=None)
        self.density = pg.ImageItem()
        self.density.setZValue(-1)
        self.plot.addItem(self.density)
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
                                      (projection_job, (path, method, self.max_points.value()), {}),
                                      finished=self._on_finished, failed=self._on_failed)
        self.status.setText(f"Computing {self.method.currentText()}...")
        return self.job

    def _on_finished(self, job: Job, result: Any) -> None:
        if job is self.job:  # not an earlier run's
            self.show_projection(result)

    def _on_failed(self, job: Job, text: str) -> None:
        if job is self.job:
            errors.show_failure(self.status, text, "Projection failed")

    def show_projection(self, projection: dict) -> None:
        """Draw a ``projection_job`` result."""
        self.projection = projection
        xy, labels = projection["xy"], projection["labels"]
        self.scatter.setData(x=xy[:, 0], y=xy[:, 1], data=np.arange(len(xy)), brush=class_brushes(labels),
                             size=8 if "density" not in projection else 4)
        self._show_density(projection.get("density"))
        self._axes(projection)
        self._legend(projection)
        self.plot.autoRange()
        self.loader.set_paths(projection["root"], list(projection["paths"]))
        self.hovered = None
        self.preview.hide()
        total, projected = projection.get("total", len(xy)), projection.get("projected", len(xy))
        what = projection["method"].upper().replace("TSNE", "t-SNE")
        if projected < total:
            text = (f"{what} of {projected:,} of the {total:,} images (a seeded random sample; "
                    "t-SNE does not scale to every point)")
        else:
            text = f"{what} of all {total:,} images"
        if len(xy) < projected:
            text += f", shaded by density; {len(xy):,} drawn as points"
        self.status.setText(f"{text}, {len(np.unique(labels))} classes shown. "
                            "Hover a point to see its image; click to make it the query.")

    def _show_density(self, density: dict | None) -> None:
        if density is None:
            self.density.clear()
            self.density.hide()
            return
        counts = np.ascontiguousarray(np.log1p(density["image"]), dtype=np.float32)
        top = float(counts.max()) or 1.0
        lut = np.zeros((256, 4), np.uint8)
        lut[:, :3] = np.linspace(255, 90, 256)[:, None].astype(np.uint8)  # white to grey
        lut[:, 3] = 255
        self.density.setImage(counts, levels=(0.0, top), lut=lut, autoLevels=False)
        x, y, w, h = density["rect"]
        self.density.setRect(x, y, w, h)
        self.density.show()

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
