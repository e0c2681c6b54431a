"""File > Import Model: a dmlviewer checkpoint from weights files trained elsewhere.

The dialog is the GUI of ``dmlviewer import-model`` (``core.models.importing``): pick the weights
file(s) (a pytorch-metric-learning trunk and embedder together), and it shows the recognized
architecture, the proposed head (in ``--head`` syntax, editable), the key mapping and the keys
left unmatched, with the notes on what was assumed. Architecture, head, key prefix and input
preprocessing can be overridden; every change re-runs the analysis in a worker thread (the
newest request wins). "Import and Open" writes the checkpoint to the file the user chose and
opens it in the main window. A layout that is not recognized shows the closest known layouts and
the unmatched keys instead, and nothing can be written.

A two-branch (cross-view) model (issue 25), as ``import-model --reference-weights``: the weights
files are the query branch (e.g. the street encoder), the optional "Reference branch" file the
reference branch (e.g. the aerial encoder), each with its own input size (``S`` or ``HxW``); the
options above apply to both branches (said in the reference branch's assumptions). Both are
recognized with :func:`~dmlviewer.core.models.importing.analyze_two_branch`, branches of different
embedding widths are refused in the dialog, and one two-branch checkpoint is written.

"Check against" (``import-model --check-against``, and ``--reference-check-against`` for the
reference branch): images and the user's own model's embeddings of them; the model to be written
must reproduce them, else nothing is written and the dialog names the fields to look at. What was
compared (or not) is said in the main window's status bar once the checkpoint opens.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractItemView, QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QGroupBox,
    QHBoxLayout, QHeaderView, QLabel, QLineEdit, QListWidget, QPlainTextEdit, QPushButton,
    QSplitter, QTableWidget, QTableWidgetItem, QTabWidget, QVBoxLayout, QWidget,
)

from dmlviewer.gui.common import errors

from dmlviewer.gui.window import settings
from dmlviewer.gui.common.widgets import PathEdit
from dmlviewer.gui.jobs.latest import LatestRunner

log = logging.getLogger(__name__)

WEIGHTS_FILTER = "Weights (*.pth *.pt *.bin *.ckpt *.tar *.safetensors);;All files (*)"
CHECK_FILTER = "Images and embeddings (*.npz *.pt);;All files (*)"
AUTO = "auto (recognize)"


def _analyze(files: list[str], options: dict, cancel) -> tuple[str, Any]:
    """Worker: ``("plan", ImportPlan)`` or ``("error", exception)`` for bad input (shown in the dialog)."""
    from dmlviewer.core.models import CheckpointError
    from dmlviewer.core.models.importing import analyze
    from dmlviewer.core.progress import run_to_end

    try:
        return "plan", run_to_end(analyze(files, cancel=cancel, **options))
    except (CheckpointError, FileNotFoundError, ValueError) as exc:
        return "error", exc


#: the importer's input fields (``core.models.importing.FIELDS``) as this dialog's labels: its
#: messages and reports name them so; a reference branch takes the query's options
FIELD_LABELS = {
    "weights": "the weights files", "arch": "“Architecture”", "head": "“Head”",
    "prefix": "“Backbone key prefix”", "image_size": "“Input size”", "mean": "“mean”", "std": "“std”",
    "pooling": "the pooling (first in “Head”)", "gem_p": "gem=P (first in “Head”)",
    "check_against": "“Check against”", "force": "import-model's --force",
    "reference_weights": "“Reference branch”", "reference_arch": "“Architecture”", "reference_head": "“Head”",
    "reference_prefix": "“Backbone key prefix”", "reference_image_size": "the reference branch's input size",
    "reference_mean": "“mean”", "reference_std": "“std”", "reference_pooling": "the pooling (first in “Head”)",
    "reference_gem_p": "gem=P (first in “Head”)", "reference_check_against": "the reference “Check against”",
}
MISMATCH_HINT = ("these weights files do not make one two-branch model as they are (the Head field applies to "
                 "both branches; auto proposes each branch's own head)")
MIN_SIDE = 32  # as import-model's --image-size


def _analyze_two(files: list[str], reference: list[str], options: dict, shapes: tuple, cancel) -> tuple[str, Any]:
    """Worker: ``("plans", (query plan, reference plan, shapes))`` of a two-branch import, or
    ``("error", exception)`` (a branch not recognized, or two embedding widths)."""
    from dmlviewer.core.models import CheckpointError, importing

    try:
        query, ref, sizes = importing.analyze_two_branch(
            files, reference, options, None, query_shape=shapes[0], reference_shape=shapes[1], cancel=cancel,
            not_given="the dialog's options are both branches'")
        importing.check_two_branch_plans(query, ref, hint=MISMATCH_HINT)
        return "plans", (query, ref, sizes)
    except (CheckpointError, FileNotFoundError, ValueError) as exc:
        return "error", exc


def _write_two(plans: tuple, out: str, checks: tuple = (None, None)) -> tuple[str, Any]:
    from dmlviewer.core.models import CheckpointError
    from dmlviewer.core.models.importing import write_two_branch_checkpoint

    query, ref, shapes = plans
    try:
        return "written", write_two_branch_checkpoint(query, ref, out, shapes, check_against=checks)
    except (CheckpointError, OSError, ValueError) as exc:
        return "write-error", exc


def _shape(text: str, field: str) -> tuple[int, int] | None:
    """``(h, w)`` from a side ``S`` or ``HxW`` (``parse_input_shape``), None for an empty field
    (the architecture's); ValueError naming ``field``."""
    if not text.strip():
        return None
    from dmlviewer.core.models.two_branch import parse_input_shape

    try:
        shape = parse_input_shape(text)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None
    if min(shape) < MIN_SIDE:
        raise ValueError(f"{field}: each side must be at least {MIN_SIDE} pixels, got {text.strip()[:40]}")
    return shape


def _write(plan, out: str, check: str | None = None) -> tuple[str, Any]:
    from dmlviewer.core.models import CheckpointError
    from dmlviewer.core.models.importing import write_checkpoint

    try:
        return "written", write_checkpoint(plan, out, check_against=check)
    except (CheckpointError, OSError, ValueError) as exc:
        return "write-error", exc


def write_error_text(exc: BaseException) -> str:
    """One line for a write that failed, in the dialog's words: a model whose embeddings differ
    from the user's names the fields to look at (the command line's names --force, which the
    dialog does not offer: clearing the check field writes without comparing)."""
    from dmlviewer.core.fields import worded
    from dmlviewer.core.models.importing import describe_reference_check

    check = getattr(exc, "reference_check", None)
    if check is not None:
        return (f"{describe_reference_check(check)}: not written. Check the Head field (its pooling), the input "
                "size and mean/std; or clear the check field to write it without comparing")
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or exc}"
    return worded(exc, FIELD_LABELS)


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
        self.plan = None  # the (query branch's) ImportPlan
        self.two_branch: tuple | None = None  # (query plan, reference plan, shapes) of a two-branch import
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
        from dmlviewer.core.models.importing import HEAD_SPEC_HELP

        self.head = QLineEdit("auto")
        self.head.setToolTip(HEAD_SPEC_HELP[0].upper() + HEAD_SPEC_HELP[1:])
        self.prefix = QLineEdit()
        self.prefix.setPlaceholderText("auto")
        self.prefix.setToolTip("Key prefix of the backbone, when the files hold several copies")
        self.image_size = QLineEdit()
        self.image_size.setPlaceholderText("default")
        self.image_size.setMaximumWidth(110)
        self.image_size.setToolTip("Input size the model expects: a side S (e.g. 224), or HxW (e.g. 64x256) for "
                                   "the query branch of a two-branch import; empty: the architecture's (224, or "
                                   "timm's)")
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
        self.reference = PathEdit("open", "Choose the reference branch's weights file", WEIGHTS_FILTER)
        self.reference.edit.setPlaceholderText("optional: the reference encoder's weights (e.g. aerial) "
                                               "→ one two-branch model")
        self.reference.setToolTip(
            "A two-branch (cross-view) model: the weights files above are the query branch (e.g. the street "
            "encoder), this file the reference branch (e.g. the aerial encoder): separate weights, one embedding "
            "space (both must give the same number of dimensions). The options above apply to both branches; "
            "the input size is each branch's own.")
        self.reference_size = QLineEdit()
        self.reference_size.setPlaceholderText("default")
        self.reference_size.setMaximumWidth(110)
        self.reference_size.setToolTip("The reference branch's input size: a side S (e.g. 128) or HxW; "
                                       "empty: its architecture's (224, or timm's)")
        reference_row = QHBoxLayout()
        reference_row.addWidget(self.reference, 1)
        reference_row.addWidget(QLabel("input size"))
        reference_row.addWidget(self.reference_size)
        form.addRow("Reference branch (optional)", reference_row)
        check_tip = ("A .npz (or .pt) holding 'images' (N x 3 x H x W, preprocessed as your model expects) and "
                     "'embeddings' (N x D: your model's outputs on them). The written model must reproduce "
                     "them (max relative difference 1e-4), else nothing is written.")
        self.check = PathEdit("open", "Choose the images and embeddings of your model", CHECK_FILTER)
        self.check.edit.setPlaceholderText("optional: .npz of images and your embeddings")
        self.check.setToolTip(check_tip)
        self.reference_check = PathEdit("open", "Choose the reference branch's images and embeddings", CHECK_FILTER)
        self.reference_check.edit.setPlaceholderText("optional: the same for the reference branch")
        self.reference_check.setToolTip(check_tip + " For the reference branch, with its own images.")
        checks_row = QHBoxLayout()
        checks_row.addWidget(self.check, 1)
        checks_row.addWidget(QLabel("reference"))
        checks_row.addWidget(self.reference_check, 1)
        form.addRow("Check against", checks_row)
        self.reference_check.setEnabled(False)  # until a reference branch is given
        self.reference.changed.connect(lambda *_: self.reference_check.setEnabled(bool(self.reference.text())))
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
                       self.image_size.textChanged, self.mean.textChanged, self.std.textChanged,
                       self.reference.changed, self.reference_size.textChanged):
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
        from dmlviewer.core.models.importing import candidate_names

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
    def reference_files(self) -> list[str]:
        """The reference branch's weights file: ``[]`` for a one-branch import."""
        text = self.reference.text()
        return [str(settings.expand_user(text))] if text else []

    def shapes(self) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
        """The query's and the reference's input sizes, ``(h, w)`` or None (ValueError, one line)."""
        return _shape(self.image_size.text(), "Input size"), _shape(self.reference_size.text(), "Reference input size")

    def options(self) -> dict:
        """The override fields as ``analyze`` keyword arguments (ValueError for a malformed one);
        ``image_size`` is the query's larger side."""
        arch = self.arch.currentText().strip()
        try:
            mean, std = _floats(self.mean.text()), _floats(self.std.text())
        except ValueError as exc:
            raise ValueError(f"mean/std: {exc}") from None
        shape = self.shapes()[0]
        return {
            "arch": None if arch in ("", AUTO, "auto") else arch,
            "head": self.head.text().strip() or "auto",
            "prefix": self.prefix.text().strip() or None,
            "image_size": max(shape) if shape else None,
            "mean": mean,
            "std": std,
        }

    def analyze(self) -> None:
        self._debounce.stop()
        self.plan = self.two_branch = None
        self._update_buttons()
        files = self.file_list()
        if not files:
            self.runner.cancel()
            self._show_message("Add the weights file(s) of your model.")
            return
        reference = self.reference_files()
        try:
            options, shapes = self.options(), self.shapes()
            if not reference and shapes[0] and shapes[0][0] != shapes[0][1]:
                raise ValueError(f"Input size {shapes[0][0]}x{shapes[0][1]}: a non-square input is for the query "
                                 "branch of a two-branch import (give a Reference branch file); give one side")
            if not reference and shapes[1]:
                raise ValueError("Reference input size: give a Reference branch weights file, or leave it empty")
        except ValueError as exc:
            self.runner.cancel()
            self._show_message(str(exc), error=True)
            return
        if reference:
            self._show_message("Recognizing both branches…")
            self.runner.submit(lambda cancel: _analyze_two(files, reference, options, shapes, cancel),
                               cancel_aware=True)
            return
        self._show_message("Recognizing…")
        self.runner.submit(lambda cancel: _analyze(files, options, cancel), cancel_aware=True)

    def _on_result(self, _request: int, value: object) -> None:
        kind, payload = value
        if kind == "plan":
            self._show_plan(payload)
        elif kind == "plans":
            self._show_plans(*payload)
        elif kind == "written":
            self._on_written(*payload)
        elif kind == "write-error":
            self._show_message(f"not written: {write_error_text(payload)}", error=True)
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
        self.summary.setPlainText(plan.report(names=FIELD_LABELS))
        rows = list(plan.head_mapping.items()) + list(plan.backbone_mapping.items())
        self._fill(self.mapping, rows)
        self._fill(self.unmatched, list(plan.unmatched.items()))
        self._fill(self.ranking, [(m.name, len(m.matched), len(m.matched) + len(m.missing) + len(m.mismatched),
                                   f"{m.jaccard:.2f}") for m in plan.ranking[:10]])
        self.tabs.setTabText(2, f"Unmatched ({len(plan.unmatched)})")
        self._update_buttons()

    def _show_plans(self, query, reference, shapes: dict) -> None:
        """A two-branch import: each branch's recognition, and its report as the CLI prints it."""
        from dmlviewer.core.models.importing import plan_dim, two_branch_report

        self.plan, self.two_branch = query, (query, reference, shapes)
        parts = []
        for side, plan in (("query", query), ("reference", reference)):
            (h, w), head = shapes[side], "proposed" if plan.head_auto else "given"
            parts.append(f"{side} <b>{plan.arch}</b> at {h}x{w} px, head ({head}) <code>{plan.head_spec}</code> → "
                         f"{plan.summary()}" + (f", <b>{len(plan.unmatched)} keys unmatched</b>"
                                                 if plan.unmatched else ""))
        self._show_message(f"Two-branch model, one space of {plan_dim(query)} dimensions: " + "; ".join(parts))
        self.summary.setPlainText(two_branch_report(query, reference, shapes, names=FIELD_LABELS))
        branches = (("query", query), ("reference", reference))
        self._fill(self.mapping, [(f"{side}: {src}", f"{side}.{dst}") for side, plan in branches
                                  for src, dst in [*plan.head_mapping.items(), *plan.backbone_mapping.items()]])
        unmatched = [(f"{side}: {key}", why) for side, plan in branches for key, why in plan.unmatched.items()]
        self._fill(self.unmatched, unmatched)
        self._fill(self.ranking, [(f"{side}: {m.name}", len(m.matched), len(m.matched) + len(m.missing)
                                   + len(m.mismatched), f"{m.jaccard:.2f}") for side, plan in branches
                                  for m in plan.ranking[:5]])
        self.tabs.setTabText(2, f"Unmatched ({len(unmatched)})")
        self._update_buttons()

    def _show_error(self, exc: BaseException) -> None:
        from dmlviewer.core.models.importing import LayoutError

        self.plan = self.two_branch = None
        from dmlviewer.core.fields import worded

        message = worded(exc, FIELD_LABELS) if not isinstance(exc, FileNotFoundError) else \
            f"file not found: {exc.filename or exc}"
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
        sources = self.file_list() + (self.reference_files() if self.two_branch else [])
        if out.is_dir() or any(Path(f).resolve() == out.resolve() for f in sources if out.exists()):
            self._show_message(f"{out} is a folder or one of the weights files: choose another name", error=True)
            return
        checks = [str(settings.expand_user(edit.text())) if edit.text() and edit.isEnabled() else None
                  for edit in (self.check, self.reference_check)]
        plan, two_branch = self.plan, self.two_branch
        self.import_button.setEnabled(False)
        self._show_message(f"Writing {out}" + (" after comparing the embeddings…" if any(checks) else "…"))
        if two_branch is not None:
            self.runner.submit(lambda: _write_two(two_branch, str(out), tuple(checks)))
        else:
            self.runner.submit(lambda: _write(plan, str(out), checks[0]))

    def written_text(self, path, diff: float) -> str:
        """What the written checkpoint was checked against: its folding, and the user's
        embeddings where a check file was given (per branch)."""
        from dmlviewer.core.models.importing import describe_reference_check

        plans = (("query branch", self.two_branch[0]), ("reference branch", self.two_branch[1])) \
            if self.two_branch is not None else (("", self.plan),)
        branches = "two branches; " if self.two_branch is not None else ""
        parts = [f"Wrote {path} ({branches}folding check {diff:.2g}: the folded head against its own source layers)"]
        for side, plan in plans:
            label = f"{side}: " if side else ""
            if plan.reference_check:
                parts.append(label + describe_reference_check(plan.reference_check))
            else:
                parts.append(f"{label}embeddings NOT compared with your model (give a Check against file)")
        return ". ".join(parts) + "."

    def _on_written(self, path, diff: float) -> None:
        self.written = str(path)
        text = self.written_text(path, diff)
        self._show_message(text)
        if self.main_window is not None and hasattr(self.main_window, "open_checkpoint"):
            if not self.main_window.open_checkpoint(str(path)):
                return
            if callable(getattr(self.main_window, "statusBar", None)):  # the dialog closes: the bar says it
                self.main_window.statusBar().showMessage(text, 30000)
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
