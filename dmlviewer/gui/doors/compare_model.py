"""Model B of a comparison (issue 24): the second model, in the session's ``"compare"`` slot.

File > Compare With Model opens a second model through any door (checkpoint, pretrained
backbone, code, recent models) in the background; the pair view shows it as a second row;
File > Stop Comparing empties the slot; Tools > Compare Models opens ``gui/evaluation/compare_window.py``.
File > Open Features for Model B and Compute Features for Model B (enabled while model B is
open) give model B its feature file, and the Retrieval panel then shows B's neighbours beside
A's (issue 41).
Only the newest model B asked for is shown: a load still running when another is asked for
(or comparing stops) is dropped when it arrives.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu

from dmlviewer.gui.window import settings
from dmlviewer.gui.doors.model_menus import ask_checkpoint

if TYPE_CHECKING:
    from dmlviewer.gui.evaluation.compare_window import CompareWindow

log = logging.getLogger(__name__)


class CompareModel(QObject):
    """Opens, shows and drops model B for ``window`` (the ``MainWindow``); owns File > Compare With Model (``menu``,
    its ``recent_menu``), File > Stop Comparing (``stop_action``) and Tools > Compare Models
    (``tool_window``, created on first use)."""

    _loaded = Signal(object)  # open(): (request, source, (model, info) or the exception)

    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self.window = window
        self.session = window.session
        self.tool_window: CompareWindow | None = None
        self.code_dialog = None  # File > Compare With Model > Model from Code, while open
        self.menu = QMenu("Compare &With Model", window)
        self.menu.setToolTip("Open a second model (B) beside the open one (A): both models' maps of "
                             "the same pair, and their difference")
        doors = (("Checkpoint…", self._ask_checkpoint),
                 ("Pretrained Backbone…", self._ask_pretrained),
                 ("Model from Code…", self._ask_code))
        for text, slot in doors:
            self.menu.addAction(text).triggered.connect(slot)
        self.recent_menu = self.menu.addMenu("Recent Models")
        self.recent_menu.setToolTipsVisible(True)
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        self.stop_action = QAction("Stop Comparing", window)
        self.stop_action.setEnabled(False)
        self.stop_action.triggered.connect(self.stop)
        self.open_features_action = QAction("Open Features for Model &B…", window)
        self.open_features_action.setToolTip("Open model B's HDF5 feature file: the Retrieval panel shows B's "
                                             "neighbours beside A's")
        self.open_features_action.triggered.connect(self._ask_features)
        self.compute_features_action = QAction("Compute Features for Model B", window)
        self.compute_features_action.setToolTip("Embed the open dataset with model B (background job): the "
                                                "Retrieval panel shows B's neighbours beside A's")
        self.compute_features_action.triggered.connect(lambda: window.jobs.extract_features("compare"))
        for action in (self.open_features_action, self.compute_features_action):
            action.setEnabled(False)
        self._loaded.connect(self._on_loaded)

    def install_tool(self) -> None:
        """Tools > Compare Models."""
        action = QAction("&Compare Models…", self.window)
        action.setToolTip("The pairs where the two open models (File ▸ Compare With Model) disagree most")
        action.triggered.connect(self.show_tool_window)
        self.window.add_tool_action(action)

    def open(self, source) -> None:
        """Open the model ``source`` (a ``ModelSource``, or a checkpoint path / ``imagenet:NAME``)
        in the background as model B; failures become dialogs."""
        from dmlviewer.core.models.source import ModelSource

        if not isinstance(source, ModelSource):
            source = ModelSource.from_text(str(source))
        device = self.window.device
        self.forget_loads()  # only the newest model B asked for is shown
        request = object()
        self.session.add_job(request, "open-compare", f"Loading model B {source.display()}")
        self.window.statusBar().showMessage(f"Loading model B {source.display()}…")

        def work() -> None:
            from dmlviewer.core.last_session import open_source

            try:
                result = open_source(source, device)
            except Exception as exc:  # noqa: BLE001 - reported on the GUI thread
                result = exc
            try:
                self._loaded.emit((request, source, result))
            except RuntimeError:  # the window is gone
                pass

        threading.Thread(target=work, name="dmlviewer-open-compare", daemon=True).start()

    def _on_loaded(self, value) -> None:
        from dmlviewer.core.last_session import kind_words

        request, source, result = value
        if self.session.end_job(request) is None:  # forgotten: another model B (or none) was asked for meanwhile
            log.info("dropped model B %s: another one was asked for meanwhile", source.display())
            return
        self.window.statusBar().clearMessage()
        if isinstance(result, BaseException):
            self.window.opening.report_model_error(f"Cannot compare with {kind_words(source.kind)}", result, source)
            return
        model, info = result
        settings.add_recent_model(source, self.window.settings, info)
        self.use(model, info, source)

    def use(self, model, info: dict, source=None) -> None:
        """Show ``model`` (``info`` from ``open_model``) as model B beside the open model."""
        from dmlviewer.core.models.source import ModelSource

        source = source or info.get("model_source") or ModelSource("python", label=type(model).__name__)
        self.session.set_model(model, {**info, "label": source.display()}, source, slot="compare")

    def stop(self) -> None:
        """File > Stop Comparing: model B goes, the pair view shows one row again (a model B
        still loading is dropped when it arrives)."""
        self.forget_loads()
        self.session.set_model(None, slot="compare")

    def forget_loads(self) -> None:
        """Model B loads still running are dropped when they arrive (their jobs are forgotten)."""
        for request, entry in list(self.session.jobs.items()):
            if entry.kind == "open-compare":
                self.session.end_job(request)

    def show_tool_window(self) -> CompareWindow:
        """Tools > Compare Models (gui/evaluation/compare_window.py), created on first use."""
        from dmlviewer.gui.evaluation.compare_window import CompareWindow

        window = self.window
        if self.tool_window is None:
            self.tool_window = CompareWindow(window, window)
            self.tool_window.setWindowFlag(Qt.Window)
            self.tool_window.pair_chosen.connect(lambda *_: window.tabs.setCurrentWidget(window.pair_view))
        self.tool_window.refresh()
        self.tool_window.show()
        self.tool_window.raise_()
        return self.tool_window

    def on_changed(self) -> None:
        """Session event: model B changed (or went): the pair view's second row follows."""
        window = self.window
        slot = self.session.slot("compare")
        for action in (self.stop_action, self.open_features_action, self.compute_features_action):
            action.setEnabled(slot is not None)
        window.pair_view.set_compare_model(None if slot is None else slot.model, window.device,
                                           "" if slot is None else window.labels.display_name("compare"))
        window._on_similarity(window.pair_view.explanation.similarity if window.pair_view.state == "ready" else None)

    def _ask_features(self) -> None:
        from PySide6.QtWidgets import QFileDialog

        window = self.window
        start = settings.start_dir(self.session.slot_features["compare"].path or window.features_path,
                                   *settings.recent("features", window.settings), settings=window.settings)
        path, _ = QFileDialog.getOpenFileName(window, "Open features of model B", start,
                                              "HDF5 features (*.h5 *.hdf5);;All files (*)")
        if path:
            window.open_features(path, "compare")

    def _ask_checkpoint(self) -> None:
        path = ask_checkpoint(self.window, "Compare with checkpoint (model B)")
        if path:
            self.open(path)

    def _ask_pretrained(self) -> None:
        from PySide6.QtWidgets import QDialog

        from dmlviewer.core.models import PRETRAINED_PREFIX
        from dmlviewer.gui.doors.pretrained_dialog import PretrainedDialog

        dialog = PretrainedDialog(self.window)
        dialog.setWindowTitle("Compare With Pretrained Backbone")
        if dialog.exec() == QDialog.Accepted and dialog.choice:
            self.open(PRETRAINED_PREFIX + dialog.choice)

    def _ask_code(self) -> None:
        """Model B from code and weights (gui/doors/code_model_dialog.py), opened in the background."""
        from dmlviewer.gui.doors.code_model_dialog import CodeModelDialog

        dialog = CodeModelDialog(self.window)
        dialog.setWindowTitle("Compare With Model from Code")
        dialog.source_chosen.connect(self.open)
        dialog.setAttribute(Qt.WA_DeleteOnClose)
        dialog.open()
        self.code_dialog = dialog

    def _fill_recent(self) -> None:
        from dmlviewer.core.models.naming import full_description

        menu = self.recent_menu
        menu.clear()
        window = self.window
        live = window.model_menus.live_models
        sources = settings.recent_models(window.settings)
        for model, info, source in reversed(live):
            action = menu.addAction(f"{source.display()} (Python module, until you quit)")
            action.triggered.connect(lambda _=False, m=model, i=info, s=source: self.use(m, i, s))
        for source, name in zip(sources, settings.recent_model_names(sources, window.settings)):
            action = menu.addAction(name)
            action.setToolTip(full_description(source))
            action.setStatusTip(full_description(source))
            action.triggered.connect(lambda _=False, s=source: self.open(s))
        if not sources and not live:
            menu.addAction("(none)").setEnabled(False)
