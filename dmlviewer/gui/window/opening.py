"""Opening what the main window shows: a dataset folder, a model (checkpoint, pretrained
backbone, code and weights) and a feature file, into the window's session.

``open_*`` read on the GUI thread with a busy cursor (a listing or a state dict takes well
under a second); ``open_in_background`` reads them on a thread (the torch import, the model,
the listing, the last session) and applies them here as ``open_*`` would. A model that cannot
be opened is said in a dialog; a bare state dict is offered to File > Import Model instead.
The window keeps its ``open_*`` methods for their callers (tests, scripts, the menus).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QApplication, QMessageBox

from dmlviewer.gui.common import errors
from dmlviewer.gui.window import settings

log = logging.getLogger(__name__)


class Opening(QObject):
    """Opens files into the session of ``window`` (the ``MainWindow``); ``loading`` is True
    while ``open_in_background``'s thread reads. The Import offer and dialog are kept as
    ``window.import_offer`` and ``window.import_dialog``."""

    _loaded = Signal(object)  # open_in_background: what the loading thread read
    _loading_step = Signal(str)

    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self.window = window
        self.loading = False  # files being read by open_in_background
        self._loaded.connect(self._on_loaded)
        self._loading_step.connect(self._on_loading_step)

    def open_dataset(self, path: str | Path, fmt: str | None = None) -> bool:
        """Open a dataset folder; ``fmt`` overrides format detection. False (and a dialog) on error."""
        from dmlviewer.core.data import open_dataset

        from dmlviewer.core.data.identity import listing_fingerprint

        path = str(Path(path).expanduser())
        try:
            with _busy():
                dataset = open_dataset(path, format=fmt)
                listing_fingerprint(dataset)  # its identity (one stat a file), kept on it for the session
        except Exception as exc:  # noqa: BLE001 - every failure reaches the user
            errors.report_exception(self.window, "Cannot open dataset", exc, path=path)
            return False
        self._apply_dataset(dataset, path, fmt)
        return True

    def _apply_dataset(self, dataset, path: str, fmt: str | None, previous=None) -> None:
        """``previous``: the last session as read before anything was opened (default: now)."""
        if previous is None:
            previous = self._last_session()  # read before the session (and so the settings) change
        self.window.session.set_dataset(dataset, path, fmt)
        settings.add_recent("datasets", path, self.window.settings)
        if not self.window.pairs.restore(previous):
            self.window.pairs.choose_default()

    def open_checkpoint(self, path: str | Path) -> bool:
        """Load a checkpoint (or ``imagenet:BACKBONE``, a pretrained backbone) on the selected
        device. False (and a dialog) on error."""
        from dmlviewer.core.models.source import ModelSource

        return self.open_model_source(ModelSource.from_text(str(path)))

    def open_model_source(self, source) -> bool:
        """Open the model ``source`` (a ``core.models.source.ModelSource``: a checkpoint,
        ``imagenet:NAME``, or code and weights) on this thread with a busy cursor, remember it in
        the recent models, and show it. False (and a dialog) on error; ``open_in_background(model=)``
        does the same without blocking the window."""
        from dmlviewer.core.last_session import kind_words, open_source

        try:
            with _busy():
                model, info = open_source(source, self.window.device)
        except Exception as exc:  # noqa: BLE001
            self.report_model_error(f"Cannot open {kind_words(source.kind)}", exc, source)
            return False
        self._model_opened(model, info, source)
        return True

    def _model_opened(self, model, info: dict, source) -> None:
        settings.add_recent_model(source, self.window.settings, info)
        self.window.use_model(model, info, source.display(), source=source)
        if source.kind == "code":  # nothing recorded it: say which preprocessing is assumed (issue 31 item 7)
            from dmlviewer.core.models.naming import describe_preprocessing

            self.window.statusBar().showMessage(f"{self.window.labels.display_name()}: preprocessing assumed "
                                                f"{describe_preprocessing(getattr(model, 'config', None))} (File ▸ "
                                                "Open Model from Code sets input size, mean and std)", 20000)

    def report_model_error(self, title: str, exc: BaseException, source=None) -> None:
        """A model that could not be opened: a dialog; a bare state dict (weights without an
        architecture) is offered to File > Import Model instead (issue 23 item 9)."""
        if getattr(exc, "bare_state_dict", False) and source is not None and source.kind == "checkpoint":
            self.offer_import(source.path)
            return
        path = None if source is None else (source.path if source.kind == "checkpoint" else source.weights)
        errors.report_exception(self.window, title, exc, path=path)

    def offer_import(self, path: str) -> QMessageBox:
        """Say that ``path`` holds weights without an architecture and offer to import it
        (the Import Model dialog, prefilled with the file). Window-modal, never blocking."""
        box = QMessageBox(QMessageBox.Information, "Import this model?",
                          f"{Path(path).name} holds only the weights of a network (a state dict), not a "
                          "dmlviewer checkpoint, so it cannot be opened directly.", QMessageBox.Cancel, self.window)
        box.setInformativeText("File ▸ Import Model recognizes its architecture (torchvision, timm, "
                               "pytorch-metric-learning …), writes a dmlviewer checkpoint and opens it.")
        button = box.addButton("Import…", QMessageBox.AcceptRole)
        box.setDefaultButton(button)
        button.clicked.connect(lambda: self.open_import_dialog([path]))
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.open()
        self.window.import_offer = box
        return box

    def open_import_dialog(self, files: list[str] | None = None):
        """File > Import Model, prefilled with ``files``."""
        from dmlviewer.gui.doors.import_dialog import ImportDialog

        dialog = ImportDialog(self.window, files=files)
        dialog.setAttribute(Qt.WA_DeleteOnClose)
        dialog.open()
        self.window.import_dialog = dialog
        return dialog

    def open_features(self, path: str | Path, slot: str = "primary") -> bool:
        """Open an HDF5 feature file for retrieval with ``slot``'s model (``"compare"``: model
        B's neighbours beside model A's). False (and a dialog) on error."""
        from dmlviewer.core.evaluate import open_features

        path = str(Path(path).expanduser())
        try:
            with _busy():
                features = open_features(path)  # lazy: rows are read when needed
        except Exception as exc:  # noqa: BLE001
            errors.report_exception(self.window, "Cannot open features", exc, path=path)
            return False
        self._apply_features(features, path, slot)
        return True

    def _apply_features(self, features, path: str, slot: str = "primary") -> None:
        self.window.session.set_features(features, path, chosen=True, slot=slot)
        settings.add_recent("features", path, self.window.settings)
        mismatch = self.window.retrieval.mismatch(slot)
        if mismatch:
            self.window.statusBar().showMessage(f"{Path(path).name}: {mismatch}", 15000)

    def open_in_background(self, dataset: str | None = None, fmt: str | None = None,
                           checkpoint=None, features: str | None = None,
                           demo: Callable[[], tuple] | None = None, model=None,
                           last_session: dict | None = None) -> None:
        """Open these files without blocking the window: a thread reads them (the torch import,
        the model, the listing), then they are applied here as ``open_*`` would. ``checkpoint``:
        a path or ``imagenet:NAME``; ``model``: a ``ModelSource`` (code and weights …), or its
        dict. ``last_session``: the raw settings of the last session
        (``settings.session_values()``), reopened as they were (each model source as what it
        is); when it names no dataset that still exists, ``demo`` is opened instead. ``demo``: a
        function giving ``(dataset folder, checkpoint or None)`` (the app's ``demo_paths``,
        which may first generate the data). Failures become dialogs that say what could not be
        opened. ``loading`` is True meanwhile."""
        self.loading = True
        self.window.pair_view.info.setText("Loading…")
        self.window.statusBar().showMessage("Loading…")
        device = self.window.device
        if checkpoint and model is None:
            model = checkpoint

        def step(text: str) -> None:
            try:
                self._loading_step.emit(text)
            except RuntimeError:  # the window is gone
                pass

        def work() -> None:
            from dmlviewer.core.last_session import read_session_files  # torch: imported in this thread

            result = read_session_files(dataset, fmt, model, features, last_session, demo, device, step)
            try:
                self._loaded.emit(result)
            except RuntimeError:
                pass

        threading.Thread(target=work, name="dmlviewer-open", daemon=True).start()

    def _on_loading_step(self, text: str) -> None:
        if self.loading:
            self.window.statusBar().showMessage(text)
            self.window.pair_view.info.setText(text)

    def _on_loaded(self, result: dict) -> None:
        window = self.window
        self.loading = False
        window.statusBar().clearMessage()
        previous = self._last_session()  # its pair, before the model and dataset below rewrite it
        if "model" in result:
            (model, info), source = result["model"]
            self._model_opened(model, info, source)
        if "dataset" in result:
            dataset, path = result["dataset"]
            self._apply_dataset(dataset, path, result["format"], previous)
        if "features" in result:
            features, path = result["features"]
            self._apply_features(features, path)
        if "compare" in result and window.model is not None:  # the last session's model B (issue 24)
            (model, info), source = result["compare"]
            window.compare.forget_loads()  # a File > Compare With Model still loading is older than this
            window.compare.use(model, info, source)
            if "compare_features" in result:  # model B's remembered file, read as fitting it and the dataset
                features, path = result["compare_features"]
                self._apply_features(features, path, "compare")
        if window.dataset is None and window.model is None:
            window.pair_view.set_pair(None)
        if window.pair_view.images is not None:  # the pair's own line again, never "Loading the model …"
            window.pair_view.refresh_info()
        else:  # no pair could be shown: say what to do, not "Loading…"
            window.pair_view.info.setText("Choose a query (click) and a reference (Ctrl+click) in the dataset."
                                          if window.dataset is not None else
                                          "Open a dataset and a checkpoint, then choose a query and a reference.")
        for title, exc, source in result["errors"]:
            self.report_model_error(title, exc, source)
        # What could not be opened stays said in the status bar too (never a silent "no model").
        said = [f"{title}: {errors.user_message(exc)}" for title, exc, _ in result["errors"][:1]]
        said += [result["notice"]] if result.get("notice") else []
        if said:
            window.statusBar().showMessage(" · ".join(said))

    def _last_session(self):
        """The remembered session (a ``core.last_session.LastSession``), None when unreadable."""
        from dmlviewer.core.last_session import LastSession

        try:
            return LastSession.from_settings(settings.session_values(self.window.settings))
        except ValueError as exc:
            log.warning("the last session cannot be read: %s", exc)
            return None


class _busy:
    """Context manager: wait cursor while a short blocking step runs."""

    def __enter__(self):
        if QApplication.instance() is not None:
            QApplication.setOverrideCursor(Qt.WaitCursor)
        return self

    def __exit__(self, *exc):
        if QApplication.instance() is not None:
            QApplication.restoreOverrideCursor()
        return False
