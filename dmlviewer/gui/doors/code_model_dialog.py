"""File > Open Model from Code: the code-and-weights door of the app (issue 22 item 1).

The architecture comes from the user's own Python, the way timm, Lightning and OML build their
models: a callable named ``file.py:NAME`` or ``package.module:NAME``, called with keyword
arguments (JSON), then a weights file read with ``weights_only=True``, and optionally the layer
whose map is explained. The dialog says plainly that the file is run as Python code, as running
one's own script does. The names offered for the callable are read from the file's syntax tree
(nothing is run before Open). The fields are checked when Open is pressed, never per keystroke;
Open emits a ``ModelSource(kind="code")`` that the main window opens in the background and
remembers in the recent models and the last session.

Two branches (issue 25): a callable that returns a ``(query, reference)`` pair of modules opens
as a two-branch (cross-view) model; the optional Reference weights field gives the reference
branch's file (the Weights file then holds the query branch's; without it the Weights file holds
both, keys ``query.``/``reference.``) and Input shapes the two branches' inputs (``64x256,128``).
Whether the callable returns two modules is only known once it is run, so the fields are always
there and a note says when they apply; a one-module callable with them is refused on Open.

Preprocessing (issue 31 item 7): Input size, Mean and Std give how images are prepared for the
model, as ``import-model --image-size/--mean/--std`` do for a checkpoint; left empty, the
module's own input size (else 224 px) and ImageNet's mean and std are assumed, and the dialog
says which. An error shown under the fields goes as soon as a field changes; the fields of the
last Open are kept in the settings and filled in on the next start.
"""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, QLayout, QLineEdit,
                               QVBoxLayout, QWidget)

from dmlviewer.gui.window import settings
from dmlviewer.gui.common.widgets import PathEdit

log = logging.getLogger(__name__)

PYTHON_FILTER = "Python files (*.py);;All files (*)"
WEIGHTS_FILTER = "Weights (*.pth *.pt *.bin *.ckpt *.safetensors);;All files (*)"
#: Largest module file whose names are listed (its syntax tree is parsed, not run).
_MAX_SOURCE_BYTES = 2_000_000

#: The sentence that says what Open does with the file.
#: The note under the two-branch fields.
TWO_BRANCH_NOTE = ("Two-branch (cross-view) models: when the function returns a (query, reference) pair of "
                   "modules, the Reference weights file holds the reference branch (then the Weights file holds "
                   "the query branch; leave it empty when one file holds both, keys query.* and reference.*), and "
                   "Input shapes gives each branch's input, e.g. 64x256,128 (and Feature layer may name one layer per "
                   "branch: query_layer,reference_layer). Leave both empty for one module.")
RUNS_CODE = ("Open runs this file (or imports this module) as Python code, just as running your own "
             "script would: open only code you trust. The weights file is read as tensors only, "
             "nothing in it is run.")


#: Where the fields of the last Open are kept (as the training dialog keeps its settings).
LAST_FIELDS_KEY = "code_model/last_fields"
#: The fields kept, by attribute name.
FIELDS = ("module", "name", "args", "weights", "feature_layer", "reference_weights", "input_shapes", "size",
          "mean", "std")


def callables_in(path: str | Path) -> list[str]:
    """The public top-level functions and classes of the Python file ``path``, read from its
    syntax tree without running it (``[]`` when it cannot be read or parsed)."""
    path = Path(path)
    try:
        if path.suffix != ".py" or not path.is_file() or path.stat().st_size > _MAX_SOURCE_BYTES:
            return []
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return []
    return [node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")]


def _existing_file(text: str, what: str) -> str:
    """The absolute path of the file a field names ("" for an empty field); ValueError when it
    is not there."""
    if not text.strip():
        return ""
    path = settings.expand_user(text.strip())
    if not path.is_file():
        raise ValueError(f"the {what} {path} does not exist")
    return str(path.resolve())


def _numbers(text: str, what: str, positive: bool = False) -> list[float] | None:
    """Three numbers (R, G, B) from a field ("0.5, 0.5, 0.5"; one number for all three), None
    for an empty field; ValueError naming the field otherwise."""
    parts = [p for p in text.replace(",", " ").split() if p]
    if not parts:
        return None
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"{what}: give three numbers (R, G, B), e.g. 0.485, 0.456, 0.406") from None
    if len(values) == 1:
        values *= 3
    if len(values) != 3 or not all(abs(v) <= 1e3 for v in values) or (positive and not all(v > 0 for v in values)):
        raise ValueError(f"{what}: give three numbers (R, G, B){', each above 0' if positive else ''}, "
                         f"e.g. 0.229, 0.224, 0.225")
    return values


