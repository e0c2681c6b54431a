"""The Compare Models window's "What changed" tab (issue 41): the change table of models A and
B on the window's split (:func:`dmlviewer.core.evaluate.changes.compare_models_changes`, run as
a job with progress and cancel), the neighbour overlap, and the broken and fixed queries, the
largest change of margin first. Clicking a row opens the query in the pair view with A's top-1
as model A's reference and B's top-1 as model B's (both rows shown); clicking the "Top-1 A" or
"Top-1 B" cell opens it with that model's top-1 on both rows.

Each model's embeddings are read from its slot's feature file when that file fits the open
dataset and the slot's model (``Session.features_ready``: model A's from File ▸ Open Features
or the Retrieval panel's extraction, model B's from File ▸ Open/Compute Features for Model B);
only a model without one is embedded now. The status line says which came from a file.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QHeaderView, QLabel, QPushButton, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from dmlviewer.gui.evaluation.two_models import open_models, queue_two_model_job

log = logging.getLogger(__name__)

COLUMNS = ("Change", "Query", "Top-1 A", "Top-1 B", "Margin A", "Margin B", "Margin change")


class ChangesPanel(QWidget):
    """See the module docstring. ``window``: the main window (``session``, ``runner``,
    ``model_lock``, ``device``, ``labels``); ``split``: a callable giving the split to compare
    (the Compare Models window's choice; "both" compares the test split)."""

    #: (query, reference, model B's reference or None) dataset indices (``MainWindow.set_pair``)
    pair_chosen = Signal(int, int, object)

    def __init__(self, window, split, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.window_ = window
        self._split = split
        self.job = None
        self._stamps = None
        self.result: dict | None = None
        self.run_button = QPushButton("What changed")
        self.run_button.setToolTip("Each query's top-1 right or wrong under A and under B, the neighbour overlap, "
                                   "and the queries B broke and fixed")
        self.run_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.status = QLabel("What changed from model A to model B: the queries B broke and fixed.")
        self.status.setWordWrap(True)
        self.counts = QLabel()
        self.counts.setWordWrap(True)
        self.counts.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.table.verticalHeader().hide()
        self.table.setToolTip("Broken: right under A, wrong under B; fixed: the reverse. Click a row to open the "
                              "query with A's top-1 on row A and B's on row B, a 'Top-1' cell to open that "
                              "model's on both rows")
        self.table.cellClicked.connect(self._on_cell)
        controls = QHBoxLayout()
        controls.addWidget(self.run_button)
        controls.addWidget(self.cancel_button)
        controls.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(controls)
        layout.addWidget(self.status)
        layout.addWidget(self.counts)
        layout.addWidget(self.table, 1)

    def split(self) -> str:
        chosen = self._split()
        return "test" if chosen == "both" else chosen

    def refresh(self) -> None:
        ready = open_models(self.window_.session) is not None
        self.run_button.setEnabled(ready and (self.job is None or self.job.ended))

    def start(self) -> None:
        """Queue the change table of the open models on the split."""
        from dmlviewer.core.evaluate.changes import compare_models_changes

        window, session = self.window_, self.window_.session
        held = open_models(session)
        if held is None:
            self.refresh()
            return
        models = [(name, slot.model, slot.sha256 or "", self._feature_file(key))
                  for name, key, slot in (("A", "primary", held[0]), ("B", "compare", held[1]))]
        dataset, device, split = session.dataset, window.device, self.split()
        self.job, self._stamps = queue_two_model_job(
            window, f"What changed from {window.labels.job_name('primary')} to {window.labels.job_name('compare')} "
            f"on the {split} split of {Path(session.dataset_path).name}",
            lambda cancel: compare_models_changes(models, dataset, split, device, num_workers=0, cancel=cancel),
            progress=self._on_progress, finished=self._on_finished, failed=self._on_failed,
            cancelled=self._on_cancelled)
        self.status.setText("Comparing the neighbours… (see View ▸ Jobs)")
        self.cancel_button.setEnabled(True)
        self.refresh()

    def _feature_file(self, slot: str) -> str | None:
        """``slot``'s feature file when it fits the open dataset and the slot's model (its rows
        are read instead of embedding the split again); None: embed."""
        session = self.window_.session
        held = session.slot_features[slot]
        if held.path and session.slot(slot).sha256 and session.features_ready(slot):
            return held.path
        return None

    def cancel(self) -> None:
        if self.job is not None and not self.job.ended:
            self.window_.runner.cancel(self.job)

    def _ended(self, job) -> bool:
        if job is not self.job:
            return False
        self.cancel_button.setEnabled(False)
        self.refresh()
        return True

    def _on_progress(self, job, event) -> None:
        if job is self.job and getattr(event, "total", 0):
            self.status.setText(f"{event.message or 'working'}: {event.current}/{event.total}")

    def _on_finished(self, job, result) -> None:
        if not self._ended(job):
            return
        if not all(self.window_.session.accepts(s) for s in self._stamps or (None,)):
            self.status.setText("The models or the dataset changed meanwhile: the result was dropped. Run it again.")
            return
        self.show_result(result)

    def _on_failed(self, job, text: str) -> None:
        if self._ended(job):
            from dmlviewer.gui.common import errors

            first, details = errors.split_failure(text)
            self.status.setText(f"What changed failed: {first}")
            errors.show_error(self, "What changed failed", first, details)

    def _on_cancelled(self, job) -> None:
        if self._ended(job):
            self.status.setText("Cancelled.")

    def show_result(self, result: dict) -> None:
        """Show a change table (:func:`~dmlviewer.core.evaluate.changes.change_table`'s result)."""
        self.result = result
        overlap = ", ".join(f"top-{k} {v:.3f}" for k, v in result["overlap"].items())
        recall = result["recall@1"]
        origin = "; ".join(f"{name}'s embeddings {'from its feature file' if read else 'computed now'}"
                           for name, read in zip(("A", "B"), result.get("from_file", ())))
        self.status.setText(f"{result['num_queries']} queries: Recall@1 A {recall[0]:.3f}, B {recall[1]:.3f}"
                            + (f" ({origin})" if origin else "") + ". Click a row to open the query with A's "
                            "and B's top-1.")
        self.counts.setText(f"both right {result['both_right']} · A only {result['a_only']} · B only "
                            f"{result['b_only']} · both wrong {result['both_wrong']} · neighbour overlap {overlap}")
        rows = [("broken", e) for e in result["broken"]] + [("fixed", e) for e in result["fixed"]]
        self.table.setRowCount(len(rows))
        for r, (kind, entry) in enumerate(rows):
            top_a, top_b = int(entry["top1"][0]["index"]), int(entry["top1"][1]["index"])
            both = (top_a, top_b)  # row A on A's top-1, row B on B's
            cells = [(kind, both), (Path(entry["path"]).name, both),
                     (Path(entry["top1"][0]["path"]).name, (top_a, None)),
                     (Path(entry["top1"][1]["path"]).name, (top_b, None)),
                     (f"{entry['margin'][0]:+.3f}", both), (f"{entry['margin'][1]:+.3f}", both),
                     (f"{entry['margin_change']:+.3f}", both)]
            for c, (text, references) in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.UserRole, (int(entry["index"]), *references))
                if c in (1, 2, 3):
                    item.setToolTip(entry["path"] if c == 1 else entry["top1"][c - 2]["path"])
                self.table.setItem(r, c, item)

    def _on_cell(self, row: int, column: int) -> None:
        item = self.table.item(row, column)
        if item is not None:
            query, reference, reference_b = item.data(Qt.UserRole)
            self.pair_chosen.emit(int(query), int(reference), reference_b)
