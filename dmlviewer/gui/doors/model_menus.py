"""The File menu's doors to model A: open a checkpoint, import, a pretrained backbone, a model
from code, and Recent Models.

Recent Models lists every kind of model source (``settings.recent_models``), reopened as what
it is in the background, and the live Python modules shown in this process (``live_models``,
kept until the app quits: the last session cannot reopen them). The window opens what is
chosen (``open_checkpoint``, ``open_in_background``, ``use_model``).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QIcon, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMenu

from dmlviewer.gui.window import settings


class ModelMenus:
    """File > Open Checkpoint (``open_checkpoint_action``), Recent Models (``recent_models_menu``),
    Import Model, Open Pretrained Backbone (``open_pretrained_action``) and Open Model from Code
    (``open_code_action``; its dialog ``code_dialog`` while open) of ``window`` (the
    ``MainWindow``)."""

    def __init__(self, window: Any, icon: QIcon) -> None:
        from dmlviewer.gui.doors.import_dialog import import_action
        from dmlviewer.gui.doors.pretrained_dialog import pretrained_action

        self.window = window
        self.live_models: list[tuple] = []  # (model, info, source) of live modules shown in this process
        self.code_dialog = None
        self.open_checkpoint_action = QAction(icon, "Open &Checkpoint…", window)
        self.open_checkpoint_action.setShortcut(QKeySequence("Ctrl+K"))
        self.open_checkpoint_action.triggered.connect(self._ask_checkpoint)
        self.recent_models_menu = QMenu("Recent &Models", window)
        self.recent_models_menu.setToolTipsVisible(True)  # each entry's whole path
        self.recent_models_menu.aboutToShow.connect(self._fill_recent_models)
        self.import_action = import_action(window)
        self.open_pretrained_action = pretrained_action(window)
        self.open_code_action = QAction("Open Model from &Code…", window)
        self.open_code_action.setToolTip("Build the architecture with your own Python (file.py:NAME or "
                                         "package.module:NAME) and load its weights file")
        self.open_code_action.triggered.connect(self._ask_code_model)

    def add_to(self, menu: QMenu) -> None:
        """Add the doors to ``menu`` (the File menu), in their order."""
        menu.addAction(self.open_checkpoint_action)
        menu.addMenu(self.recent_models_menu)
        menu.addAction(self.import_action)
        menu.addAction(self.open_pretrained_action)
        menu.addAction(self.open_code_action)

    def remember_live(self, model, info: dict, source) -> None:
        """A live module shown now: in Recent Models for the lifetime of this process."""
        self.live_models = [entry for entry in self.live_models if entry[0] is not model][-4:]  # five at most
        self.live_models.append((model, info, source))

    def _ask_checkpoint(self) -> None:
        path = ask_checkpoint(self.window, "Open checkpoint")
        if path:
            self.window.open_checkpoint(path)

    def _fill_recent_models(self) -> None:
        """Recent Models: every kind of source, reopened as what it is (in the background)."""
        from dmlviewer.core.models.naming import full_description
        from dmlviewer.core.last_session import kind_words

        window, menu = self.window, self.recent_models_menu
        menu.clear()
        sources = settings.recent_models(window.settings)
        for model, info, source in reversed(self.live_models):
            action = menu.addAction(f"{source.display()} (Python module, until you quit)")
            action.triggered.connect(lambda _=False, m=model, i=info, s=source: window.use_model(m, i, source=s))
        if not sources and not self.live_models:
            menu.addAction("(none)").setEnabled(False)
            return
        for source, name in zip(sources, settings.recent_model_names(sources, window.settings)):
            action = menu.addAction(name)
            action.setToolTip(full_description(source))
            action.setStatusTip(f"{kind_words(source.kind)}: {full_description(source)}")
            action.triggered.connect(lambda _=False, s=source: window.open_in_background(model=s))
        menu.addSeparator()
        menu.addAction("Clear").triggered.connect(lambda: settings.clear_recent_models(window.settings))

    def _ask_code_model(self) -> None:
        """File > Open Model from Code (gui/doors/code_model_dialog.py); opened in the background."""
        from dmlviewer.gui.doors.code_model_dialog import CodeModelDialog

        window = self.window
        source = window.model_source
        dialog = CodeModelDialog(window, source=source if getattr(source, "kind", "") == "code" else None)
        dialog.source_chosen.connect(lambda chosen: window.open_in_background(model=chosen))
        dialog.setAttribute(Qt.WA_DeleteOnClose)
        dialog.open()
        self.code_dialog = dialog


def ask_checkpoint(window: Any, title: str) -> str:
    """A checkpoint file chosen in a file dialog titled ``title``, starting where the open or a
    recent checkpoint lies ("" when cancelled): model A's and model B's File-menu entries."""
    recent = [s.path for s in settings.recent_models(window.settings) if s.kind == "checkpoint"]
    start = settings.start_dir(window.checkpoint_path, *recent, settings=window.settings)
    path, _ = QFileDialog.getOpenFileName(window, title, start, "Checkpoints (*.pt *.pth);;All files (*)")
    return path
