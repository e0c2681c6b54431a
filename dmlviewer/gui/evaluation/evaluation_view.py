"""Evaluation: extract a checkpoint's features into HDF5 and compare metrics side by side.

"Evaluate" runs ``core.evaluate.evaluate`` (features of one split into an HDF5 file, the
metrics of DESIGN.md stored as its attributes) through the :class:`JobRunner`. Every
evaluated checkpoint (or opened feature file) becomes a column of one table whose rows are the
metrics, so two or more models can be compared ("model diagnosis", seed 000 Sec. 5.2); the
localization view adds a localization-accuracy row to a column when it has computed one. The
best value of each row is shown in bold. The table is copied with Ctrl+C (tab-separated, with
headers) or exported as CSV.
"""

from __future__ import annotations

import csv
import html
import io
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView, QApplication, QComboBox, QFileDialog, QFormLayout, QHBoxLayout, QHeaderView,
    QLabel, QProgressBar, QPushButton, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget,
)

from dmlviewer.core.progress import Progress
from dmlviewer.gui.common import errors
from dmlviewer.gui.jobs.job_status import show_progress
from dmlviewer.gui.common.widgets import PathEdit, fit_to_screen, guard_wheel, keep_in_front
from dmlviewer.gui.jobs.job import Job
from dmlviewer.gui.jobs.runner import JobRunner

log = logging.getLogger(__name__)

#: DESIGN.md metric keys, in table order, with their display names.
METRIC_ROWS = [
    ("recall@1", "Recall@1"), ("recall@2", "Recall@2"), ("recall@4", "Recall@4"), ("recall@8", "Recall@8"),
    ("nmi", "NMI"), ("f1", "F1"), ("map@r", "MAP@R"), ("r_precision", "R-precision"),
    ("knn_acc", "kNN accuracy"), ("num_queries", "queries"),
]
#: Rows where the largest value is not "best" (counts).
_NOT_RANKED = {"num_queries"}
SPLITS = ["test", "train", "all"]


def row_label(key: str) -> str:
    """Display name of a table row: ``localization (rgradcam)`` -> ``Localization (RGrad-CAM)``."""
    if key.startswith("localization (") and key.endswith(")"):
        from dmlviewer.core.explain.methods import label

        return f"Localization ({label(key[len('localization ('):-1])})"
    return key


@dataclass
class MetricsColumn:
    """One evaluated model: where its numbers come from and the numbers."""

    title: str
    metrics: dict[str, float] = field(default_factory=dict)
    checkpoint: str | None = None
    features: str | None = None
    split: str | None = None


def metrics_from_features(path: str | Path) -> MetricsColumn:
    """The metrics stored as attributes of an evaluated HDF5 feature file."""
    from dmlviewer.core.evaluate import read_features

    features = read_features(path, include_raw=False, include_groups=False)
    keys = {key for key, _ in METRIC_ROWS}
    metrics = {k: float(v) for k, v in features.attrs.items() if k in keys}
    split = sorted(set(features.split.tolist()))
    return MetricsColumn(title=Path(path).stem, metrics=metrics, features=str(path),
                         split="+".join(split) if split else None)


class EvaluationInputs(QWidget):
    """Checkpoint, dataset, split and device fields shared by the evaluation views."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        from dmlviewer.core.models import available_devices

        self.checkpoint = PathEdit("open", "Choose a checkpoint", "Checkpoints (*.pt *.pth);;All files (*)")
        self.dataset = PathEdit("dir", "Choose the dataset folder")
        self.split = QComboBox()
        self.split.addItems(SPLITS)
        self.device = QComboBox()
        self.device.addItems(["auto", *available_devices()])
        self.dataset_format: str | None = None
        self.form = QFormLayout(self)
        self.form.setContentsMargins(0, 0, 0, 0)
        self.form.addRow("Checkpoint", self.checkpoint)
        self.form.addRow("Dataset", self.dataset)
        self.form.addRow("Split", self.split)
        self.form.addRow("Device", self.device)
        self.checkpoint.changed.connect(self.changed)
        self.dataset.changed.connect(self.changed)

    def set_sources(self, checkpoint: str | None = None, dataset: str | None = None,
                    dataset_format: str | None = None) -> None:
        """Prefill from the main window's current checkpoint and dataset."""
        if checkpoint:
            self.checkpoint.setText(str(checkpoint))
        if dataset:
            self.dataset.setText(str(dataset))
            self.dataset_format = dataset_format

    def problems(self) -> list[str]:
        """What stops a run, one line each: checked when a run is asked for (a button), never
        per keystroke, and never raising, whatever the fields hold."""
        from dmlviewer.core.files import file_problem

        out = []
        checkpoint, dataset = self.checkpoint.text(), self.dataset.text()
        problem = file_problem(checkpoint) if checkpoint else "none chosen"
        if problem:
            out.append(f"checkpoint {checkpoint}: {problem}" if checkpoint else "checkpoint: none chosen")
        problem = folder_problem(dataset) if dataset else "none chosen"
        if problem:
            out.append(f"dataset folder {dataset}: {problem}" if dataset else "dataset folder: none chosen")
        return out


