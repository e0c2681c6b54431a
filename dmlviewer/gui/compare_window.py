"""Tools > Compare Models: the pairs where the two open models disagree most (issue 24, basic).

The window runs :func:`dmlviewer.core.explain.compare.compare_models` on the open dataset with
model A (the session's ``"primary"`` slot) and model B (its ``"compare"`` slot, File > Compare
With Model) in the main window's :class:`~dmlviewer.gui.worker.JobRunner`, each step under the
window's model lock (the pair view's preparations use the same models). It lists the pairs
ranked by disagreement (``1 -`` Spearman of the overall maps), with both similarities and the
agreement measures, and the diagnosis figures of each model (Recall@1, MAP@R, best localization
accuracy where the split has boxes). Clicking a row opens its pair in the pair view.

A result arrives only while the session still ``accepts`` the stamps of both slots taken when
the job was queued: a comparison of a model B (or A, or dataset) replaced meanwhile is dropped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterator

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QHBoxLayout, QHeaderView, QLabel, QPushButton,
                               QSpinBox, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

log = logging.getLogger(__name__)

#: (column title, key of a pair row of ``compare_models``, format)
COLUMNS = [
    ("Rank", "rank", "{}"),
    ("Query", "query_path", "{}"),
    ("Reference", "reference_path", "{}"),
    ("Similarity A", None, "{:+.4f}"),
    ("Similarity B", None, "{:+.4f}"),
    ("Map Spearman", "overall_map_spearman", "{:+.3f}"),
    ("IoU", "iou", "{:.3f}"),
    ("Peak distance", "peak_distance", "{:.3f}"),
    ("Point-to-point Spearman", "point_to_point_spearman", "{:+.3f}"),
    ("Right neighbour A / B", None, "{}"),
]


def locked_steps(job: Iterator, lock) -> Iterator:
    """Re-yield a generator's events, running each of its steps under ``lock`` (so that the
    pair view, which uses the same models, never runs a model at the same time); returns its
    return value."""
    while True:
        with lock:
            try:
                event = next(job)
            except StopIteration as stop:
                return stop.value
        yield event


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "–"
    try:
        return fmt.format(value)
    except (TypeError, ValueError):
        return str(value)


class CompareWindow(QWidget):
    """See the module docstring. ``window``: the main window (its ``session``, ``runner``,
    ``model_lock``, ``device``, ``set_pair``)."""

    pair_chosen = Signal(int, int)  # (query, reference) dataset indices

    def __init__(self, window, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Compare Models")
        self.window_ = window
        self.job = None
        self._stamps = None
        self.result: dict | None = None
        self.models_label = QLabel()
        self.models_label.setWordWrap(True)
        self.split_combo = QComboBox()
        for split in ("test", "train", "both"):
            self.split_combo.addItem(split, split)
        self.pairs_spin = QSpinBox()
        self.pairs_spin.setRange(1, 10000)
        self.pairs_spin.setValue(20)
        self.pairs_spin.setToolTip("Same-class pairs of the split, drawn with a fixed seed")
        self.run_button = QPushButton("Compare")
        self.run_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        controls = QHBoxLayout()
        for widget in (QLabel("Split"), self.split_combo, QLabel("Pairs"), self.pairs_spin, self.run_button,
                       self.cancel_button):
            controls.addWidget(widget)
        controls.addStretch(1)
        self.status = QLabel("Open two models (File ▸ Compare With Model) and a dataset, then Compare.")
        self.status.setWordWrap(True)
        self.diagnosis = QLabel()
        self.diagnosis.setWordWrap(True)
        self.diagnosis.setTextFormat(Qt.RichText)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels([c[0] for c in COLUMNS])
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.table.verticalHeader().hide()
        self.table.setToolTip("The pairs, most disagreeing first (1 − Spearman of the two models' overall maps); "
                              "click a row to open the pair")
        self.table.cellClicked.connect(self._on_row)
        layout = QVBoxLayout(self)
        layout.addWidget(self.models_label)
        layout.addLayout(controls)
        layout.addWidget(self.status)
        layout.addWidget(self.diagnosis)
        layout.addWidget(self.table, 1)
        runner = window.runner
        runner.job_finished.connect(self._on_finished)
        runner.job_failed.connect(self._on_failed)
        runner.job_cancelled.connect(self._on_cancelled)
        runner.job_progress.connect(self._on_progress)
        self.pair_chosen.connect(window.set_pair)
        self.resize(900, 520)
        self.refresh()

    def refresh(self) -> None:
        """Say which models are open (and whether a comparison can run)."""
        session = self.window_.session
        a, b = session.slot("primary"), session.slot("compare")
        names = [self.window_._display_name(s) if slot is not None else "none"
                 for s, slot in (("primary", a), ("compare", b))]
        self.models_label.setText(f"<b>A</b>: {names[0]}   ·   <b>B</b>: {names[1]}   ·   dataset: "
                                  f"{Path(session.dataset_path).name if session.dataset_path else 'none'}")
        self.run_button.setEnabled(a is not None and b is not None and session.dataset is not None
                                   and (self.job is None or self.job.ended))

    # -- the job
    def start(self) -> None:
        """Queue the comparison of the open models on the chosen split."""
        from dmlviewer.core.explain.compare import compare_models

        window, session = self.window_, self.window_.session
        a, b = session.slot("primary"), session.slot("compare")
        if a is None or b is None or session.dataset is None:
            self.refresh()
            return
        model_a, model_b, dataset, device, lock = a.model, b.model, session.dataset, window.device, window.model_lock
        split, pairs = self.split_combo.currentData(), self.pairs_spin.value()

        def factory(cancel):
            return locked_steps(compare_models(model_a, model_b, dataset, split, pairs, device, cancel=cancel), lock)

        name = (f"Compare {window._model_name('primary')} and {window._model_name('compare')} on {pairs} "
                f"{split} pairs of {Path(session.dataset_path).name}")
        self._stamps = (session.stamp("primary"), session.stamp("compare"))
        self.job = window.runner.submit(name, factory)
        self.status.setText("Comparing… (see View ▸ Jobs)")
        self.cancel_button.setEnabled(True)
        self.refresh()

    def cancel(self) -> None:
        if self.job is not None and not self.job.ended:
            self.window_.runner.cancel(self.job)

    def _on_progress(self, job, event) -> None:
        if job is self.job and getattr(event, "total", 0):
            self.status.setText(f"{event.message or 'comparing'}: {event.current}/{event.total}")

    def _ended(self, job) -> bool:
        if job is not self.job:
            return False
        self.cancel_button.setEnabled(False)
        self.refresh()
        return True

    def _on_finished(self, job, result) -> None:
        if not self._ended(job):
            return
        session = self.window_.session
        if not all(session.accepts(stamp) for stamp in self._stamps or (None,)):
            log.info("dropped the result of %s: a model or the dataset was replaced meanwhile", job.name)
            self.status.setText("The models or the dataset changed while comparing: the result was dropped. "
                                "Compare again.")
            return
        self.show_result(result)

    def _on_failed(self, job, text: str) -> None:
        if self._ended(job):
            from dmlviewer.gui import errors

            first, details = errors.split_failure(text)
            self.status.setText(f"The comparison failed: {first}")
            errors.show_error(self, "Comparison failed", first, details)

    def _on_cancelled(self, job) -> None:
        if self._ended(job):
            self.status.setText("Cancelled.")

    # -- the result
    def show_result(self, result: dict) -> None:
        """Fill the diagnosis line and the table from a ``compare_models`` result."""
        self.result = result
        rows = result.get("pairs") or []
        agreement = result.get("agreement") or {}
        mean = (agreement.get("overall_map_spearman") or {}).get("mean")
        self.status.setText(f"{len(rows)} pairs of the {result.get('split')} split, most disagreeing first; "
                            f"mean Spearman of the overall maps {_cell(mean, '{:+.3f}')}. Click a row to open it.")
        lines = []
        for model in result.get("models") or []:
            text = (f"<b>{model['name']}</b>: Recall@1 {_cell(model.get('recall@1'), '{:.3f}')}, "
                    f"MAP@R {_cell(model.get('map@r'), '{:.3f}')}")
            for method, figures in (model.get("localization") or {}).items():
                text += f", localization ({method}) {_cell(figures.get('best_accuracy'), '{:.3f}')}"
            lines.append(text)
        self.diagnosis.setText("<br>".join(lines))
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            sims = row.get("similarity") or [None, None]
            right = " / ".join("–" if v is None else ("yes" if v else "no")
                               for v in row.get("nearest_same_class") or [None, None])
            values = {"Similarity A": sims[0], "Similarity B": sims[1], "Right neighbour A / B": right}
            for c, (title, key, fmt) in enumerate(COLUMNS):
                value = row.get(key) if key else values[title]
                if key in ("query_path", "reference_path") and value:
                    value = Path(str(value)).name
                item = QTableWidgetItem(_cell(value, fmt))
                item.setData(Qt.UserRole, (int(row["query"]), int(row["reference"])))
                if key in ("query_path", "reference_path"):
                    item.setToolTip(str(row.get(key)))
                self.table.setItem(r, c, item)

    def _on_row(self, row: int, _column: int) -> None:
        item = self.table.item(row, 0)
        if item is None:
            return
        query, reference = item.data(Qt.UserRole)
        self.pair_chosen.emit(int(query), int(reference))
