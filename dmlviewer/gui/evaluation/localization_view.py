"""Weakly supervised localization and part correspondence, run from the GUI and plotted.

Localization (seed 000 Sec. 5.1 / Table 4, seed 002 Fig. 1): ``core.explain.localize`` turns
each method's overall map into a box at every threshold and counts IoU > 0.5 hits; the view
plots accuracy against threshold, one curve per method, with each curve's best threshold
marked, and lists the best values in a table. Part correspondence (seed 000 Sec. 5.3):
``core.explain.correspond`` compares the peak of the partial (point-to-point) map with the peak
of the overall map; the view shows both accuracies as bars. Faithfulness (the Faithfulness tab):
``core.explain.faithfulness`` scores every map by deletion and insertion curves over same-class
and different-class pairs; the tab plots the mean curves per method and lists the AUCs.

All run through the :class:`JobRunner`; the job functions only open the checkpoint and the
dataset and delegate to the core.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path
from typing import Any, Iterator, Sequence

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView, QComboBox, QDoubleSpinBox, QGridLayout, QHBoxLayout, QHeaderView, QLabel, QListWidget,
    QListWidgetItem, QProgressBar, QPushButton, QSpinBox, QSplitter, QTableWidget, QTableWidgetItem,
    QTabWidget, QVBoxLayout, QWidget,
)

from dmlviewer.core.explain.perturb_options import BASELINES, DEFAULT_ORACLE_PAIRS
from dmlviewer.core.progress import CancelToken, Progress
from dmlviewer.gui.evaluation.evaluation_view import EvaluationInputs
from dmlviewer.gui.evaluation.faithfulness_view import AucTable, FaithfulnessPlots, method_label, method_pens
from dmlviewer.gui.common import errors
from dmlviewer.gui.jobs.job_status import show_progress
from dmlviewer.gui.common.widgets import METHOD_COLORS, add_legend, fit_to_screen, keep_in_front, scrolling, style_plot
from dmlviewer.gui.jobs.job import Job
from dmlviewer.gui.jobs.runner import JobRunner

log = logging.getLogger(__name__)

#: Reference image each image is explained against (core.explain.localize's pairings).
PAIRING_LABELS = {"self": "the image itself", "nearest": "its nearest neighbour",
                  "same-class": "another image of its class"}


class ThresholdRange(QWidget):
    """Thresholds as a range: from, to (included) and step, each a spin box (fractions of the
    map's maximum); ``values()`` lists them as ``core.explain.parse_thresholds`` would."""

    changed = Signal()

    def __init__(self, start: float, stop: float, step: float, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.start, self.stop, self.step = (_fraction_box(v) for v in (start, stop, step))
        self.step.setMinimum(0.01)
        self.count = QLabel()
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for label, box in (("from", self.start), ("to", self.stop), ("step", self.step)):
            row.addWidget(QLabel(label))
            row.addWidget(box)
        row.addWidget(self.count, 1)
        for box in (self.start, self.stop, self.step):
            box.valueChanged.connect(self._on_changed)
        self._on_changed()

    def set_range(self, start: float, stop: float, step: float) -> None:
        for box, value in ((self.start, start), (self.stop, stop), (self.step, step)):
            box.setValue(value)

    def values(self) -> list[float]:
        from dmlviewer.core.explain import parse_thresholds

        return parse_thresholds(f"{self.start.value():g}:{self.stop.value():g}:{self.step.value():g}")

    def _on_changed(self, *_: Any) -> None:
        try:
            n = len(self.values())
            self.count.setText(f"{n} threshold{'s' if n != 1 else ''}")
        except ValueError as exc:
            self.count.setText(f"<span style='color:#eb5757'>{exc}</span>")
        self.changed.emit()


def _fraction_box(value: float) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(0.0, 1.0)
    box.setSingleStep(0.05)
    box.setDecimals(2)
    box.setValue(value)
    return box


def _open(checkpoint: str, dataset_root: str, dataset_format: str | None, device: str):
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.models import open_model, resolve_device

    dev = resolve_device(device)
    model, _ = open_model(checkpoint, dev)
    return model, open_dataset(dataset_root, dataset_format), dev


def localization_job(checkpoint: str, dataset_root: str, dataset_format: str | None, methods: Sequence[str],
                     thresholds: Sequence[float], pairing: str, split: str | None, device: str,
                     limit: int | None, cancel: CancelToken) -> Iterator[Progress]:
    """``core.explain.localize`` on a checkpoint file and a dataset folder."""
    from dmlviewer.core.explain import localize

    model, dataset, dev = _open(checkpoint, dataset_root, dataset_format, device)
    yield Progress("log", message=f"localization of {len(methods)} method(s) on {dataset.root.name}")
    yield from localize(model, dataset, methods=methods, thresholds=thresholds, pairing=pairing,
                        split=split, device=dev, limit=limit, cancel=cancel)


def correspondence_job(checkpoint: str, dataset_root: str, dataset_format: str | None, split: str | None,
                       device: str, max_pairs: int, cancel: CancelToken) -> Iterator[Progress]:
    """``core.explain.correspond`` on a checkpoint file and a dataset folder."""
    from dmlviewer.core.explain import correspond

    model, dataset, dev = _open(checkpoint, dataset_root, dataset_format, device)
    yield from correspond(model, dataset, split=split, max_pairs=max_pairs, device=dev, cancel=cancel)


def faithfulness_job(checkpoint: str, dataset_root: str, dataset_format: str | None, methods: Sequence[str],
                     pairs: int, baseline: str, oracle_pairs: int, split: str | None, device: str,
                     cancel: CancelToken) -> Iterator[Progress]:
    """``core.explain.faithfulness`` on a checkpoint file and a dataset folder: the checked
    overall maps plus occlusion, point-to-point and the model's group maps."""
    from dmlviewer.core.explain import methods as registry
    from dmlviewer.core.explain.faithfulness import available_methods, faithfulness

    model, dataset, dev = _open(checkpoint, dataset_root, dataset_format, device)
    listed = registry.methods("explain")  # the maps the window lists; the others always run
    chosen = [m for m in available_methods(model) if m in methods or m not in listed]
    yield Progress("log", message=f"faithfulness of {len(chosen)} maps on {dataset.root.name}")
    yield from faithfulness(model, dataset, chosen, pairs=pairs, baseline=baseline, oracle_pairs=oracle_pairs,
                            split=split, device=dev, cancel=cancel)


def boxes_problem(dataset_root: str, dataset_format: str | None, split: str | None) -> str | None:
    """Why localization cannot run on this dataset and split (no image with a ground-truth box),
    or ``None`` (also when the dataset cannot be read: the run says why). Reads the listing
    only, no image."""
    import numpy as np

    from dmlviewer.core.data import open_dataset

    try:
        dataset = open_dataset(dataset_root, dataset_format)
    except Exception as exc:  # noqa: BLE001 - DatasetError, OSError...: the run reports it
        log.debug("boxes of %s not checked: %s", dataset_root, exc)
        return None
    indices = dataset.indices(split)
    if len(indices) and np.isfinite(dataset.boxes[indices]).all(axis=1).any():
        return None
    where = f"of the {split} split " if split else ""
    return (f"No image {where}of {dataset.root.name} has a ground-truth box: localization compares each map's "
            f"box with it ({dataset.format} format{'' if dataset.format != 'cub' else ', bounding_boxes.txt'}). "
            "Correspondence and faithfulness need no boxes.")


class LocalizationView(QWidget):
    """Run localization / correspondence and plot the results (see the module docstring).

    ``localization_computed(checkpoint, method, best_accuracy)`` is emitted per method when a
    localization run ends (the evaluation view adds it as a row).
    """

    localization_computed = Signal(str, str, float)

    def __init__(self, runner: JobRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        from dmlviewer.core.explain import DEFAULT_THRESHOLDS, PAIRINGS
        from dmlviewer.core.explain import methods as registry

        self.setWindowTitle("Localization and correspondence")
        keep_in_front(self)
        self.runner = runner
        self._boxes: dict[tuple, str | None] = {}  # (dataset, format, split) -> boxes_problem
        self.job: Job | None = None
        self._job_kind: dict[int, tuple[str, str]] = {}  # job id -> (kind, checkpoint)
        self.results: list[dict] = []
        self.correspondence: dict | None = None

        self.inputs = EvaluationInputs()
        self.methods = QListWidget()
        listed, checked = registry.methods("explain"), registry.methods("localization_checked")
        for method in listed:
            item = QListWidgetItem(method_label(method))
            item.setData(Qt.UserRole, method)
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
            item.setCheckState(Qt.Checked if method in checked else Qt.Unchecked)
            self.methods.addItem(item)
        self.methods.setMaximumHeight(self.methods.sizeHintForRow(0) * (len(listed) + 1) + 6)
        self.pairing = QComboBox()
        for pairing in PAIRINGS:
            self.pairing.addItem(PAIRING_LABELS.get(pairing, pairing), pairing)
        self.pairing.setToolTip("The reference image each image's map is computed against")
        t = DEFAULT_THRESHOLDS
        step = round(t[1] - t[0], 6) if len(t) > 1 else 0.05
        self.thresholds = ThresholdRange(t[0], t[-1], step)
        self.thresholds.setToolTip("Each map is cut at these fractions of its maximum (the last included)")
        self.limit = QSpinBox()
        self.limit.setRange(0, 1_000_000)
        self.limit.setSpecialValueText("all")
        self.limit.setToolTip("images evaluated (0: every image with a box)")
        self.max_pairs = QSpinBox()
        self.max_pairs.setRange(1, 1_000_000)
        self.max_pairs.setValue(200)
        self.inputs.form.addRow("Maps", self.methods)
        self.inputs.form.addRow("Reference", self.pairing)
        self.inputs.form.addRow("Thresholds", self.thresholds)
        self.inputs.form.addRow("Images", self.limit)
        self.inputs.form.addRow("Correspondence pairs", self.max_pairs)
        self.faith_pairs = QSpinBox()
        self.faith_pairs.setRange(2, 100_000)
        self.faith_pairs.setValue(200)
        self.faith_pairs.setToolTip("Faithfulness: pairs scored, half same-class, half different-class")
        self.faith_oracle = QSpinBox()
        self.faith_oracle.setRange(0, 100_000)
        self.faith_oracle.setValue(DEFAULT_ORACLE_PAIRS)
        self.faith_oracle.setToolTip("Faithfulness: pairs on which the greedy oracle (the ceiling) runs; "
                                     "it costs about steps/2 forward passes per cell")
        self.faith_baseline = QComboBox()
        self.faith_baseline.addItems(list(BASELINES))
        self.faith_baseline.setToolTip("What a removed cell shows: the blurred image, its mean colour, or noise")
        self.inputs.form.addRow("Faithfulness pairs", self.faith_pairs)
        self.inputs.form.addRow("Oracle pairs", self.faith_oracle)
        self.inputs.form.addRow("Baseline", self.faith_baseline)

        self.localize_button = QPushButton("Run localization")
        self.localize_tip = "Localization accuracy of the checked maps against the ground-truth boxes"
        self.correspond_button = QPushButton("Run correspondence")
        self.faithfulness_button = QPushButton("Run faithfulness")
        self.faithfulness_button.setToolTip("Deletion and insertion curves of the checked maps plus occlusion, "
                                            "point-to-point and group maps")
        self.cancel_button = QPushButton("Cancel")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.status = QLabel()
        self.status.setWordWrap(True)

        self.plot = pg.PlotWidget(title="Localization accuracy (IoU > 0.5) against threshold")
        style_plot(self.plot)
        self.plot.setLabel("bottom", "threshold (fraction of the map's maximum)")
        self.plot.setLabel("left", "accuracy")
        add_legend(self.plot, "top-right")
        self.best_table = QTableWidget(0, 4)
        self.best_table.setHorizontalHeaderLabels(["method", "best threshold", "best accuracy", "images"])
        self.best_table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        header = self.best_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        self.best_table.verticalHeader().setVisible(False)
        self.bar_plot = pg.PlotWidget(title="Part correspondence accuracy")
        style_plot(self.bar_plot, grid=False)
        self.bar_plot.setYRange(0, 1)
        self.bar_plot.setLabel("left", "peak in the same part")
        self.bar_plot.getAxis("bottom").setTicks([[(0, "point-to-point (partial map)"), (1, "overall map")]])
        self.bar_plot.setMouseEnabled(False, False)
        self.correspond_label = QLabel()
        self.faith_plots = FaithfulnessPlots()
        self.faith_pairing = QComboBox()
        self.faith_pairing.addItem("same-class pairs", "same")
        self.faith_pairing.addItem("different-class pairs", "different")
        self.faith_table = AucTable()
        self.faith_results: list[dict] = []

        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 4, 0)
        left_layout.addWidget(self.inputs)
        buttons = QGridLayout()
        for k, b in enumerate((self.localize_button, self.correspond_button, self.faithfulness_button,
                               self.cancel_button)):
            buttons.addWidget(b, k // 2, k % 2)
        left_layout.addLayout(buttons)
        left_layout.addWidget(self.progress)
        left_layout.addWidget(self.status)
        self.best_table.setMinimumHeight(120)
        left_layout.addWidget(self.best_table, 1)
        right = QSplitter(Qt.Vertical)
        right.addWidget(self.plot)
        bars = QWidget()
        bars_layout = QVBoxLayout(bars)
        bars_layout.setContentsMargins(0, 0, 0, 0)
        bars_layout.addWidget(self.bar_plot, 1)
        bars_layout.addWidget(self.correspond_label)
        right.addWidget(bars)
        right.setSizes([520, 260])
        faith = QSplitter(Qt.Vertical)
        curves = QWidget()
        curves_layout = QVBoxLayout(curves)
        curves_layout.setContentsMargins(0, 0, 0, 0)
        curves_layout.addWidget(self.faith_pairing, 0, Qt.AlignLeft)
        curves_layout.addWidget(self.faith_plots, 1)
        faith.addWidget(curves)
        faith.addWidget(self.faith_table)
        faith.setSizes([480, 300])
        self.tabs = QTabWidget()
        self.tabs.addTab(right, "Localization")
        self.tabs.addTab(faith, "Faithfulness")
        splitter = QSplitter(Qt.Horizontal)
        form = scrolling(left)  # the form scrolls on a short screen
        form.setMinimumWidth(left.sizeHint().width() + form.verticalScrollBar().sizeHint().width())
        splitter.addWidget(form)
        splitter.addWidget(self.tabs)
        splitter.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.addWidget(splitter)
        fit_to_screen(self, 1250, 800)

        # Whether the dataset has boxes is checked once typing has paused (it reads the listing).
        self._boxes_timer = QTimer(self)
        self._boxes_timer.setSingleShot(True)
        self._boxes_timer.setInterval(400)
        self._boxes_timer.timeout.connect(self._update_buttons)
        self.inputs.changed.connect(self._boxes_timer.start)
        self.inputs.split.currentIndexChanged.connect(self._boxes_timer.start)
        self.localize_button.clicked.connect(self.run_localization)
        self.correspond_button.clicked.connect(self.run_correspondence)
        self.faithfulness_button.clicked.connect(self.run_faithfulness)
        self.faith_pairing.currentIndexChanged.connect(lambda: self.show_faithfulness(self.faith_results))
        self.faith_table.currentCellChanged.connect(
            lambda row, *_: self.faith_plots.highlight(self.faith_table.method_at(row)))
        self.cancel_button.clicked.connect(self.cancel)
        self._update_buttons()

    # -- inputs
    def set_sources(self, checkpoint: str | None = None, dataset: str | None = None,
                    dataset_format: str | None = None) -> None:
        self.inputs.set_sources(checkpoint, dataset, dataset_format)

    def checked_methods(self) -> list[str]:
        return [self.methods.item(i).data(Qt.UserRole) for i in range(self.methods.count())
                if self.methods.item(i).checkState() == Qt.Checked]

    def set_methods(self, methods: Sequence[str]) -> None:
        for i in range(self.methods.count()):
            item = self.methods.item(i)
            item.setCheckState(Qt.Checked if item.data(Qt.UserRole) in methods else Qt.Unchecked)

    def threshold_values(self) -> list[float]:
        return self.thresholds.values()

    def problems(self, localization: bool = True) -> list[str]:
        """What stops a run, one line each (checked when a run is asked for; never raises)."""
        out = self.inputs.problems()
        if localization:
            if not self.checked_methods():
                out.append("check at least one method")
            try:
                if not self.threshold_values():
                    out.append("give at least one threshold")
            except ValueError as exc:
                out.append(f"thresholds: {exc}")
            if not out and self.boxes_problem():
                out.append(self.boxes_problem())
        return out

    def boxes_problem(self) -> str | None:
        """:func:`boxes_problem` of the dataset and split in the fields (remembered; ``None``
        while the dataset field names no folder)."""
        from dmlviewer.gui.evaluation.evaluation_view import folder_problem

        root = self.inputs.dataset.text()
        if not root or folder_problem(root):
            return None
        key = (root, self.inputs.dataset_format, self._split())
        if key not in self._boxes:
            self._boxes[key] = boxes_problem(*key)
        return self._boxes[key]

    def _update_buttons(self, *_: Any) -> None:
        """Enable the run buttons (the fields are checked when one is pressed); localization is
        disabled, with the reason as its tooltip, on a dataset without boxes."""
        running = self.job is not None and not self.job.ended
        boxless = self.boxes_problem()
        self.localize_button.setEnabled(not running and not boxless)
        self.localize_button.setToolTip(boxless or self.localize_tip)
        self.correspond_button.setEnabled(not running)
        self.faithfulness_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)

    def _refuse(self, problems: list[str]) -> None:
        self.status.setText("<span style='color:#eb5757'>Cannot run: "
                            f"{html.escape('; '.join(problems))}</span>")
        self.status.setToolTip("")

    def _split(self) -> str | None:
        split = self.inputs.split.currentText()
        return None if split == "all" else split

    # -- running
    def run_localization(self) -> Job | None:
        return self._start("localization", localization_job, lambda checkpoint: (
            checkpoint, self.inputs.dataset.text(), self.inputs.dataset_format, self.checked_methods(),
            self.threshold_values(), self.pairing.currentData(), self._split(), self.inputs.device.currentText(),
            self.limit.value() or None))

    def run_correspondence(self) -> Job | None:
        return self._start("correspondence", correspondence_job, lambda checkpoint: (
            checkpoint, self.inputs.dataset.text(), self.inputs.dataset_format, self._split(),
            self.inputs.device.currentText(), self.max_pairs.value()))

    def run_faithfulness(self) -> Job | None:
        return self._start("faithfulness", faithfulness_job, lambda checkpoint: (
            checkpoint, self.inputs.dataset.text(), self.inputs.dataset_format, self.checked_methods(),
            self.faith_pairs.value(), self.faith_baseline.currentText(), self.faith_oracle.value(), self._split(),
            self.inputs.device.currentText()))

    def _start(self, kind: str, function, arguments) -> Job | None:
        """Submit ``function(*arguments(checkpoint))`` as this view's job of ``kind``: nothing
        while one runs; the fields' problems said on the status line instead (only localization
        needs boxes)."""
        if self.job is not None and not self.job.ended:
            return None
        problems = self.problems(kind == "localization")
        if problems:
            self._refuse(problems)
            return None
        checkpoint = self.inputs.checkpoint.text()
        self.job = self.runner.submit(f"{kind.capitalize()} {Path(checkpoint).name}",
                                      (function, arguments(checkpoint), {}), progress=self._on_progress,
                                      finished=self._on_finished, failed=self._on_failed,
                                      cancelled=self._on_cancelled)
        self._job_kind[self.job.id] = (kind, checkpoint)
        self.progress.setValue(0)
        self.status.setText("Running...")
        self._update_buttons()
        return self.job

    def cancel(self) -> None:
        if self.job is not None:
            self.runner.cancel(self.job)

    def _on_progress(self, job: Job, event: Progress) -> None:
        show_progress(self.progress, self.status, job, event)

    def _on_finished(self, job: Job, result: Any) -> None:
        kind, checkpoint = self._job_kind.pop(job.id)
        self.progress.setValue(1000)
        if kind == "localization":
            self.show_localization(result)
            self.status.setText(f"Localization done on {result[0]['num_images'] if result else 0} images.")
            for row in result:
                self.localization_computed.emit(checkpoint, row["method"], float(row["best_accuracy"]))
        elif kind == "faithfulness":
            self.show_faithfulness(result)
            self.tabs.setCurrentIndex(1)
            self.status.setText(f"Faithfulness done on {result[0]['num_pairs'] if result else 0} same-class and "
                                f"{result[0]['different_class']['num_pairs'] if result else 0} different-class pairs.")
        else:
            self.show_correspondence(result)
            self.status.setText("Correspondence done.")
        self._update_buttons()

    def _on_failed(self, job: Job, text: str) -> None:
        self._job_kind.pop(job.id)
        errors.show_failure(self.status, text)
        self._update_buttons()

    def _on_cancelled(self, job: Job) -> None:
        self._job_kind.pop(job.id)
        self.status.setText("Cancelled.")
        self._update_buttons()

    # -- results
    def show_localization(self, results: list[dict]) -> None:
        """Plot accuracy against threshold per method, best thresholds marked (the ``localize``
        result: ``method pairing thresholds accuracy best_threshold best_accuracy num_images``)."""
        self.results = list(results)
        self.plot.clear()  # also empties the legend
        self.best_table.setRowCount(len(results))
        top = 0.0
        pens = method_pens(list(dict.fromkeys(row["method"] for row in results)))  # as in every view
        for i, row in enumerate(results):
            pen = pens[row["method"]]
            color = pen.color().name()
            name = method_label(row["method"])
            # The best point of each curve is a star; its numbers are in the legend and the
            # table (labels on the plot ran into each other where the curves peak together).
            self.plot.plot(row["thresholds"], row["accuracy"], pen=pen, symbol="o",
                           symbolSize=5, symbolBrush=color, symbolPen=None,
                           name=f"{name} {row['best_accuracy']:.2f} @ {row['best_threshold']:g}")
            best = pg.ScatterPlotItem([row["best_threshold"]], [row["best_accuracy"]], symbol="star", size=18,
                                      brush=pg.mkBrush(color), pen=pg.mkPen("k", width=1))
            best.setToolTip(f"{name}: {row['best_accuracy']:.3f} at threshold {row['best_threshold']:g}")
            self.plot.addItem(best)
            top = max(top, max(row["accuracy"], default=0.0))
            cells = [name, f"{row['best_threshold']:g}", f"{row['best_accuracy']:.4f}",
                     str(row["num_images"])]
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if j == 0:
                    item.setForeground(pg.mkColor(color))
                self.best_table.setItem(i, j, item)
        self.plot.setYRange(0, max(0.1, min(1.0, top * 1.15 + 0.02)))
        if results:
            pairing = results[0].get("pairing")
            self.plot.setTitle(f"Localization (IoU > 0.5), {results[0]['num_images']} images, reference: "
                               f"{PAIRING_LABELS.get(pairing, pairing)}")

    def show_correspondence(self, result: dict) -> None:
        """Bars of partial-map vs overall-map part-correspondence accuracy."""
        self.correspondence = dict(result)
        self.bar_plot.clear()
        values = [result["partial_map_accuracy"], result["overall_map_accuracy"]]
        # the partial map is a row of the point-to-point tensor, the overall map the Decomposition
        # map: their colours of every view
        colors = [METHOD_COLORS["point_to_point"], METHOD_COLORS["decomposition"]]
        self.bar_plot.addItem(pg.BarGraphItem(x=[0, 1], height=values, width=0.6,
                                              brushes=[pg.mkBrush(c) for c in colors]))
        for x, v in enumerate(values):
            text = pg.TextItem(f"{v:.3f}", color="#e0e0e0", anchor=(0.5, 1.1))
            text.setPos(x, v)
            self.bar_plot.addItem(text)
        chance = result.get("chance_accuracy")
        if chance is not None:
            line = pg.InfiniteLine(pos=chance, angle=0, pen=pg.mkPen("#bdbdbd", width=1.5, style=Qt.DashLine),
                                   label=f"chance {chance:.2f}",
                                   labelOpts={"position": 0.93, "color": "#bdbdbd", "anchors": [(1, 1), (1, 1)]})
            self.bar_plot.addItem(line)
        self.bar_plot.setXRange(-0.6, 1.6)
        extra = f"; chance level {chance:.3f}" if chance is not None else ""
        self.correspond_label.setText(
            f"point-to-point {values[0]:.4f}, overall map {values[1]:.4f} over {result['num_parts']} parts "
            f"in {result['num_pairs']} same-class pairs{extra}")

    def show_faithfulness(self, results: list[dict]) -> None:
        """Mean deletion/insertion curves per method for the chosen pairing and the AUC table
        (the ``faithfulness`` result: one dict per method, ``different_class`` inside)."""
        self.faith_results = list(results)
        pairing = self.faith_pairing.currentData()
        rows = []
        for r in results:
            part = r if pairing == "same" else r["different_class"]
            if part["num_pairs"]:
                rows.append({"method": r["method"], "fractions": r["fractions"], "deletion": part["deletion_curve"],
                             "insertion": part["insertion_curve"], "deletion_auc": part["deletion_auc"],
                             "insertion_auc": part["insertion_auc"]})
        self.faith_plots.show_curves(rows)
        self.faith_table.show_rows(results, [r["different_class"] for r in results])