def assumed_preprocessing(size: str = "", mean: str = "", std: str = "") -> str:
    """What the app assumes for a code model from the dialog's preprocessing fields, in words."""
    side = f"{size.strip()} px" if size.strip() else "the module's own input size (else 224 px)"
    try:
        m, s = _numbers(mean, "mean"), _numbers(std, "std", positive=True)
    except ValueError:
        m = s = None
    norm = ("ImageNet mean and std" if m is None and s is None else
            f"mean {', '.join(f'{v:g}' for v in m) if m else 'ImageNet'}, "
            f"std {', '.join(f'{v:g}' for v in s) if s else 'ImageNet'}")
    return f"Preprocessing: images are stretched to {side} and normalized with {norm}."


def code_source(module: str, name: str, args_text: str = "", weights: str = "", feature_layer: str = "",
                reference_weights: str = "", input_shapes: str = "", size: str = "", mean: str = "",
                std: str = ""):
    """A ``ModelSource(kind="code")`` from the dialog's fields; ``ValueError`` with one line
    saying which field to change (``reference_weights`` and ``input_shapes``: a two-branch
    model's, see the module docstring; ``size``, ``mean`` and ``std``: the preprocessing)."""
    from dmlviewer.core.models.source import ModelSource
    from dmlviewer.core.models.two_branch import parse_input_shapes

    module, name = module.strip(), name.strip()
    head, sep, tail = module.rpartition(":")
    if sep and tail.isidentifier() and (head.endswith(".py") or all(p.isidentifier() for p in head.split("."))):
        module, name = head, tail  # "file.py:NAME" or "package.module:NAME" typed in one field
    if not module:
        raise ValueError("choose the Python file (file.py) or type the module (package.module) that builds the model")
    if module.endswith(".py"):
        file = settings.expand_user(module)
        if not file.is_file():
            raise ValueError(f"the Python file {file} does not exist")
        module = str(file.resolve())
    elif not all(part.isidentifier() for part in module.split(".")):
        raise ValueError(f"{module[:80]!r} is neither a .py file nor a module name like package.module")
    if not name.isidentifier():
        raise ValueError("name the function or class that returns the model (e.g. build_model)")
    args: dict = {}
    if args_text.strip():
        try:
            args = json.loads(args_text)
        except ValueError as exc:
            raise ValueError(f"the keyword arguments are not JSON: {exc}") from None
        if not isinstance(args, dict):
            raise ValueError('the keyword arguments must be a JSON object, e.g. {"num_classes": 0}')
    weights = _existing_file(weights, "weights file")
    reference_weights = _existing_file(reference_weights, "reference weights file")
    options = {"feature_layer": feature_layer.strip()} if feature_layer.strip() else {}
    if input_shapes.strip():
        try:
            options["input_shapes"] = [list(shape) for shape in parse_input_shapes(input_shapes)]
        except ValueError as exc:
            raise ValueError(f"input shapes: {exc}") from None
    if size.strip():
        try:
            side = int(size.strip())
        except ValueError:
            side = 0
        if not 8 <= side <= 4096:
            raise ValueError(f"input size: give a side in pixels from 8 to 4096, e.g. 224 (got {size.strip()[:20]!r})")
        options["size"] = side
    for key, text in (("mean", mean), ("std", std)):
        values = _numbers(text, key, positive=key == "std")
        if values is not None:
            options[key] = values
    return ModelSource("code", entry=f"{module}:{name}", args=args, weights=weights or None, options=options,
                       reference_weights=reference_weights or None)