def folder_problem(path: str) -> str | None:
    """Why ``path`` is not an existing folder ("not found", "not a folder", "file name too
    long", ...), or ``None``; never raises."""
    import os
    import stat

    try:
        return None if stat.S_ISDIR(os.stat(path).st_mode) else "not a folder"
    except (FileNotFoundError, NotADirectoryError):
        return "not found"
    except ValueError:
        return "invalid file name"
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()


def features_file_problem(path: str) -> str | None:
    """Why an HDF5 features file cannot be written at ``path``, or ``None``; never raises."""
    from dmlviewer.core.files import output_problem

    if not path:
        return "choose where to write the features file"
    try:
        return output_problem(path, "features file")
    except (OSError, ValueError) as exc:
        return f"features file {path}: {getattr(exc, 'strerror', None) or exc}"


class MetricsTable(QTableWidget):
    """Rows = metrics, columns = evaluated models; Ctrl+C copies tab-separated text."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, 0, parent)
        self.columns: list[MetricsColumn] = []
        self.extra_rows: list[str] = []
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.ExtendedSelection)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.verticalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.rebuild()

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt API
        if event.matches(QKeySequence.Copy):
            self.copy_selection()
            event.accept()
            return
        super().keyPressEvent(event)

    def row_keys(self) -> list[str]:
        return [k for k, _ in METRIC_ROWS] + self.extra_rows

    def add_column(self, column: MetricsColumn) -> int:
        """Add (or replace, for the same features file) a column; returns its index."""
        for i, existing in enumerate(self.columns):
            if column.features and existing.features == column.features:
                # the same file evaluated or read again: new numbers, the known provenance kept
                column.checkpoint = column.checkpoint or existing.checkpoint
                column.title = existing.title
                column.metrics = {**existing.metrics, **column.metrics}
                self.columns[i] = column
                break
        else:
            self.columns.append(column)
        for key in column.metrics:
            if key not in self.row_keys():
                self.extra_rows.append(key)
        self.rebuild()
        return self.columns.index(column)

    def set_value(self, column: int, key: str, value: float) -> None:
        """Put one number (e.g. a localization accuracy row) into a column."""
        self.columns[column].metrics[key] = float(value)
        if key not in self.row_keys():
            self.extra_rows.append(key)
        self.rebuild()

    def remove_columns(self, indices: list[int]) -> None:
        for i in sorted(set(indices), reverse=True):
            del self.columns[i]
        self.rebuild()

    def rebuild(self) -> None:
        keys = self.row_keys()
        names = dict(METRIC_ROWS)
        self.setRowCount(len(keys))
        self.setColumnCount(len(self.columns))
        self.setVerticalHeaderLabels([names.get(k) or row_label(k) for k in keys])
        self.setHorizontalHeaderLabels([c.title for c in self.columns])
        for j, column in enumerate(self.columns):
            tip = "\n".join(f"{k}: {v}" for k, v in (("checkpoint", column.checkpoint),
                                                     ("features", column.features), ("split", column.split)) if v)
            self.horizontalHeaderItem(j).setToolTip(tip)
        bold = QFont()
        bold.setBold(True)
        for i, key in enumerate(keys):
            values = [c.metrics.get(key) for c in self.columns]
            present = [v for v in values if v is not None]
            best = max(present) if len(present) > 1 and key not in _NOT_RANKED else None
            for j, value in enumerate(values):
                item = QTableWidgetItem(self.format(key, value))
                item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                if value is not None:
                    item.setData(Qt.UserRole, float(value))
                if best is not None and value == best:
                    item.setFont(bold)
                self.setItem(i, j, item)

    @staticmethod
    def format(key: str, value: float | None) -> str:
        if value is None:
            return ""
        if key == "num_queries" or key.startswith("num_"):
            return str(int(value))
        return f"{value:.4f}"

    def as_rows(self, selected_only: bool = False) -> list[list[str]]:
        """The table as text rows with headers (the selection's bounding rows/columns)."""
        rows = range(self.rowCount())
        cols = range(self.columnCount())
        if selected_only and self.selectedIndexes():
            rows = sorted({i.row() for i in self.selectedIndexes()})
            cols = sorted({i.column() for i in self.selectedIndexes()})
        keys = self.row_keys()
        out = [["metric", *[self.columns[j].title for j in cols]]]
        for i in rows:
            out.append([keys[i], *[self.item(i, j).text() if self.item(i, j) else "" for j in cols]])
        return out

    def to_tsv(self, selected_only: bool = False) -> str:
        return "\n".join("\t".join(row) for row in self.as_rows(selected_only)) + "\n"

    def copy_selection(self) -> None:
        QApplication.clipboard().setText(self.to_tsv(selected_only=True))

    def export_csv(self, path: str | Path) -> None:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(self.as_rows())
        Path(path).write_text(buffer.getvalue(), encoding="utf-8")


def default_features_path(checkpoint: str, split: str) -> str:
    """``<checkpoint folder>/<checkpoint stem>-<split>.h5``; in ``features/`` of the output
    folder instead when the checkpoint lies in the package (the shipped demo checkpoint), in
    the cache or in a folder the user cannot write."""
    from dmlviewer.gui.window import settings

    path = Path(checkpoint)
    return str(settings.output_path_for(path.with_name(f"{path.stem}-{split}.h5"), "features"))


class EvaluationView(QWidget):
    """Run evaluations and compare their metrics (see the module docstring)."""

    evaluated = Signal(object)  # MetricsColumn

    def __init__(self, runner: JobRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Evaluation")
        keep_in_front(self)
        self.runner = runner
        self.job: Job | None = None
        self._pending: dict[int, MetricsColumn] = {}
        self._suggested: str | None = None  # the features path we proposed (replaced on change)
        self.inputs = EvaluationInputs()
        self.out = PathEdit("save", "Save features as", "HDF5 features (*.h5)")
        self.inputs.form.addRow("Features file", self.out)
        self.run_button = QPushButton("Evaluate")
        self.run_button.setToolTip("Check the fields and extract the split's features into the features file")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.table = MetricsTable()
        self.add_button = QPushButton("Add features file...")
        self.remove_button = QPushButton("Remove column")
        self.copy_button = QPushButton("Copy")
        self.export_button = QPushButton("Export CSV...")

        run_row = QHBoxLayout()
        run_row.addWidget(self.run_button)
        run_row.addWidget(self.cancel_button)
        run_row.addWidget(self.progress, 1)
        table_row = QHBoxLayout()
        for b in (self.add_button, self.remove_button):
            table_row.addWidget(b)
        table_row.addStretch(1)
        for b in (self.copy_button, self.export_button):
            table_row.addWidget(b)
        layout = QVBoxLayout(self)
        layout.addWidget(self.inputs)
        layout.addLayout(run_row)
        layout.addWidget(self.status)
        layout.addWidget(self.table, 1)
        layout.addLayout(table_row)
        fit_to_screen(self, 760, 600)
        guard_wheel(self)

        self.inputs.changed.connect(self._suggest_out)
        self.inputs.split.currentTextChanged.connect(self._suggest_out)
        self.run_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.add_button.clicked.connect(self._ask_features)
        self.remove_button.clicked.connect(self._remove_selected)
        self.copy_button.clicked.connect(self._copy_all)
        self.export_button.clicked.connect(self._ask_export)
        self._update_buttons()

    # -- inputs
    def set_sources(self, checkpoint: str | None = None, dataset: str | None = None,
                    dataset_format: str | None = None) -> None:
        self.inputs.set_sources(checkpoint, dataset, dataset_format)

    def _suggest_out(self) -> None:
        """Propose ``<checkpoint>-<split>.h5`` for an existing checkpoint file, unless the user
        chose another features file (a half-typed path proposes nothing and never raises)."""
        from dmlviewer.core.files import file_problem

        checkpoint = self.inputs.checkpoint.text()
        if not checkpoint or file_problem(checkpoint) or (self.out.text() and self.out.text() != self._suggested):
            return
        try:
            self._suggested = default_features_path(checkpoint, self.inputs.split.currentText())
        except (OSError, ValueError, RuntimeError) as exc:  # a name the output folder cannot take
            log.debug("no features file proposed for %r: %s", checkpoint, exc)
            return
        self.out.setText(self._suggested)

    def problems(self) -> list[str]:
        out = self.inputs.problems()
        problem = features_file_problem(self.out.text())
        if problem:
            out.append(problem)
        return out

    def _update_buttons(self) -> None:
        running = self.job is not None and not self.job.ended
        self.run_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        self.remove_button.setEnabled(bool(self.table.columns))

    # -- running
    def start(self) -> Job | None:
        """Check the fields (the problems go to the status line) and run the evaluation."""
        if self.job is not None and not self.job.ended:
            return None
        problems = self.problems()
        if problems:
            self.status.setText("<span style='color:#eb5757'>Cannot evaluate: "
                                f"{html.escape('; '.join(problems))}</span>")
            self.status.setToolTip("")
            return None
        from dmlviewer.core.evaluate import evaluate

        checkpoint, dataset = self.inputs.checkpoint.text(), self.inputs.dataset.text()
        split, out = self.inputs.split.currentText(), self.out.text()
        kwargs = dict(split=split, out=out, device=self.inputs.device.currentText(),
                      format=self.inputs.dataset_format)
        name = f"Evaluate {Path(checkpoint).parent.name}/{Path(checkpoint).name} ({split})"
        self.job = self.runner.submit(name, (evaluate, (checkpoint, dataset), kwargs), progress=self._on_progress,
                                      finished=self._on_finished, failed=self._on_failed,
                                      cancelled=self._on_cancelled)
        self._pending[self.job.id] = MetricsColumn(
            title=f"{Path(checkpoint).parent.name}/{Path(checkpoint).stem} ({split})",
            checkpoint=checkpoint, features=out, split=split)
        self.progress.setValue(0)
        self.status.setText("Queued..." if self.job.state == "queued" else "Running...")
        self._update_buttons()
        return self.job

    def cancel(self) -> None:
        if self.job is not None:
            self.runner.cancel(self.job)

    def _on_progress(self, job: Job, event: Progress) -> None:
        if job is self.job:  # the newest run's
            show_progress(self.progress, self.status, job, event)

    def _on_finished(self, job: Job, result: Any) -> None:
        column = self._pending.pop(job.id)
        column.metrics = {k: float(v) for k, v in (result or {}).items() if isinstance(v, (int, float))}
        self.table.add_column(column)
        self.progress.setValue(1000)
        self.status.setText(f"Evaluated: features in {column.features}")
        self._update_buttons()
        self.evaluated.emit(column)

    def _on_failed(self, job: Job, text: str) -> None:
        self._pending.pop(job.id)
        errors.show_failure(self.status, text, "Evaluation failed")
        self._update_buttons()

    def _on_cancelled(self, job: Job) -> None:
        self._pending.pop(job.id)
        self.status.setText("Evaluation cancelled (no features file was written).")
        self._update_buttons()

    # -- table
    def add_features(self, path: str | None = None) -> int | None:
        """Add the metrics of an already evaluated feature file as a column."""
        if not path:
            from dmlviewer.gui.window import settings

            start = settings.start_dir(self.out.text())
            path, _ = QFileDialog.getOpenFileName(self, "Add a features file", start, "HDF5 features (*.h5)")
            if not path:
                return None
        try:
            column = metrics_from_features(path)
        except (OSError, ValueError) as exc:
            from dmlviewer.gui.common.errors import show_error

            show_error(self, "Add features file", f"Could not read {path}: {exc}")
            return None
        index = self.table.add_column(column)
        self._update_buttons()
        return index

    def add_localization(self, checkpoint: str, method: str, accuracy: float) -> None:
        """Add a "localization (method)" row value to the column(s) of ``checkpoint``
        (a new column when the checkpoint has none yet)."""
        key = f"localization ({method})"
        target = [i for i, c in enumerate(self.table.columns)
                  if c.checkpoint and Path(c.checkpoint).resolve() == Path(checkpoint).resolve()]
        if not target:
            column = MetricsColumn(title=f"{Path(checkpoint).parent.name}/{Path(checkpoint).stem}",
                                   checkpoint=str(checkpoint))
            target = [self.table.add_column(column)]
        for i in target:
            self.table.set_value(i, key, accuracy)
        self._update_buttons()

    # Buttons are connected to methods without parameters (a lambda holding ``self`` in a
    # connection of a child's signal makes PySide6 crash when the view is destroyed).
    def _ask_features(self) -> None:
        self.add_features()

    def _ask_export(self) -> None:
        self.export_csv()

    def _copy_all(self) -> None:
        QApplication.clipboard().setText(self.table.to_tsv())

    def _remove_selected(self) -> None:
        cols = sorted({i.column() for i in self.table.selectedIndexes()})
        if not cols and self.table.columns:
            cols = [len(self.table.columns) - 1]
        self.table.remove_columns(cols)
        self._update_buttons()

    def export_csv(self, path: str | None = None) -> None:
        if not path:
            from dmlviewer.gui.window import settings

            start = Path(settings.start_dir(self.out.text())) / "metrics.csv"
            path, _ = QFileDialog.getSaveFileName(self, "Export metrics", str(start), "CSV (*.csv)")
            if not path:
                return
        self.table.export_csv(path)
        self.status.setText(f"Exported to {path}")
