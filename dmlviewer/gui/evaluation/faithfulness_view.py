"""Faithfulness plots: deletion and insertion curves per method and their AUC table
(``core.explain.faithfulness``), for a dataset run (the Faithfulness tab of the Localization and
Correspondence window) and for the pair on screen (:class:`PairFaithfulnessWindow`, from the
Tools menu).

Deletion: the query's cells are replaced by the baseline in the order a map ranks them and the
cosine similarity to the reference is recorded (a faithful map makes it fall fast: low area);
insertion puts them back into the all-baseline query (rises fast: high area). ``random`` is the
floor (grey, dashed) and ``oracle`` the greedy ceiling (white, dashed). Plot styling is the tool
windows' one (``widgets.style_plot``): each method has its own colour, the same in every view
(``widgets.METHOD_COLORS``), *and* line style (``widgets.series_pen``), and is named in a legend
on each plot and in the AUC table by its display name (the pair view's, "Decomposition+Bias");
selecting a table row draws that method's curves bold.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterator, Sequence

import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPen, QPixmap, QTextDocumentFragment
from PySide6.QtWidgets import (
    QAbstractItemView, QCheckBox, QComboBox, QHBoxLayout, QHeaderView, QLabel, QProgressBar, QPushButton,
    QSpinBox, QSplitter, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget,
)

from dmlviewer.core.explain.perturb_options import BASELINES, DEFAULT_STEPS
from dmlviewer.core.progress import CancelToken, Progress
from dmlviewer.gui.common import errors
from dmlviewer.gui.jobs.job_status import show_progress
from dmlviewer.gui.common.widgets import (DASHES, METHOD_COLORS, PALETTE, PLOT_BACKGROUND, LegendStrip, series_pen,
                                   style_plot)
from dmlviewer.gui.jobs.job import Job
from dmlviewer.gui.jobs.runner import JobRunner

log = logging.getLogger(__name__)

#: reference orders: colour and dash
REFERENCE_STYLE = {"random": ("#9e9e9e", Qt.DashLine), "oracle": ("#ffffff", Qt.DashLine)}
#: display names of the reference orders (the methods' names come from the method registry)
EXTRA_LABELS = {"random": "Random order (floor)", "oracle": "Greedy oracle (ceiling)"}
#: line styles of the methods' curves: all but the reference orders' dash
METHOD_DASHES = [style for style in DASHES if style not in {dash for _, dash in REFERENCE_STYLE.values()}]


def method_label(method: str) -> str:
    """Display name of a scored map: the method registry's ("Decomposition+Bias"), "Group 2"
    for ``group_1``, the reference orders spelled out."""
    from dmlviewer.core.explain.faithfulness import GROUP_PREFIX
    from dmlviewer.core.explain.methods import label

    if method.startswith(GROUP_PREFIX) and method[len(GROUP_PREFIX):].isdigit():
        return f"Group {int(method[len(GROUP_PREFIX):]) + 1}"
    return EXTRA_LABELS.get(method) or label(method)


def method_pens(methods: Sequence[str], width: float = 2.0) -> dict[str, QPen]:
    """One pen per method, no two alike, each method's the same in every view: the reference
    orders their fixed grey/white dashes, every other method its colour of every view
    (``widgets.METHOD_COLORS``, as in the sanity check) and a line style of its own but the
    references' dash, so no method looks like the floor or the ceiling. The groups, which have
    no colour of their own, take point-to-point's colour (they are its parts) in the styles no
    curve here has, then the palette colours no method here has, then any unused pair of colour
    and style."""
    pens, used = {}, set()
    for method in methods:
        if method in REFERENCE_STYLE:
            color, style = REFERENCE_STYLE[method]
        elif method in METHOD_COLORS:
            color, style = METHOD_COLORS[method], METHOD_DASHES[list(METHOD_COLORS).index(method) % len(METHOD_DASHES)]
        else:
            continue
        pens[method] = series_pen(0, width, color=color, style=style)
        used.add((color.lower(), style))
    taken = {color for color, _ in used}
    colors = dict.fromkeys([METHOD_COLORS["point_to_point"].lower()]
                           + [c.lower() for c in PALETTE if c.lower() not in taken] + [c.lower() for c in PALETTE])
    free = iter([(c, s) for c in colors for s in METHOD_DASHES if (c, s) not in used])
    for method in methods:
        if method not in pens:
            color, style = next(free, (PALETTE[0], METHOD_DASHES[0]))
            pens[method] = series_pen(0, width, color=color, style=style)
    return {method: pens[method] for method in methods}


def pen_icon(pen: QPen, width: int = 34, height: int = 12) -> QIcon:
    """A sample of ``pen``'s line on the plots' background (the AUC table's legend)."""
    pixmap = QPixmap(width, height)
    pixmap.fill(QColor(PLOT_BACKGROUND))
    painter = QPainter(pixmap)
    sample = QPen(pen)
    sample.setWidthF(2.0)
    painter.setPen(sample)
    painter.drawLine(2, height // 2, width - 2, height // 2)
    painter.end()
    return QIcon(pixmap)


def describe_dash(style: Qt.PenStyle) -> str:
    return {Qt.SolidLine: "solid", Qt.DashLine: "dashed", Qt.DotLine: "dotted", Qt.DashDotLine: "dash-dot",
            Qt.DashDotDotLine: "dash-dot-dot"}.get(style, "") + " line"


class FaithfulnessPlots(QWidget):
    """Deletion and insertion curves side by side, one line per method, and their legend
    below both (a legend inside a plot covered the curves of a dozen maps)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plots = {}
        self.curves: dict[str, list[pg.PlotDataItem]] = {}
        row = QHBoxLayout()
        for kind, title, tip in (
                ("deletion", "Deletion (lower area is better)",
                 "The query's cells are replaced by the baseline, most relevant first"),
                ("insertion", "Insertion (higher area is better)",
                 "The query's cells are put back into the all-baseline query, most relevant first")):
            plot = pg.PlotWidget(title=title)
            plot.setToolTip(tip)
            style_plot(plot)
            plot.setLabel("bottom", "fraction of the query's cells")
            plot.setLabel("left", "cosine similarity to the reference")
            plot.setXRange(0, 1)
            self.plots[kind] = plot
            row.addWidget(plot)
        self.legend = LegendStrip(columns=5)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(row, 1)
        layout.addWidget(self.legend)

    def show_curves(self, rows: Sequence[dict]) -> None:
        """``rows``: dicts with ``method fractions deletion insertion`` (the pens follow the
        rows' order, as in :class:`AucTable`)."""
        self.curves = {}
        pens = method_pens([row["method"] for row in rows])
        for kind, plot in self.plots.items():
            plot.clear()  # the legend's entries too
            for row in rows:
                item = plot.plot(row["fractions"], row[kind], pen=pens[row["method"]],
                                 name=method_label(row["method"]))
                self.curves.setdefault(row["method"], []).append(item)
            plot.enableAutoRange(axis="y")
        self.legend.set_items([(self.curves[row["method"]][0], method_label(row["method"])) for row in rows])

    def highlight(self, method: str | None) -> None:
        """Draw ``method``'s curves bold and on top (``None``: all alike)."""
        for name, items in self.curves.items():
            for item in items:
                pen = QPen(item.opts["pen"])
                pen.setWidthF(4.0 if name == method else 2.0)
                item.setPen(pen)
                item.setZValue(10 if name == method else 0)


class AucTable(QTableWidget):
    """Method, deletion AUC, insertion AUC, pairs (same-class), and the same over different-class
    pairs when given."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, 0, parent)
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.verticalHeader().setVisible(False)

    def show_rows(self, rows: Sequence[dict], different: Sequence[dict] | None = None) -> None:
        headers = ["method", "deletion AUC", "insertion AUC", "pairs"]
        if different is not None:
            headers = ["method", "deletion AUC (same class)", "insertion AUC (same class)", "pairs",
                       "deletion AUC (different)", "insertion AUC (different)", "pairs"]
        self.clear()
        self.setColumnCount(len(headers))
        self.setHorizontalHeaderLabels(headers)
        self.setRowCount(len(rows))
        pens = method_pens([row["method"] for row in rows])
        for i, row in enumerate(rows):
            cells = [method_label(row["method"]), *self._scores(row)]
            if different is not None:
                cells += self._scores(different[i])
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if j == 0:
                    pen = pens[row["method"]]
                    item.setData(Qt.UserRole, row["method"])
                    item.setIcon(pen_icon(pen))  # its curves' colour and line style
                    item.setToolTip(f"{row['method']}: {describe_dash(pen.style())}")
                else:
                    item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                self.setItem(i, j, item)
        # the names are never cut off: every column fits its contents (scrolling if need be)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.setIconSize(QSize(34, 12))

    def method_at(self, row: int) -> str | None:
        """The method (its key, e.g. ``decomposition_bias``) of table row ``row``."""
        item = self.item(row, 0) if row >= 0 else None
        return item.data(Qt.UserRole) if item is not None else None

    @staticmethod
    def _scores(row: dict) -> list[str]:
        def fmt(key: str) -> str:
            value = row.get(key)
            if value is None:
                return "–"
            sem = row.get(f"{key}_sem")
            return f"{value:.4f} ± {sem:.4f}" if sem else f"{value:.4f}"

        return [fmt("deletion_auc"), fmt("insertion_auc"), str(row.get("num_pairs", 1))]


def pair_faithfulness_job(model, images, methods: Sequence[str] | None, baseline: str, steps: int, oracle: bool,
                          device: str, lock: threading.RLock, cancel: CancelToken) -> Iterator[Progress]:
    """``core.explain.faithfulness.pair_faithfulness`` on the pair on screen, holding the model
    lock that the pair view's background work shares."""
    from dmlviewer.core.explain.faithfulness import pair_faithfulness

    with lock:
        yield from pair_faithfulness(model, images.query, images.reference, methods, baseline, steps, oracle,
                                     device, cancel=cancel)


class PairFaithfulnessWindow(QWidget):
    """Deletion and insertion curves of the pair on screen (the main window's pair view)."""

    def __init__(self, runner: JobRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Faithfulness of this pair")
        self.runner = runner
        self.job: Job | None = None
        self.result: dict | None = None
        self._source: tuple | None = None  # (model, images, device, lock, title)

        self.baseline = QComboBox()
        self.baseline.addItems(list(BASELINES))
        self.baseline.setToolTip("What a removed cell shows: the blurred image, its mean colour, or noise")
        self.steps = QSpinBox()
        self.steps.setRange(2, 256)
        self.steps.setValue(DEFAULT_STEPS)
        self.steps.setToolTip("Points of each curve after the first")
        self.oracle = QCheckBox("Greedy oracle")
        self.oracle.setChecked(True)
        self.oracle.setToolTip("The greedy order as a ceiling (about steps/2 forward passes per cell)")
        self.run_button = QPushButton("Run")
        self.cancel_button = QPushButton("Cancel")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.plots = FaithfulnessPlots()
        self.table = AucTable()

        bar = QHBoxLayout()
        for label, widget in (("Baseline", self.baseline), ("Steps", self.steps)):
            bar.addWidget(QLabel(label))
            bar.addWidget(widget)
        bar.addWidget(self.oracle)
        bar.addStretch(1)
        bar.addWidget(self.run_button)
        bar.addWidget(self.cancel_button)
        self.table.currentCellChanged.connect(lambda row, *_: self.plots.highlight(self.table.method_at(row)))
        split = QSplitter(Qt.Vertical)
        split.addWidget(self.plots)
        split.addWidget(self.table)
        split.setSizes([420, 220])
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addWidget(split, 1)
        self.resize(1100, 720)

        self.run_button.clicked.connect(self.run)
        self.cancel_button.clicked.connect(self.cancel)
        self._update_buttons()

    def set_pair(self, model, images, device: str, lock: threading.RLock, title: str = "") -> None:
        """The pair (``PairImages``) and model to score; runs it."""
        self._source = (model, images, str(device), lock, title)
        self.result = None
        self.status.setText(title)
        self.run()

    def run(self) -> Job | None:
        if self._source is None or (self.job is not None and not self.job.ended):
            return None
        model, images, device, lock, title = self._source
        # every map of the model but grad_transfer, which needs a feature file's grad weights
        args = (model, images, None, self.baseline.currentText(), self.steps.value(), self.oracle.isChecked(),
                device, lock)
        # the title is rich text for the status label; the Jobs list shows plain text
        name = QTextDocumentFragment.fromHtml(title).toPlainText() if title else "the pair"
        self.job = self.runner.submit(f"Faithfulness of {name}", (pair_faithfulness_job, args, {}),
                                      progress=self._on_progress, finished=self._on_finished,
                                      failed=self._on_failed, cancelled=self._on_cancelled)
        self.progress.setValue(0)
        self.status.setText(f"Running on {title or 'the pair'}…")
        self._update_buttons()
        return self.job

    def cancel(self) -> None:
        if self.job is not None:
            self.runner.cancel(self.job)

    def _update_buttons(self) -> None:
        running = self.job is not None and not self.job.ended
        self.run_button.setEnabled(self._source is not None and not running)
        self.cancel_button.setEnabled(running)

    def _on_progress(self, job: Job, event: Progress) -> None:
        if event.total:
            show_progress(self.progress, self.status, job, event)

    def _on_finished(self, job: Job, result: Any) -> None:
        self.show_result(result)
        self._update_buttons()

    def _on_failed(self, job: Job, text: str) -> None:
        errors.show_failure(self.status, text)
        self._update_buttons()

    def _on_cancelled(self, job: Job) -> None:
        self.status.setText("Cancelled.")
        self._update_buttons()

    def show_result(self, result: dict) -> None:
        """Plot a ``pair_faithfulness`` result."""
        self.result = result
        self.progress.setValue(1000)
        rows = [{"method": name, "fractions": result["fractions"], **values}
                for name, values in result["methods"].items()]
        self.plots.show_curves(rows)
        self.table.show_rows(rows)
        title = self._source[4] if self._source else ""
        self.status.setText(f"{title}  ·  similarity {result['similarity']:+.4f}, {result['baseline']} baseline, "
                            f"grid {tuple(result['grid'])}, {result['forward_passes']} forward passes in "
                            f"{result['seconds']:.1f} s")