class CodeModelDialog(QDialog):
    """The dialog (see the module docstring); ``source_chosen(ModelSource)`` on Open."""

    source_chosen = Signal(object)

    def __init__(self, parent: QWidget | None = None, source=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Open Model from Code")
        self.source = None
        warning = QLabel(RUNS_CODE)
        warning.setWordWrap(True)
        warning.setObjectName("runsCode")
        self.module = PathEdit("file", "Python file that builds the model", PYTHON_FILTER)
        self.module.edit.setPlaceholderText("my_models.py, or package.module")
        self.module.changed.connect(self._list_names)
        self.name = QComboBox()
        self.name.setEditable(True)
        self.name.lineEdit().setPlaceholderText("build_model")
        self.name.setToolTip("The function or class that returns the torch.nn.Module")
        self.args = QLineEdit()
        self.args.setPlaceholderText('{"num_classes": 0}   (JSON, optional)')
        self.weights = PathEdit("file", "Weights file (optional)", WEIGHTS_FILTER)
        self.weights.edit.setPlaceholderText("optional: a state dict, read as tensors only")
        self.feature_layer = QLineEdit()
        self.feature_layer.setPlaceholderText("optional: automatic (the last spatial map)")
        self.reference_weights = PathEdit("file", "Reference branch weights file (optional)", WEIGHTS_FILTER)
        self.reference_weights.edit.setPlaceholderText("two-branch models only: the reference branch's weights")
        self.input_shapes = QLineEdit()
        self.input_shapes.setPlaceholderText("two-branch models only: query,reference e.g. 64x256,128")
        self.size_edit = QLineEdit()
        self.size_edit.setPlaceholderText("optional: the module's own, else 224")
        self.size_edit.setToolTip("The side, in pixels, images are stretched to (as import-model --image-size)")
        self.mean_edit = QLineEdit()
        self.mean_edit.setPlaceholderText("optional: ImageNet's 0.485, 0.456, 0.406")
        self.mean_edit.setToolTip("The input's mean per RGB channel, on a 0-1 scale (as import-model --mean)")
        self.std_edit = QLineEdit()
        self.std_edit.setPlaceholderText("optional: ImageNet's 0.229, 0.224, 0.225")
        self.std_edit.setToolTip("The input's standard deviation per RGB channel, on a 0-1 scale (as import-model --std)")
        self.preprocessing = QLabel()
        self.preprocessing.setWordWrap(True)
        self.preprocessing.setObjectName("assumedPreprocessing")
        two_note = QLabel(TWO_BRANCH_NOTE)
        two_note.setWordWrap(True)
        two_note.setObjectName("twoBranchNote")
        form = QFormLayout()
        form.addRow("Python file or module", self.module)
        form.addRow("Function or class", self.name)
        form.addRow("Keyword arguments", self.args)
        form.addRow("Weights file", self.weights)
        form.addRow("Feature layer", self.feature_layer)
        form.addRow("Reference weights", self.reference_weights)
        form.addRow("Input shapes", self.input_shapes)
        form.addRow(two_note)
        form.addRow("Input size", self.size_edit)
        form.addRow("Mean", self.mean_edit)
        form.addRow("Std", self.std_edit)
        form.addRow(self.preprocessing)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #eb5757")
        self.error.hide()
        self.buttons = QDialogButtonBox(QDialogButtonBox.Open | QDialogButtonBox.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(warning)
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)
        # The dialog grows with its wrapped notes and the error (never cuts them off).
        layout.setSizeConstraint(QLayout.SetMinimumSize)
        if source is not None and source.kind == "code":
            self.set_source(source)
        else:
            self.restore_fields()
        for edit in (self.args, self.feature_layer, self.input_shapes, self.size_edit, self.mean_edit, self.std_edit):
            edit.textChanged.connect(self._fields_changed)
        for path in (self.module, self.weights, self.reference_weights):
            path.changed.connect(self._fields_changed)
        self.name.editTextChanged.connect(self._fields_changed)
        self._show_preprocessing()
        # At its size hint the fields cut their placeholders and paths off after ~15 characters.
        self.resize(max(self.sizeHint().width(), 640), self.sizeHint().height())
        self._fit_height()

    def _fit_height(self) -> None:
        """Tall enough at its width for every wrapped note and the error (none cut off)."""
        layout = self.layout()
        needed = layout.heightForWidth(self.width()) if layout.hasHeightForWidth() else layout.sizeHint().height()
        if needed > self.height():
            self.resize(self.width(), needed)

    def fields(self) -> dict[str, str]:
        """Every field's text, by :data:`FIELDS` name."""
        return {key: (self.name.currentText() if key == "name" else self._edit(key).text()) for key in FIELDS}

    def _edit(self, key: str):
        """The line edit of field ``key`` (the size, mean and std edits are ``*_edit``: a
        dialog attribute named ``size`` would hide ``QWidget.size()``)."""
        return getattr(self, f"{key}_edit" if key in ("size", "mean", "std") else key)

    def set_fields(self, values: dict) -> None:
        for key in FIELDS:
            value = values.get(key)
            if not isinstance(value, str):
                continue
            if key == "name":
                self.name.setEditText(value)
            else:
                self._edit(key).setText(value)

    def restore_fields(self) -> None:
        """The fields of the last Open (settings), when there are any."""
        try:
            values = json.loads(str(settings.app_settings().value(LAST_FIELDS_KEY, "") or "{}"))
        except ValueError:
            values = {}
        if isinstance(values, dict):
            self.set_fields(values)

    def _fields_changed(self, *_args) -> None:
        """A field changed: the error it may have caused goes, the preprocessing note follows."""
        if not self.error.isHidden():
            self.error.hide()
            self.error.clear()
        self._show_preprocessing()

    def _show_preprocessing(self) -> None:
        self.preprocessing.setText(assumed_preprocessing(self.size_edit.text(), self.mean_edit.text(), self.std_edit.text()))

    def set_source(self, source) -> None:
        """Fill the fields from a code ``ModelSource``."""
        module, _, name = (source.entry or "").rpartition(":")
        self.module.setText(module)
        self.name.setEditText(name)
        self.args.setText(json.dumps(source.args) if source.args else "")
        self.weights.setText(source.weights or "")
        self.feature_layer.setText(str(source.options.get("feature_layer") or ""))
        self.reference_weights.setText(source.reference_weights or "")
        shapes = source.options.get("input_shapes") or []
        self.input_shapes.setText(",".join(f"{s[0]}x{s[1]}" if isinstance(s, list) else str(s) for s in shapes))
        self.size_edit.setText(str(source.options.get("size") or ""))
        for key in ("mean", "std"):
            values = source.options.get(key)
            self._edit(key).setText(", ".join(f"{float(v):g}" for v in values) if values else "")

    def _list_names(self) -> None:
        """Offer the file's public functions and classes (read from its syntax tree)."""
        current = self.name.currentText()
        names = callables_in(self.module.text().rpartition(":")[0] if ":" in self.module.text()
                             and not self.module.text().endswith(".py") else self.module.text())
        self.name.blockSignals(True)
        self.name.clear()
        self.name.addItems(names)
        builder = next((n for n in names if n.lower().startswith(("build", "create", "make", "get"))),
                       names[0] if names else current)
        self.name.setEditText(current if current in names or not names else builder)
        self.name.blockSignals(False)

    def accept(self) -> None:
        """Check the fields (only now), then emit the source and close."""
        try:
            self.source = code_source(self.module.text(), self.name.currentText(), self.args.text(),
                                      self.weights.text(), self.feature_layer.text(),
                                      self.reference_weights.text(), self.input_shapes.text(),
                                      self.size_edit.text(), self.mean_edit.text(), self.std_edit.text())
        except ValueError as exc:
            self.error.setText(str(exc))
            self.error.show()
            self._fit_height()  # room for the error line: the notes above keep theirs
            return
        self.error.hide()
        settings.app_settings().setValue(LAST_FIELDS_KEY, json.dumps(self.fields()))
        super().accept()
        self.source_chosen.emit(self.source)
