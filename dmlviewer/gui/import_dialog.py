"""File > Import Model: a dmlviewer checkpoint from weights files trained elsewhere.

The dialog is the GUI of ``dmlviewer import-model`` (``core.models.importer``): pick the weights
file(s) (a pytorch-metric-learning trunk and embedder together), and it shows the recognized
architecture, the proposed head (in ``--head`` syntax, editable), the key mapping and the keys
left unmatched, with the notes on what was assumed. Architecture, head, key prefix and input
preprocessing can be overridden; every change re-runs the analysis in a worker thread (the
newest request wins). "Import and Open" writes the checkpoint to the file the user chose and
opens it in the main window. A layout that is not recognized shows the closest known layouts and
the unmatched keys instead, and nothing can be written.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractItemView, QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QGroupBox,
    QHBoxLayout, QHeaderView, QLabel, QLineEdit, QListWidget, QPlainTextEdit, QPushButton, QSpinBox,
    QSplitter, QTableWidget, QTableWidgetItem, QTabWidget, QVBoxLayout, QWidget,
)

from dmlviewer.gui import errors, settings
from dmlviewer.gui.widgets import PathEdit
from dmlviewer.gui.worker import LatestRunner

log = logging.getLogger(__name__)

WEIGHTS_FILTER = "Weights (*.pth *.pt *.bin *.ckpt *.tar *.safetensors);;All files (*)"
AUTO = "auto (recognize)"


def _analyze(files: list[str], options: dict, cancel) -> tuple[str, Any]:
    """Worker: ``("plan", ImportPlan)`` or ``("error", exception)`` for bad input (shown in the dialog)."""
    from dmlviewer.core.models import CheckpointError
    from dmlviewer.core.models.importer import analyze
    from dmlviewer.core.progress import run_to_end

    try:
        return "plan", run_to_end(analyze(files, cancel=cancel, **options))
    except (CheckpointError, FileNotFoundError, ValueError) as exc:
        return "error", exc


def _write(plan, out: str) -> tuple[str, Any]:
    from dmlviewer.core.models import CheckpointError
    from dmlviewer.core.models.importer import write_checkpoint

    try:
        return "written", write_checkpoint(plan, out)
    except (CheckpointError, OSError, ValueError) as exc:
        return "write-error", exc


def _floats(text: str) -> list[float] | None:
    """Three comma- or space-separated numbers, or None for an empty field (default)."""
    parts = text.replace(",", " ").split()
    if not parts:
        return None
    values = [float(p) for p in parts]
    if len(values) != 3:
        raise ValueError("give three values (R, G, B)")
    return values


class ImportDialog(QDialog):
    """The Import Model dialog; ``main_window.open_checkpoint(path)`` opens the result."""

    def __init__(self, main_window: Any = None, files: list[str] | None = None) -> None:
        super().__init__(main_window)
        self.main_window = main_window
        self.setWindowTitle("Import Model")
        self.plan = None
        self.written: str | None = None
        self.runner = LatestRunner(self)
        self.runner.result_ready.connect(self._on_result)
        self.runner.request_failed.connect(self._on_failed)
        self._debounce = QTimer(self, singleShot=True, interval=400)
        self._debounce.timeout.connect(self.analyze)
        self._build()
        if files:
            self.set_files(files)

    # -- construction
    def _build(self) -> None:
        self.files = QListWidget()
        self.files.setSelectionMode(QAbstractItemView.ExtendedSelection)
        self.files.setToolTip("The weights files, in forward order where it matters (trunk, then embedder)")
        self.files.setMaximumHeight(80)
        add = QPushButton("Add…")
        add.clicked.connect(self._add_files)
        remove = QPushButton("Remove")
        remove.clicked.connect(self._remove_files)
        buttons = QVBoxLayout()
        buttons.addWidget(add)
        buttons.addWidget(remove)
        buttons.addStretch(1)
        files_row = QHBoxLayout()
        files_row.addWidget(self.files, 1)
        files_row.addLayout(buttons)
        files_box = QGroupBox("Weights files (state dict, wrapper, DDP, PML trunk + embedder, safetensors)")
        files_box.setLayout(files_row)

        self.arch = QComboBox()
        self.arch.setEditable(True)
        self.arch.setToolTip("Architecture: recognized from the keys, or a built-in backbone, or timm:NAME")
        self.arch.addItem(AUTO)
        from dmlviewer.core.models.importer import HEAD_SPEC_HELP

        self.head = QLineEdit("auto")
        self.head.setToolTip(HEAD_SPEC_HELP[0].upper() + HEAD_SPEC_HELP[1:])
        self.prefix = QLineEdit()
        self.prefix.setPlaceholderText("auto")
        self.prefix.setToolTip("Key prefix of the backbone, when the files hold several copies")
        self.image_size = QSpinBox()
        self.image_size.setRange(31, 4096)  # the minimum (31) reads "default"
        self.image_size.setSpecialValueText("default")
        self.mean = QLineEdit()
        self.mean.setPlaceholderText("default (ImageNet, or timm's)")
        self.std = QLineEdit()
        self.std.setPlaceholderText("default (ImageNet, or timm's)")
        form = QFormLayout()
        form.addRow("Architecture", self.arch)
        form.addRow("Head", self.head)
        form.addRow("Backbone key prefix", self.prefix)
        preprocessing = QHBoxLayout()
        preprocessing.addWidget(self.image_size)
        preprocessing.addWidget(QLabel("mean"))
        preprocessing.addWidget(self.mean, 1)
        preprocessing.addWidget(QLabel("std"))
        preprocessing.addWidget(self.std, 1)
        form.addRow("Input size", preprocessing)
        options_box = QGroupBox("Options (each change recognizes again)")
        options_box.setLayout(form)

        self.status = QLabel("Add the weights file(s) of your model.")
        self.status.setObjectName("importStatus")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.summary = QPlainTextEdit()
        self.summary.setReadOnly(True)
        self.summary.setLineWrapMode(QPlainTextEdit.WidgetWidth)
        self.mapping = self._table(["source key", "dmlviewer key"])
        self.unmatched = self._table(["source key", "why it is not used"])
        self.ranking = self._table(["architecture", "keys matched", "of", "similarity"])
        self.tabs = QTabWidget()
        self.tabs.addTab(self.summary, "Summary")
        self.tabs.addTab(self.mapping, "Mapping")
        self.tabs.addTab(self.unmatched, "Unmatched")
        self.tabs.addTab(self.ranking, "Closest layouts")

        self.out = PathEdit("save", "Save the checkpoint as", "Checkpoints (*.pt);;All files (*)")
        self.out.edit.setPlaceholderText("where to write the dmlviewer checkpoint (.pt)")
        self.out.changed.connect(self._update_buttons)
        out_row = QFormLayout()
        out_row.addRow("Save as", self.out)

        self.buttons = QDialogButtonBox(QDialogButtonBox.Cancel)
        self.import_button = self.buttons.addButton("Import and Open", QDialogButtonBox.AcceptRole)
        self.import_button.setEnabled(False)
        self.buttons.accepted.connect(self.write)
        self.buttons.rejected.connect(self.reject)

        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addWidget(files_box)
        top_layout.addWidget(options_box)
        results = QWidget()
        results_layout = QVBoxLayout(results)
        results_layout.setContentsMargins(0, 0, 0, 0)
        results_layout.addWidget(self.status)
        results_layout.addWidget(self.tabs, 1)
        splitter = QSplitter(Qt.Vertical)
        splitter.addWidget(top)
        splitter.addWidget(results)
        splitter.setStretchFactor(1, 1)
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.addWidget(splitter, 1)
        layout.addLayout(out_row)
        layout.addWidget(self.buttons)

        for signal in (self.arch.currentTextChanged, self.head.textChanged, self.prefix.textChanged,
                       self.image_size.valueChanged, self.mean.textChanged, self.std.textChanged):
            signal.connect(lambda *_: self._debounce.start())
        QTimer.singleShot(0, self._fill_architectures)
        screen = (self.main_window.screen() if self.main_window is not None else self.screen()).availableGeometry()
        self.resize(min(980, int(screen.width() * 0.9)), min(720, int(screen.height() * 0.85)))

    @staticmethod
    def _table(headers: list[str]) -> QTableWidget:
        table = QTableWidget(0, len(headers))
        table.setHorizontalHeaderLabels(headers)
        table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        table.verticalHeader().setVisible(False)
        table.horizontalHeader().setSectionResizeMode(QHeaderView.Interactive)
        table.horizontalHeader().setStretchLastSection(True)
        table.setWordWrap(False)
        return table

    def _fill_architectures(self) -> None:
        from dmlviewer.core.models.importer import candidate_names

        names = [name for stage in candidate_names() for name in stage]
        current = self.arch.currentText()
        self.arch.blockSignals(True)
        self.arch.addItems(names)
        self.arch.setCurrentText(current)
        self.arch.blockSignals(False)

    # -- files
    def _add_files(self) -> None:
        start = str(Path(self.file_list()[-1]).parent) if self.file_list() else str(Path.home())
        paths, _ = QFileDialog.getOpenFileNames(self, "Choose the weights file(s)", start, WEIGHTS_FILTER)
        if paths:
            self.set_files(self.file_list() + [p for p in paths if p not in self.file_list()])

    def _remove_files(self) -> None:
        for item in self.files.selectedItems():
            self.files.takeItem(self.files.row(item))
        self.analyze()

    def file_list(self) -> list[str]:
        return [self.files.item(i).text() for i in range(self.files.count())]

    def set_files(self, files: list[str]) -> None:
        """Show ``files`` and recognize them; proposes an output file beside the first one."""
        self.files.clear()
        self.files.addItems([str(f) for f in files])
        if files and not self.out.text():
            first = Path(files[0])
            self.out.setText(str(first.with_name(f"{first.stem}_dmlviewer.pt")))
        self.analyze()

    # -- analysis
    def options(self) -> dict:
        """The override fields as ``analyze`` keyword arguments (ValueError for a malformed one)."""
        arch = self.arch.currentText().strip()
        return {
            "arch": None if arch in ("", AUTO, "auto") else arch,
            "head": self.head.text().strip() or "auto",
            "prefix": self.prefix.text().strip() or None,
            "image_size": self.image_size.value() if self.image_size.value() > self.image_size.minimum() else None,
            "mean": _floats(self.mean.text()),
            "std": _floats(self.std.text()),
        }

    def analyze(self) -> None:
        self._debounce.stop()
        self.plan = None
        self._update_buttons()
        files = self.file_list()
        if not files:
            self.runner.cancel()
            self._show_message("Add the weights file(s) of your model.")
            return
        try:
            options = self.options()
        except ValueError as exc:
            self._show_message(f"mean/std: {exc}", error=True)
            return
        self._show_message("Recognizing…")
        self.runner.submit(lambda cancel: _analyze(files, options, cancel), cancel_aware=True)

    def _on_result(self, _request: int, value: object) -> None:
        kind, payload = value
        if kind == "plan":
            self._show_plan(payload)
        elif kind == "written":
            self._on_written(*payload)
        elif kind == "write-error":
            self._show_message(f"not written: {payload}", error=True)
            self._update_buttons()
        else:
            self._show_error(payload)

    def _on_failed(self, _request: int, text: str) -> None:
        first, details = errors.split_failure(text)
        self._show_message(first, error=True)
        errors.show_error(self, "Import Model", first, details)

    def _show_message(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet("color: #c0392b;" if error else "")

    def _show_plan(self, plan) -> None:
        self.plan = plan
        head = "proposed" if plan.head_auto else "given"
        self._show_message(f"<b>{plan.arch}</b> recognized ({len(plan.match.matched)} backbone keys); head "
                           f"({head}): <code>{plan.head_spec}</code> → {plan.summary()}"
                           + (f"; <b>{len(plan.unmatched)} keys unmatched</b>" if plan.unmatched else ""))
        self.summary.setPlainText(plan.report())
        rows = list(plan.head_mapping.items()) + list(plan.backbone_mapping.items())
        self._fill(self.mapping, rows)
        self._fill(self.unmatched, list(plan.unmatched.items()))
        self._fill(self.ranking, [(m.name, len(m.matched), len(m.matched) + len(m.missing) + len(m.mismatched),
                                   f"{m.jaccard:.2f}") for m in plan.ranking[:10]])
        self.tabs.setTabText(2, f"Unmatched ({len(plan.unmatched)})")
        self._update_buttons()

    def _show_error(self, exc: BaseException) -> None:
        from dmlviewer.core.models.importer import LayoutError

        self.plan = None
        message = str(exc) if not isinstance(exc, FileNotFoundError) else f"file not found: {exc.filename or exc}"
        if any(option in message for option in ("--arch", "--head", "--prefix")):
            message += " (--arch, --head and --prefix are the Architecture, Head and Backbone key prefix fields)"
        self._show_message(message, error=True)
        self.summary.setPlainText(message)
        self._fill(self.mapping, [])
        unmatched = exc.unmatched if isinstance(exc, LayoutError) else []
        ranking = exc.ranking if isinstance(exc, LayoutError) else []
        self._fill(self.unmatched, [(k, "no known layout explains it") for k in unmatched])
        self._fill(self.ranking, [(n, a, b, f"{j:.2f}") for n, a, b, j in ranking])
        self.tabs.setTabText(2, f"Unmatched ({len(unmatched)})")
        if ranking:
            self.tabs.setCurrentWidget(self.ranking)
        self._update_buttons()

    @staticmethod
    def _fill(table: QTableWidget, rows: list[tuple]) -> None:
        table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, value in enumerate(row):
                table.setItem(r, c, QTableWidgetItem(str(value)))
        table.resizeColumnToContents(0)

    def _update_buttons(self) -> None:
        self.import_button.setEnabled(self.plan is not None and bool(self.out.text()))

    # -- writing
    def write(self) -> None:
        """Write the checkpoint in the worker; on success open it and close the dialog."""
        if self.plan is None or not self.out.text():
            return
        out = settings.expand_user(self.out.text())
        if out.suffix == "":
            out = out.with_suffix(".pt")
        if out.is_dir() or any(Path(f).resolve() == out.resolve() for f in self.file_list() if out.exists()):
            self._show_message(f"{out} is a folder or one of the weights files: choose another name", error=True)
            return
        plan = self.plan
        self.import_button.setEnabled(False)
        self._show_message(f"Writing {out}…")
        self.runner.submit(lambda: _write(plan, str(out)))

    def _on_written(self, path, diff: float) -> None:
        self.written = str(path)
        self._show_message(f"Wrote {path} (folding check {diff:.2g}: the folded head against its own source "
                           "layers; the embeddings were not compared with your model).")
        if self.main_window is not None and hasattr(self.main_window, "open_checkpoint"):
            if not self.main_window.open_checkpoint(str(path)):
                return
        self.accept()

    def done(self, result: int) -> None:  # noqa: D401 - Qt override
        self.runner.stop(1.0)
        super().done(result)


def import_action(main_window: Any) -> QAction:
    """The File > Import Model… action of ``main_window``."""
    action = QAction("&Import Model…", main_window)
    action.setToolTip("Make a dmlviewer checkpoint from weights trained elsewhere (torchvision, timm, "
                      "pytorch-metric-learning, DDP) and open it")
    action.triggered.connect(lambda: _open_dialog(main_window))
    return action


def _open_dialog(main_window: Any) -> ImportDialog:
    dialog = ImportDialog(main_window)
    dialog.setAttribute(Qt.WA_DeleteOnClose)
    dialog.open()
    return dialog
