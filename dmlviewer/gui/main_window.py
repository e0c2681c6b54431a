"""The main window: menus, toolbar, docks, status bar and the wiring between the views.

Layout: the pair view and the group attention tabs share the central tab area; the dataset
browser docks on the left, the retrieval panel on the right, the problems list at the bottom.
Dock layout, window geometry, recent files and display options persist in QSettings.

Opening a dataset or a checkpoint is done on the GUI thread with a busy cursor (reading a
listing or a state dict takes well under a second); everything heavier runs in the
background (pair preparation and retrieval in ``LatestRunner``s, feature extraction in the
``JobRunner`` queue that the jobs view of the Tools menu shows). Every failure becomes a dialog
with the traceback as details; the window stays usable.

The state (dataset and its identity, models, pair, feature file, jobs, device, display options)
is not kept here: it lives in the headless, evented ``core.session.Session``
(``window.session``), which this window changes through its ``set_*`` methods. The widgets bind
to it (the retrieval panel and the status bar follow its events; the pair view its display
options), the last session is written from it, and a job's result is shown only when
``session.accepts`` its stamp (results of a dataset or model closed meanwhile are dropped).

Comparing two models (issue 24): File > Compare With Model opens a second model, through any
door, into the session's ``"compare"`` slot (model B, shown by the pair view as a second row);
File > Stop Comparing empties it; Tools > Compare Models opens ``gui/compare_window.py``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path
from typing import Callable

import numpy as np

from PySide6.QtCore import QByteArray, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication, QIcon, QKeySequence
from PySide6.QtWidgets import (QApplication, QComboBox, QDockWidget, QFileDialog, QLabel,
                               QMainWindow, QMenu, QMessageBox, QTabWidget, QToolBar, QWidget)

from dmlviewer.core.session import Session
from dmlviewer.gui import errors, settings
from dmlviewer.gui.browser import DatasetBrowser
from dmlviewer.gui.group_tabs import GroupTabs
from dmlviewer.gui.pair_view import PairImages, PairView
from dmlviewer.gui.problems import ProblemsList
from dmlviewer.gui.retrieval_panel import RetrievalPanel
from dmlviewer.gui.search_index import IndexKeeper
from dmlviewer.gui.thumbnails import ThumbnailLoader
from dmlviewer.gui.widgets import clamp_to_screen, fit_to_screen
from dmlviewer.gui.worker import JobRunner, confirm_close

log = logging.getLogger(__name__)
#: The widest a model label in the status bar grows (one model; two share about this much).
MODEL_LABEL_WIDTH = 440

from dmlviewer.core.data.format_names import FORMATS as DATASET_FORMATS  # noqa: E402
#: Bumped when the dock layout changes incompatibly (old saved states are then ignored).
STATE_VERSION = 1


def _icon(name: str) -> QIcon:
    from dmlviewer.resources import resource_path

    path = resource_path(f"icon_{name}.svg")
    return QIcon(str(path)) if path.exists() else QIcon()


class MainWindow(QMainWindow):
    """See the module docstring. Public API (docs/internals.md, "gui"): ``open_dataset``,
    ``open_checkpoint``, ``open_model_source``, ``use_model``, ``open_features``, ``set_pair``,
    ``open_in_background``, ``add_tool_action``; attributes ``session`` and ``runner``, and the
    read-only views of the session ``dataset``, ``model``, ``features`` and the others below."""

    _loaded = Signal(object)  # open_in_background: what the loading thread read
    _compare_loaded = Signal(object)  # open_compare: (request, source, (model, info) or the exception)
    _loading_step = Signal(str)
    _devices_found = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("dmlviewer")
        self.setWindowIcon(_icon("app"))
        self.settings = settings.app_settings()
        self.runner = JobRunner(self)
        self.model_lock = threading.RLock()
        self.session = Session()
        self.loading = False  # files being read by open_in_background
        self._models_device = "cpu"  # where the open models are (the session's device once moved)
        self._session_links: list[tuple] = []  # (session event, callback) connected by this window
        self._live_models: list[tuple] = []  # (model, info, source) of live modules shown in this process
        self._pair_images: tuple | None = None  # ((query, reference), PairImages) read by set_pair
        self._user_close = False  # File > Quit: a person's close, asked about running jobs
        self._grad_job_key: tuple | None = None
        self._grad_banks: dict[tuple, object] = {}  # (checkpoint sha, dataset) -> GradWeightBank

        self.loader = ThumbnailLoader(parent=self)
        self.pair_view = PairView(model_lock=self.model_lock, display=self.session.display)
        self.group_tabs = GroupTabs(model_lock=self.model_lock)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.pair_view, "Pair explanation")
        self.tabs.addTab(self.group_tabs, "Group attention")
        self.setCentralWidget(self.tabs)

        self.browser = DatasetBrowser(self.loader)
        self.browser.setMinimumWidth(2 * self.browser.view.gridSize().width() + 40)  # two columns at least
        self.retrieval = RetrievalPanel(self.loader, model_lock=self.model_lock, session=self.session)
        self.index_keeper = IndexKeeper(self.runner, self)
        self.index_keeper.index_ready.connect(self.retrieval.set_index)
        self.index_keeper.status.connect(self.retrieval.set_search_note)
        self.problems = ProblemsList()
        self.browser_dock = self._dock("Dataset", "browserDock", self.browser, Qt.LeftDockWidgetArea)
        self.retrieval_dock = self._dock("Retrieval", "retrievalDock", self.retrieval, Qt.RightDockWidgetArea)
        self.problems_dock = self._dock("Problems", "problemsDock", self.problems, Qt.BottomDockWidgetArea)
        self.problems_dock.hide()
        self._layout_pending = True

        self._build_status_bar()
        self._build_actions()
        self._connect()
        self.tools = self._install_tools()
        self.compare_window = None  # Tools > Compare Models, created on first use
        self._install_compare_tool()
        self._restore_options()
        fit_to_screen(self, 1500, 920)  # never larger than the screen (1366 x 768 laptops)
        self._restore_layout()

    # -- the state: read-only views of self.session (change it with open_*, use_model, set_*)
    @property
    def dataset(self):
        return self.session.dataset

    @property
    def dataset_path(self) -> str | None:
        return self.session.dataset_path

    @property
    def dataset_format(self) -> str | None:
        return self.session.dataset_format

    @property
    def model(self):
        return self.session.model

    @property
    def checkpoint_info(self) -> dict | None:
        """``info`` of the model on screen (``open_model``'s: ``sha256``, ``path``, ``rule`` …)."""
        return self.session.model_info

    @property
    def checkpoint_path(self) -> str | None:
        """The open model's checkpoint file or ``imagenet:NAME`` spec (None for code and live
        modules: no checkpoint to hand to the tools)."""
        source = self.session.model_source
        if source is not None and source.kind not in ("checkpoint", "pretrained"):
            return None
        return (self.session.model_info or {}).get("path")

    @property
    def model_source(self):
        """The ``ModelSource`` of the model on screen."""
        return self.session.model_source

    @property
    def features(self):
        return self.session.features

    @property
    def features_path(self) -> str | None:
        return self.session.features_path

    @property
    def device(self) -> str:
        return self.session.device

    @property
    def query_index(self) -> int | None:
        return self.session.query_index

    @property
    def reference_index(self) -> int | None:
        return self.session.reference_index

    # -- construction
    def _dock(self, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _build_status_bar(self) -> None:
        """Messages elided with their whole text as tooltip (never cut, "[pinne"), the running job
        with its overall progress and a button that opens the Jobs dock, and the labels."""
        from dmlviewer.gui.job_status import FittedLabel, JobStatus, MessageStatusBar

        bar = MessageStatusBar(self)
        self.setStatusBar(bar)
        self.job_status = JobStatus(self.runner)
        self.job_status.open_requested.connect(lambda: getattr(self, "tools", None) and self.tools.jobs_dock.toggle())
        bar.addPermanentWidget(self.job_status)
        self.device_label = FittedLabel("", max_width=120)
        self.model_label = FittedLabel("no model", max_width=MODEL_LABEL_WIDTH)
        self.compare_label = FittedLabel("", max_width=MODEL_LABEL_WIDTH)  # model B while comparing (issue 24)
        self.compare_label.setObjectName("compareModelLabel")
        self.compare_label.hide()
        self.dataset_label = FittedLabel("no dataset", max_width=320)
        self.similarity_label = FittedLabel("", max_width=200, whole=True)  # "A +0.1234 · B +0.1234", never elided
        self.similarity_label.setObjectName("similarityLabel")
        for label in (self.dataset_label, self.model_label):  # elided first while a job runs: the message stays whole
            self.job_status.give_way(label)
        for label in (self.similarity_label, self.dataset_label, self.model_label, self.compare_label,
                      self.device_label):
            label.setContentsMargins(6, 0, 6, 0)
            bar.addPermanentWidget(label)

    def _build_actions(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        self.open_dataset_action = QAction(_icon("dataset"), "Open &Dataset…", self)
        self.open_dataset_action.setShortcut(QKeySequence("Ctrl+O"))
        self.open_dataset_action.setToolTip("Open a dataset folder (format detected from the folder)")
        self.open_dataset_action.triggered.connect(lambda: self._ask_dataset(None))
        self.open_as_menu = QMenu("Open Dataset &As", self)
        for fmt in DATASET_FORMATS:
            action = self.open_as_menu.addAction(fmt)
            action.triggered.connect(lambda _=False, f=fmt: self._ask_dataset(f))
        self.recent_datasets_menu = QMenu("Recent Datasets", self)
        self.open_checkpoint_action = QAction(_icon("checkpoint"), "Open &Checkpoint…", self)
        self.open_checkpoint_action.setShortcut(QKeySequence("Ctrl+K"))
        self.open_checkpoint_action.triggered.connect(self._ask_checkpoint)
        self.recent_models_menu = QMenu("Recent &Models", self)
        self.recent_models_menu.setToolTipsVisible(True)  # each entry's whole path
        self.open_code_action = QAction("Open Model from &Code…", self)
        self.open_code_action.setToolTip("Build the architecture with your own Python (file.py:NAME or "
                                         "package.module:NAME) and load its weights file")
        self.open_code_action.triggered.connect(self._ask_code_model)
        self.open_features_action = QAction(_icon("features"), "Open &Features…", self)
        self.open_features_action.setToolTip("Open an HDF5 feature file for retrieval")
        self.open_features_action.triggered.connect(self._ask_features)
        self.recent_features_menu = QMenu("Recent Features", self)
        save_shot = QAction("Save Window Image…", self)
        save_shot.triggered.connect(self._save_screenshot)
        self.output_folder_action = QAction("Output &Folder…", self)
        self.output_folder_action.setToolTip("Where computed feature files and training runs are written")
        self.output_folder_action.triggered.connect(self._ask_output_folder)
        quit_action = QAction("&Quit", self)
        quit_action.setShortcut(QKeySequence.Quit)
        quit_action.triggered.connect(self._quit)
        file_menu.addAction(self.open_dataset_action)
        file_menu.addMenu(self.open_as_menu)
        file_menu.addMenu(self.recent_datasets_menu)
        file_menu.addSeparator()
        file_menu.addAction(self.open_checkpoint_action)
        file_menu.addMenu(self.recent_models_menu)
        from dmlviewer.gui.import_dialog import import_action

        file_menu.addAction(import_action(self))
        from dmlviewer.gui.pretrained_dialog import pretrained_action

        self.open_pretrained_action = pretrained_action(self)
        file_menu.addAction(self.open_pretrained_action)
        file_menu.addAction(self.open_code_action)
        self._build_compare_menu(file_menu)
        file_menu.addSeparator()
        file_menu.addAction(self.open_features_action)
        file_menu.addMenu(self.recent_features_menu)
        file_menu.addSeparator()
        file_menu.addAction(self.output_folder_action)
        from dmlviewer.gui import export  # File > Export View (issue 33): figures drawn from the data

        file_menu.addAction(export.install(self))
        file_menu.addAction(save_shot)
        file_menu.addAction(quit_action)
        for menu_, key in ((self.recent_datasets_menu, "datasets"), (self.recent_models_menu, "models"),
                           (self.recent_features_menu, "features")):
            menu_.aboutToShow.connect(lambda m=menu_, k=key: self._fill_recent(m, k))

        self.view_menu = view_menu = menu.addMenu("&View")
        for dock in (self.browser_dock, self.retrieval_dock, self.problems_dock):
            self.add_view_action(dock)
        self._view_separator = view_menu.addSeparator()
        reset = view_menu.addAction("Reset Layout")
        reset.triggered.connect(self._reset_layout)

        self.tools_menu = menu.addMenu("&Tools")
        self.tools_menu.setObjectName("toolsMenu")

        help_menu = menu.addMenu("&Help")
        logs = help_menu.addAction("Show Log Folder")
        logs.triggered.connect(lambda: QGuiApplication.clipboard().setText(str(settings.log_dir()))
                               or self.statusBar().showMessage(f"log folder (path copied): {settings.log_dir()}", 8000))
        about = help_menu.addAction("About dmlviewer")
        about.triggered.connect(self._about)

        bar = QToolBar("Main")
        bar.setObjectName("mainToolbar")
        bar.setIconSize(QSize(20, 20))
        bar.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        bar.addAction(self.open_dataset_action)
        bar.addAction(self.open_checkpoint_action)
        bar.addAction(self.open_features_action)
        bar.addSeparator()
        bar.addWidget(QLabel(" Device "))
        self.device_combo = QComboBox()
        self.device_combo.setToolTip("Device the model runs on")
        # The devices are discovered in the background (it needs torch, seconds to import): until
        # then the combo holds the CPU and the device saved in the settings.
        self.device_combo.addItem("cpu", "cpu")
        saved = str(self.settings.value("options/device", "cpu") or "cpu")
        if saved != "cpu":
            self.device_combo.addItem(saved, saved)
        self.devices_known = False
        bar.addWidget(self.device_combo)
        self.addToolBar(bar)
        self.toolbar = bar

    def _build_compare_menu(self, file_menu: QMenu) -> None:
        """File > Compare With Model (a second model beside the open one, any door) and File >
        Stop Comparing (issue 24)."""
        self.compare_menu = QMenu("Compare &With Model", self)
        self.compare_menu.setToolTip("Open a second model (B) beside the open one (A): both models' maps of "
                                     "the same pair, and their difference")
        doors = (("Checkpoint…", self._ask_compare_checkpoint),
                 ("Pretrained Backbone…", self._ask_compare_pretrained),
                 ("Model from Code…", self._ask_compare_code))
        for text, slot in doors:
            self.compare_menu.addAction(text).triggered.connect(slot)
        self.compare_recent_menu = self.compare_menu.addMenu("Recent Models")
        self.compare_recent_menu.setToolTipsVisible(True)
        self.compare_recent_menu.aboutToShow.connect(self._fill_compare_recent)
        self.stop_comparing_action = QAction("Stop Comparing", self)
        self.stop_comparing_action.setEnabled(False)
        self.stop_comparing_action.triggered.connect(self.stop_comparing)
        file_menu.addMenu(self.compare_menu)
        file_menu.addAction(self.stop_comparing_action)
        # A name of the user's for model A and B (issue 31 item 1), kept by the last session.
        self.label_actions = {}
        for slot, text in (("primary", "Label Model A…"), ("compare", "Label Model B…")):
            action = file_menu.addAction(text)
            action.setEnabled(False)
            action.setStatusTip("Give the model a name of your own, shown in the views, tables and exports")
            action.triggered.connect(lambda _=False, s=slot: self._ask_model_label(s))
            self.label_actions[slot] = action

    def _connect(self) -> None:
        self.browser.query_chosen.connect(lambda i: self.set_pair(i, self.reference_index))
        self.browser.reference_chosen.connect(lambda i: self.set_pair(self.query_index, i))
        self.retrieval.reference_chosen.connect(lambda i: self.set_pair(self.query_index, i))
        self.retrieval.extract_requested.connect(self.extract_features)
        self.loader.failed.connect(lambda _i, path, reason: self.problems.add_problem(path, reason))
        self.problems.count_changed.connect(self._on_problems)
        self.pair_view.status_message.connect(self._hover_message)
        self.group_tabs.status_message.connect(self._hover_message)
        self.pair_view.similarity_changed.connect(self._on_similarity)
        self.pair_view.pair_ready.connect(self.group_tabs.set_explanation)
        self.pair_view.region_query.connect(self._on_region)
        self.retrieval.whole_image_chosen.connect(self.pair_view.clear_region)
        self.pair_view.swap_handler = self._swap_pair
        self.pair_view.grad_bank_needed.connect(self._compute_grad_bank)
        self.device_combo.currentIndexChanged.connect(lambda _i: self.set_device(self.device_combo.currentData()))
        self.runner.job_finished.connect(self._on_job_finished)
        self.runner.job_failed.connect(self._on_job_failed)
        self.runner.job_cancelled.connect(self._on_job_cancelled)
        events = self.session.events
        self._observe(events.dataset, self._on_dataset_changed)
        self._observe(events.model, self._on_model_changed)
        self._observe(events.pair, self._on_pair_changed)
        self._observe(events.features, self._on_features_changed)
        self._observe(events.device, self._on_device_changed)
        for event in (events.dataset, events.model, events.pair, events.features):
            self._observe(event, self._remember_session)  # after the panels: the last session on disk
        link = self.pair_view.link  # the pinned point: the session's, shown by the pair view
        link.pinned_changed.connect(lambda: self.session.set_pinned(link.pinned))
        self._observe(events.pinned, self._on_pinned)
        self.tabs.currentChanged.connect(lambda _i: self.statusBar().clearMessage())
        self._loaded.connect(self._on_loaded)
        self._compare_loaded.connect(self._on_compare_loaded)
        self._loading_step.connect(self._on_loading_step)
        self._devices_found.connect(self._on_devices)

    def _observe(self, signal, callback) -> None:
        """Connect ``callback`` to a session event until the window shuts down (the session,
        e.g. ``dmlviewer.view``'s, may outlive the window)."""
        signal.connect(callback)
        self._session_links.append((signal, callback))

    def _install_tools(self):
        """Training, evaluation, localization, embedding and jobs (gui/tools.py) in the Tools
        menu; the window works without them if they cannot be set up."""
        try:
            from dmlviewer.gui.tools import install_tools

            return install_tools(self)
        except Exception:  # noqa: BLE001 - logged; the explanation views stay usable
            log.exception("the Tools menu could not be set up")
            return None

    # -- public API
    def add_tool_action(self, action: QAction) -> None:
        """Add an entry to the Tools menu (training, evaluation and job views use this)."""
        self.tools_menu.addAction(action)

    def add_view_action(self, dock: QDockWidget, text: str | None = None) -> QAction:
        """A View menu entry that shows ``dock`` in front (raised above docks tabbed with it)
        or hides it."""
        action = dock.toggleViewAction()
        if text:
            action.setText(text)
        action.triggered.connect(lambda checked, d=dock: (d.show(), d.raise_()) if checked else None)
        separator = getattr(self, "_view_separator", None)
        if separator is None:
            self.view_menu.addAction(action)
        else:
            self.view_menu.insertAction(separator, action)
        return action

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
            errors.report_exception(self, "Cannot open dataset", exc)
            return False
        self._apply_dataset(dataset, path, fmt)
        return True

    def _apply_dataset(self, dataset, path: str, fmt: str | None, previous=None) -> None:
        """``previous``: the last session as read before anything was opened (default: now)."""
        if previous is None:
            previous = self._last_session()  # read before the session (and so the settings) change
        self.session.set_dataset(dataset, path, fmt)
        settings.add_recent("datasets", path, self.settings)
        if not self._restore_pair(previous):
            self._choose_default_pair()

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
        from dmlviewer.core.session import kind_words, open_source

        try:
            with _busy():
                model, info = open_source(source, self.device)
        except Exception as exc:  # noqa: BLE001
            self._report_model_error(f"Cannot open {kind_words(source.kind)}", exc, source)
            return False
        self._model_opened(model, info, source)
        return True

    def _model_opened(self, model, info: dict, source) -> None:
        settings.add_recent_model(source, self.settings, info)
        self.use_model(model, info, source.display(), source=source)
        if source.kind == "code":  # nothing recorded it: say which preprocessing is assumed (issue 31 item 7)
            from dmlviewer.core.models.naming import describe_preprocessing

            self.statusBar().showMessage(f"{self._display_name()}: preprocessing assumed "
                                         f"{describe_preprocessing(getattr(model, 'config', None))} (File ▸ Open "
                                         "Model from Code sets input size, mean and std)", 20000)

    def use_model(self, model, info: dict, label: str | None = None, source=None) -> None:
        """Show ``model`` (any dmlviewer model: from a checkpoint, a pretrained backbone, code or
        a live module, see ``core.models.open_model``) with ``info`` from ``open_model``;
        ``source``: the ``ModelSource`` it came from (default: read from ``info``, else a live
        module named ``label``, which the last session does not remember)."""
        from dmlviewer.core.models.source import ModelSource

        if source is None:
            source = info.get("model_source")
        if source is None:
            kind = info.get("source")
            source = (ModelSource.from_text(info["path"]) if kind in ("checkpoint", "pretrained") and info.get("path")
                      else ModelSource("python", label=label or type(model).__name__))
        if not source.persistent:  # a live module: in Recent Models for the lifetime of this process
            self._live_models = [entry for entry in self._live_models if entry[0] is not model][-4:]
            self._live_models.append((model, info, source))
        # Not under model_lock: the observers may wait for workers that take it.
        self.session.set_model(model, {**info, "label": label or source.display()}, source)

    def _on_model_changed(self, slot: str) -> None:
        """Session event: the model of ``slot`` changed (the primary one is on screen; the
        compare one is model B of the pair view)."""
        self._show_model_labels()
        if slot == "compare":
            self._on_compare_changed()
            return
        self._drop_stale_jobs()
        model = self.model
        if model is None:
            return
        self.pair_view.set_model(model, self.device)
        if self._grad_key() in self._grad_banks:
            self.pair_view.set_grad_bank(self._grad_banks[self._grad_key()])
        self.group_tabs.set_model(model)
        if self.pair_view.images is not None:
            self.group_tabs.set_pair(self.pair_view.images)

    def _show_model_labels(self) -> None:
        """The status bar's model labels: the open model's architecture, and while comparing "A: …"
        and "B: …" (their names); the window title names the models (their distinct names,
        ``core.models.naming``), the tooltips their files, architecture and preprocessing."""
        from dmlviewer.core.models.naming import describe_preprocessing, full_description

        comparing = self.session.slot("compare") is not None
        names = self._model_names()
        for slot_name, action in getattr(self, "label_actions", {}).items():
            action.setEnabled(slot_name in names)
        for name, label in (("primary", self.model_label), ("compare", self.compare_label)):
            slot = self.session.slot(name)
            if slot is None:
                label.setText("no model" if name == "primary" else "")
                label.setToolTip("")
                continue
            info, source = slot.info, slot.source
            rule = info.get("rule") or ""
            summary = model_summary(slot.model)
            # The architecture (two models: their names); the decomposition rule is in the tooltip
            # and under the images (the pair view's rule label), so that a pinned point's line
            # reads whole beside these labels at 1366 px (issue 31 item 9).
            text = f"{'A' if name == 'primary' else 'B'}: {names[name]}" if comparing else summary
            # two names share the bar: each gives way first (elided in the middle, whole in its tooltip)
            label.max_width = MODEL_LABEL_WIDTH * 2 // 5 if comparing else MODEL_LABEL_WIDTH
            label.setText(text)
            config = getattr(slot.model, "config", None)
            label.setToolTip(f"{names[name]}\n{full_description(source) or info.get('label')}\n{summary}\n"
                             f"epoch {info.get('epoch')}\nsha256 {(info.get('sha256') or '')[:16]}…\n"
                             f"decomposition: {rule}\npreprocessing: {describe_preprocessing(config)}")
        self.compare_label.setVisible(comparing)
        self.device_label.setVisible(not comparing)  # room for B's label; the toolbar names the device
        if getattr(self, "compare_window", None) is not None:
            self.compare_window.refresh()
        title = "dmlviewer" + (f": {Path(self.dataset_path).name}" if self.dataset is not None else "")
        if comparing:
            title += f" — A: {names['primary']} vs B: {names['compare']}"
        elif "primary" in names:
            title += f" — {names['primary']}"
        self.setWindowTitle(title)

    def _model_names(self) -> dict[str, str]:
        """The open models' names by slot, distinct from each other (``core.models.naming``)."""
        from dmlviewer.core.models.naming import distinct_names
        from dmlviewer.core.session import SLOTS

        open_ = [(name, self.session.slot(name)) for name in SLOTS if self.session.slot(name) is not None]
        # side by side, what tells them apart: a backbone both have is said in the tooltips only
        names = distinct_names([(slot.source, slot.info) for _, slot in open_], shared_traits=False)
        return {name: text for (name, _), text in zip(open_, names)}

    def label_model(self, slot: str, label: str | None) -> None:
        """Give the model of ``slot`` a label of the user's (None or "": its own name again); the
        label is part of its source, so the views, tables, exports and the last session keep it."""
        from dataclasses import replace

        entry = self.session.slot(slot)
        if entry is None or entry.source is None:
            return
        label = (label or "").strip()[:80] or None
        if entry.source.kind == "python":  # a live module's label is its class name when none is given
            label = label or type(entry.model).__name__
        entry.source = replace(entry.source, label=label)
        self._show_model_labels()
        if slot == "compare":
            self.pair_view.set_compare_model(entry.model, self.device, self._display_name("compare"))
        self._remember_session()

    def _ask_model_label(self, slot: str) -> None:
        """File > Label Model A/B…: a name of the user's for the model (empty: its own name)."""
        from PySide6.QtWidgets import QInputDialog

        entry = self.session.slot(slot)
        if entry is None:
            return
        current = entry.source.label if entry.source is not None and entry.source.kind != "python" else ""
        text, ok = QInputDialog.getText(self, f"Label model {'A' if slot == 'primary' else 'B'}",
                                        "A name for this model in the views, tables and exports "
                                        "(empty: its file name):", text=current or "")
        if ok:
            self.label_model(slot, text)

    # -- the compare model (issue 24): model B of the pair view, in the session's "compare" slot
    def open_compare(self, source) -> None:
        """Open the model ``source`` (a ``ModelSource``, or a checkpoint path / ``imagenet:NAME``)
        in the background as model B; failures become dialogs."""
        from dmlviewer.core.models.source import ModelSource

        if not isinstance(source, ModelSource):
            source = ModelSource.from_text(str(source))
        device = self.device
        self._forget_compare_loads()  # only the newest model B asked for is shown
        request = object()
        self.session.add_job(request, "open-compare", f"Loading model B {source.display()}")
        self.statusBar().showMessage(f"Loading model B {source.display()}…")

        def work() -> None:
            from dmlviewer.core.session import open_source

            try:
                result = open_source(source, device)
            except Exception as exc:  # noqa: BLE001 - reported on the GUI thread
                result = exc
            try:
                self._compare_loaded.emit((request, source, result))
            except RuntimeError:  # the window is gone
                pass

        threading.Thread(target=work, name="dmlviewer-open-compare", daemon=True).start()

    def _on_compare_loaded(self, value) -> None:
        from dmlviewer.core.session import kind_words

        request, source, result = value
        if self.session.end_job(request) is None:  # forgotten: another model B (or none) was asked for meanwhile
            log.info("dropped model B %s: another one was asked for meanwhile", source.display())
            return
        self.statusBar().clearMessage()
        if isinstance(result, BaseException):
            self._report_model_error(f"Cannot compare with {kind_words(source.kind)}", result, source)
            return
        model, info = result
        settings.add_recent_model(source, self.settings, info)
        self.use_compare_model(model, info, source)

    def use_compare_model(self, model, info: dict, source=None) -> None:
        """Show ``model`` (``info`` from ``open_model``) as model B beside the open model."""
        from dmlviewer.core.models.source import ModelSource

        source = source or info.get("model_source") or ModelSource("python", label=type(model).__name__)
        self.session.set_model(model, {**info, "label": source.display()}, source, slot="compare")

    def stop_comparing(self) -> None:
        """File > Stop Comparing: model B goes, the pair view shows one row again (a model B
        still loading is dropped when it arrives)."""
        self._forget_compare_loads()
        self.session.set_model(None, slot="compare")

    def _forget_compare_loads(self) -> None:
        """Model B loads still running are dropped when they arrive (their jobs are forgotten)."""
        for request, entry in list(self.session.jobs.items()):
            if entry.kind == "open-compare":
                self.session.end_job(request)

    def _install_compare_tool(self) -> None:
        action = QAction("&Compare Models…", self)
        action.setToolTip("The pairs where the two open models (File ▸ Compare With Model) disagree most")
        action.triggered.connect(self.show_compare_window)
        self.add_tool_action(action)

    def show_compare_window(self):
        """Tools > Compare Models (gui/compare_window.py), created on first use."""
        from dmlviewer.gui.compare_window import CompareWindow

        if self.compare_window is None:
            self.compare_window = CompareWindow(self, self)
            self.compare_window.setWindowFlag(Qt.Window)
            self.compare_window.pair_chosen.connect(lambda *_: self.tabs.setCurrentWidget(self.pair_view))
        self.compare_window.refresh()
        self.compare_window.show()
        self.compare_window.raise_()
        return self.compare_window

    def _on_compare_changed(self) -> None:
        slot = self.session.slot("compare")
        self.stop_comparing_action.setEnabled(slot is not None)
        self.pair_view.set_compare_model(None if slot is None else slot.model, self.device,
                                         "" if slot is None else self._display_name("compare"))
        self._on_similarity(self.pair_view.explanation.similarity if self.pair_view.state == "ready" else None)

    def _ask_compare_checkpoint(self) -> None:
        recent = [s.path for s in settings.recent_models(self.settings) if s.kind == "checkpoint"]
        start = settings.start_dir(self.checkpoint_path, *recent, settings=self.settings)
        path, _ = QFileDialog.getOpenFileName(self, "Compare with checkpoint (model B)", start,
                                              "Checkpoints (*.pt *.pth);;All files (*)")
        if path:
            self.open_compare(path)

    def _ask_compare_pretrained(self) -> None:
        from PySide6.QtWidgets import QDialog

        from dmlviewer.core.models import PRETRAINED_PREFIX
        from dmlviewer.gui.pretrained_dialog import PretrainedDialog

        dialog = PretrainedDialog(self)
        dialog.setWindowTitle("Compare With Pretrained Backbone")
        if dialog.exec() == QDialog.Accepted and dialog.choice:
            self.open_compare(PRETRAINED_PREFIX + dialog.choice)

    def _ask_compare_code(self) -> None:
        """Model B from code and weights (gui/code_model_dialog.py), opened in the background."""
        from dmlviewer.gui.code_model_dialog import CodeModelDialog

        dialog = CodeModelDialog(self)
        dialog.setWindowTitle("Compare With Model from Code")
        dialog.source_chosen.connect(self.open_compare)
        dialog.setAttribute(Qt.WA_DeleteOnClose)
        dialog.open()
        self.code_dialog = dialog

    def _fill_compare_recent(self) -> None:
        menu = self.compare_recent_menu
        menu.clear()
        from dmlviewer.core.models.naming import full_description

        sources = settings.recent_models(self.settings)
        for model, info, source in reversed(self._live_models):
            action = menu.addAction(f"{source.display()} (Python module, until you quit)")
            action.triggered.connect(lambda _=False, m=model, i=info, s=source: self.use_compare_model(m, i, s))
        for source, name in zip(sources, settings.recent_model_names(sources, self.settings)):
            action = menu.addAction(name)
            action.setToolTip(full_description(source))
            action.setStatusTip(full_description(source))
            action.triggered.connect(lambda _=False, s=source: self.open_compare(s))
        if not sources and not self._live_models:
            menu.addAction("(none)").setEnabled(False)

    def _on_dataset_changed(self) -> None:
        """Session event: another dataset is open (the pair is cleared; see ``_apply_dataset``)."""
        dataset, path = self.dataset, self.dataset_path
        self._drop_stale_jobs()
        self._pair_images = None
        self.pair_view.set_grad_bank(self._grad_banks.get(self._grad_key()))
        self.problems.clear_problems()
        self.browser.set_dataset(dataset)
        if dataset is None:
            self.dataset_label.setText("no dataset")
            self.dataset_label.setToolTip("")
        else:
            # short enough to read whole beside two models' names at 1366 px; the rest in the tooltip
            self.dataset_label.setText(f"{Path(path).name}: {len(dataset):,} images, {dataset.num_classes} classes")
            self.dataset_label.setToolTip(f"{path}\nformat {dataset.format}: {len(dataset):,} images, "
                                          f"{dataset.num_classes} classes")
        self._show_model_labels()  # the window title

    def _report_model_error(self, title: str, exc: BaseException, source=None) -> None:
        """A model that could not be opened: a dialog; a bare state dict (weights without an
        architecture) is offered to File > Import Model instead (issue 23 item 9)."""
        if getattr(exc, "bare_state_dict", False) and source is not None and source.kind == "checkpoint":
            self.offer_import(source.path)
            return
        errors.report_exception(self, title, exc)

    def offer_import(self, path: str) -> QMessageBox:
        """Say that ``path`` holds weights without an architecture and offer to import it
        (the Import Model dialog, prefilled with the file). Window-modal, never blocking."""
        box = QMessageBox(QMessageBox.Information, "Import this model?",
                          f"{Path(path).name} holds only the weights of a network (a state dict), not a "
                          "dmlviewer checkpoint, so it cannot be opened directly.", QMessageBox.Cancel, self)
        box.setInformativeText("File ▸ Import Model recognizes its architecture (torchvision, timm, "
                               "pytorch-metric-learning …), writes a dmlviewer checkpoint and opens it.")
        button = box.addButton("Import…", QMessageBox.AcceptRole)
        box.setDefaultButton(button)
        button.clicked.connect(lambda: self.open_import_dialog([path]))
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.open()
        self.import_offer = box
        return box

    def open_import_dialog(self, files: list[str] | None = None):
        """File > Import Model, prefilled with ``files``."""
        from dmlviewer.gui.import_dialog import ImportDialog

        dialog = ImportDialog(self, files=files)
        dialog.setAttribute(Qt.WA_DeleteOnClose)
        dialog.open()
        self.import_dialog = dialog
        return dialog

    def open_features(self, path: str | Path) -> bool:
        """Open an HDF5 feature file for retrieval. False (and a dialog) on error."""
        from dmlviewer.core.evaluate import open_features

        path = str(Path(path).expanduser())
        try:
            with _busy():
                features = open_features(path)  # lazy: rows are read when needed
        except Exception as exc:  # noqa: BLE001
            errors.report_exception(self, "Cannot open features", exc)
            return False
        self._apply_features(features, path)
        return True

    def _apply_features(self, features, path: str) -> None:
        self.session.set_features(features, path, chosen=True)
        settings.add_recent("features", path, self.settings)
        mismatch = self.retrieval.mismatch()
        if mismatch:
            self.statusBar().showMessage(f"{Path(path).name}: {mismatch}", 15000)

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
        self.pair_view.info.setText("Loading…")
        self.statusBar().showMessage("Loading…")
        device = self.device
        if checkpoint and model is None:
            model = checkpoint

        def step(text: str) -> None:
            try:
                self._loading_step.emit(text)
            except RuntimeError:  # the window is gone
                pass

        def work() -> None:
            from dmlviewer.core.session import read_session_files  # torch: imported in this thread

            result = read_session_files(dataset, fmt, model, features, last_session, demo, device, step)
            try:
                self._loaded.emit(result)
            except RuntimeError:
                pass

        threading.Thread(target=work, name="dmlviewer-open", daemon=True).start()

    def _start_device_discovery(self) -> None:
        threading.Thread(target=self._discover_devices, name="dmlviewer-devices", daemon=True).start()

    def _discover_devices(self) -> None:
        """Thread: the devices torch sees (CPU, each CUDA device, MPS)."""
        try:
            from dmlviewer.core.models import available_devices

            devices = available_devices()
        except Exception:  # noqa: BLE001 - never block the window on device discovery
            log.exception("device discovery failed")
            devices = ["cpu"]
        try:
            self._devices_found.emit(devices)
        except RuntimeError:  # the window is gone
            pass

    def _on_devices(self, devices: list[str]) -> None:
        wanted = self.device_combo.currentData()
        self.device_combo.blockSignals(True)
        self.device_combo.clear()
        for dev in devices:
            self.device_combo.addItem(dev, dev)
        index = self.device_combo.findData(wanted)
        self.device_combo.setCurrentIndex(max(0, index))
        self.device_combo.blockSignals(False)
        self.devices_known = True
        if index < 0:  # the saved device is not on this machine
            self.set_device(self.device_combo.currentData())

    def _on_loading_step(self, text: str) -> None:
        if self.loading:
            self.statusBar().showMessage(text)
            self.pair_view.info.setText(text)

    def _on_loaded(self, result: dict) -> None:
        self.loading = False
        self.statusBar().clearMessage()
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
        if "compare" in result and self.model is not None:  # the last session's model B (issue 24)
            (model, info), source = result["compare"]
            self._forget_compare_loads()  # a File > Compare With Model still loading is older than this
            self.use_compare_model(model, info, source)
        if self.dataset is None and self.model is None:
            self.pair_view.set_pair(None)
        if self.pair_view.images is not None:  # the pair's own line again, never "Loading the model …"
            self.pair_view.refresh_info()
        else:  # no pair could be shown: say what to do, not "Loading…"
            self.pair_view.info.setText("Choose a query (click) and a reference (Ctrl+click) in the dataset."
                                        if self.dataset is not None else
                                        "Open a dataset and a checkpoint, then choose a query and a reference.")
        for title, exc, source in result["errors"]:
            self._report_model_error(title, exc, source)
        # What could not be opened stays said in the status bar too (never a silent "no model").
        said = [f"{title}: {errors.user_message(exc)}" for title, exc, _ in result["errors"][:1]]
        said += [result["notice"]] if result.get("notice") else []
        if said:
            self.statusBar().showMessage(" · ".join(said))

    def set_pair(self, query_index: int | None, reference_index: int | None) -> None:
        """Make dataset images ``query_index``/``reference_index`` the pair (a missing reference
        defaults to another image of the query's class)."""
        if self.dataset is None or query_index is None:
            return
        if reference_index is None or reference_index == query_index:
            reference_index = self._default_reference(query_index)
        if self._read_pair(query_index, reference_index) is None:
            return
        if (query_index, reference_index) == (self.query_index, self.reference_index):
            self.session.events.pair.emit()  # the same pair chosen again: shown again
        else:
            self.session.set_pair(query_index, reference_index)

    def _read_pair(self, query_index: int, reference_index: int) -> PairImages | None:
        """Read the pair's images (kept for the pair event); None, a problem and a dialog when
        one cannot be read."""
        from dmlviewer.core.data import load_dataset_image

        ds = self.dataset
        images = []
        for index in (query_index, reference_index):
            try:
                images.append(load_dataset_image(ds, index))
            except Exception as exc:  # noqa: BLE001
                self.problems.add_problem(str(ds.abspath(index)), str(getattr(exc, "reason", exc)))
                errors.report_exception(self, "Cannot read image", exc)
                return None
        pair = PairImages(images[0], images[1], self._caption("Q", query_index, query_index),
                          self._caption("R", reference_index, query_index),
                          **self._cross_view_pair(query_index, reference_index))
        self._pair_images = ((query_index, reference_index), pair)
        return pair

    def _cross_view_pair(self, query_index: int, reference_index: int) -> dict:
        """For a ``cvusa`` dataset whose query is a street panorama and whose reference is an
        aerial image: ``cross_view`` and, for the pair's own aerial, its ``true_heading`` from
        ``headings.csv`` (issue 25; the pair view then draws the orientation lines)."""
        from dmlviewer.core.data.cross_view import cross_view_pairs

        ds = self.dataset
        if ds is None or ds.format != "cvusa" or query_index % 2 or not reference_index % 2:
            return {}
        cached = getattr(self, "_cross_view_cache", None)
        if cached is None or cached[0] is not ds:
            try:
                cached = self._cross_view_cache = (ds, cross_view_pairs(ds))
            except Exception:  # noqa: BLE001 - a bad headings.csv: lines without the truth
                log.warning("cannot read the true headings of %s", ds.root, exc_info=True)
                cached = self._cross_view_cache = (ds, None)
        pairs, k = cached[1], query_index // 2
        truth = None
        if pairs is not None and reference_index == int(pairs.aerial[k]) and np.isfinite(pairs.heading[k]):
            truth = float(pairs.heading[k])
        return {"cross_view": True, "true_heading": truth}

    def _on_pair_changed(self) -> None:
        """Session event: the pair changed (read by ``set_pair``; cleared with the dataset)."""
        query, reference = self.query_index, self.reference_index
        if query is None or reference is None:
            self.pair_view.set_pair(None)
            self.group_tabs.set_pair(None)
            self.browser.set_marks(None, None)
            return
        read = self._pair_images
        pair = read[1] if read is not None and read[0] == (query, reference) else self._read_pair(query, reference)
        if pair is None:
            return
        self.pair_view.set_pair(pair)
        self.group_tabs.set_pair(pair)
        self.browser.set_marks(query, reference)

    def _on_pinned(self) -> None:
        """Session event: a point pinned (or released) from outside the pair view, e.g. a
        notebook's ``session.set_pinned((side, x, y))``, is pinned on the panes."""
        link, point = self.pair_view.link, self.session.pinned
        if point == link.pinned or self.pair_view.state != "ready":
            return
        if point is None:
            link.unpin()
        else:
            link.pin(int(point[0]), float(point[1]), float(point[2]))

    def set_device(self, device: str) -> None:
        """Run the models on ``device``: the session's device changes and the models follow
        (``_on_device_changed``); a device name that cannot be used is said in a dialog."""
        if device == self.device or not device:
            return
        try:
            from dmlviewer.core.models import resolve_device

            resolved = str(resolve_device(device))
        except Exception as exc:  # noqa: BLE001
            errors.report_exception(self, "Cannot use device", exc)
            self._show_device()
            return
        self.session.set_device(resolved)

    def _cancel_model_jobs(self) -> list[str]:
        """Cancel the extraction and Grad-CAM weight jobs of the open model; their kinds."""
        kinds = []
        for job_id, entry in list(self.session.jobs.items()):
            if entry.kind in ("extract", "grad") and entry.handle is not None and not entry.handle.ended:
                self.session.end_job(job_id)
                self.runner.cancel(entry.handle)
                kinds.append(entry.kind)
        return kinds

    def _on_device_changed(self) -> None:
        """Session event (the device combo, or a notebook's ``session.set_device``): the models
        move to the session's device under the model lock. Extraction and Grad-CAM weights run
        on the device they started on: cancelled before the move, the extraction started again
        after. A device that cannot take the models is said in a dialog and the previous one
        comes back."""
        device, previous = self.device, self._models_device
        restart = self._cancel_model_jobs()
        try:
            with self.model_lock:
                for slot in list(self.session.slots.values()):
                    slot.model.to(device)
        except Exception as exc:  # noqa: BLE001
            errors.report_exception(self, "Cannot use device", exc)
            if device != previous:
                self.session.set_device(previous)  # the models move back (this event again)
            return
        self._models_device = device
        self.settings.setValue("options/device", device)
        self._show_device()
        if self.model is not None:
            self.pair_view.set_model(self.model, device)
        compare = self.session.slot("compare")
        if compare is not None:  # model B runs on the same device
            self.pair_view.set_compare_model(compare.model, device, self._display_name("compare"))
        if "extract" in restart:
            self.extract_features()

    def _show_device(self) -> None:
        """The device combo and the status bar's label show the session's device."""
        device = self.device
        self.device_label.setText(f"device: {device}")
        index = self.device_combo.findData(device)
        if index < 0:
            self.device_combo.addItem(device, device)
            index = self.device_combo.findData(device)
        self.device_combo.blockSignals(True)
        self.device_combo.setCurrentIndex(index)
        self.device_combo.blockSignals(False)

    def extract_features(self) -> None:
        """Embed the open dataset with the current model in the job queue; open the HDF5 file
        (a file this window wrote earlier is reopened when it fits the dataset's identity). The
        job runs the model under ``model_lock``, batch by batch, as every other user of the
        shared model does (a device change moves it under the lock)."""
        if self.model is None or self.dataset is None or self._extract_job is not None:
            return
        sha = (self.checkpoint_info or {}).get("sha256")
        out = self._features_path()
        from dmlviewer.core.evaluate.extract import extract_features, features_fit

        if out.exists() and features_fit(out, self.model, self.dataset):  # else: extracted before per-branch (issue 25)
            if self._open_extracted(out, quiet=True):
                return

        model, dataset, device, lock = self.model, self.dataset, self.device, self.model_lock

        def factory(cancel):
            return _under_lock(extract_features(model, dataset, out, batch_size=32, device=device, num_workers=0,
                                                cancel=cancel, checkpoint_sha256=sha), lock)

        self._submit("extract", f"Extract features of {Path(self.dataset_path).name} with {self._model_name()}",
                     factory)

    # -- jobs of the open dataset and model: held by the session with their stamps
    def _submit(self, kind: str, name: str, factory):
        """Queue a job (``kind``: ``extract`` or ``grad``) for what is open now: its result is
        shown only if the session still accepts the job's stamp when it ends."""
        job = self.runner.submit(name, factory)
        self.session.add_job(job.id, kind, name, handle=job)
        return job

    def _current_job(self, kind: str):
        """The running job of ``kind`` that works for what is open (None: none)."""
        for job_id in self.session.running(kind):
            return self.session.jobs[job_id].handle
        return None

    @property
    def _extract_job(self):
        return self._current_job("extract")

    @property
    def _grad_job(self):
        return self._current_job("grad")

    def _drop_stale_jobs(self) -> None:
        """The dataset or model changed: cancel the jobs working for what is no longer open
        (a result that still arrives is dropped by the stamp check)."""
        for job_id in self.session.stale_jobs():
            entry = self.session.jobs[job_id]
            if entry.kind in ("extract", "grad") and entry.handle is not None and not entry.handle.ended:
                log.info("cancelling %s: its dataset or model is no longer open", entry.name)
                self.runner.cancel(entry.handle)

    def _display_name(self, slot: str = "primary") -> str:
        """The model of ``slot`` by its name (distinct from the other open model's; the user's
        label when it has one; "the model" when none is open)."""
        return self._model_names().get(slot, "the model")

    def _model_name(self, slot: str = "primary") -> str:
        """The model of ``slot`` in words, for job names; while comparing "A (…)" or "B (…)",
        so that two models' jobs never read the same."""
        name = self._display_name(slot)
        if self.session.slot("compare") is not None:
            name = f"{'A' if slot == 'primary' else 'B'} ({name})"
        return name

    # -- internals
    def _features_path(self) -> Path:
        """Where the features of the open dataset under the open model are written: the output
        folder (visible, changeable under File ▸ Output Folder), one file per (model, dataset),
        named after both, without ``:`` or separators (Windows, SMB shares)."""
        source = self.model_source
        sha = (self.checkpoint_info or {}).get("sha256") or hashlib.sha256(str(self.checkpoint_path).encode()).hexdigest()
        where = hashlib.sha256(str(Path(self.dataset_path).resolve()).encode()).hexdigest()[:8]
        model = source.stem() if source is not None else "model"
        folder = settings.output_dir(self.settings) / "features"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{Path(self.dataset_path).name}-{model}-{sha[:12]}-{where}.h5"

    def _open_extracted(self, path: str | Path, quiet: bool = False) -> bool:
        """Open features this window extracted for what is open now, when they fit the open
        dataset's identity (``quiet``: a file found from an earlier run that does not fit is
        replaced without a word). False when not opened."""
        from dmlviewer.core.evaluate import read_features

        try:
            features = read_features(path)
        except Exception as exc:  # noqa: BLE001
            if not quiet:
                errors.report_exception(self, "Cannot open features", exc)
            return False
        if not self.session.features_fit(features):
            log.info("not opening %s: computed from another dataset than %s", path, self.dataset_path)
            return False
        self.session.set_features(features, str(path))
        return True

    def _on_job_finished(self, job, result) -> None:
        entry = self.session.end_job(job.id)
        if entry is None:
            return  # not one of this window's jobs (the tools have their own)
        if not self.session.accepts(entry.stamp):  # the one check: is its dataset and model still open?
            log.info("dropped the result of %s: its dataset or model is no longer open", job.name)
            return
        if entry.kind == "extract":
            path = (result or {}).get("path") if isinstance(result, dict) else None
            if path:
                self._open_extracted(path)
        elif entry.kind == "grad" and isinstance(result, tuple):
            self._on_grad_bank(*result)

    def _on_job_failed(self, job, text: str) -> None:
        entry = self.session.end_job(job.id)
        first, details = errors.split_failure(text)
        if entry is not None and entry.kind == "grad" and self.session.accepts(entry.stamp):
            self.pair_view.set_grad_bank(None, f"the Grad-CAM weights could not be computed: {first}")
        errors.show_error(self, f"Job failed: {job.name}", first, details)

    def _on_job_cancelled(self, job) -> None:
        entry = self.session.end_job(job.id)
        if entry is not None and entry.kind == "grad" and self.session.accepts(entry.stamp):
            self.pair_view.show_grad_progress("cancelled; choose the map again to restart it.")

    def _on_features_changed(self) -> None:
        features = self.features
        self.index_keeper.set_features(features)

    # -- the last session and the recent models
    def _remember_session(self, *_args) -> None:
        """Session event: the last session (``settings.save_session``) follows what is open
        (not while the last session itself is being reopened)."""
        if self.loading:
            return
        settings.save_session(self.session.to_dict(), self.settings)

    def _last_session(self):
        """The remembered session (a ``core.session.LastSession``), None when unreadable."""
        from dmlviewer.core.session import LastSession

        try:
            return LastSession.from_settings(settings.session_values(self.settings))
        except ValueError as exc:
            log.warning("the last session cannot be read: %s", exc)
            return None

    # -- grad-weight transfer
    def _grad_key(self) -> tuple:
        """The Grad-CAM weights belong to a model's weights and a dataset (its identity)."""
        return ((self.checkpoint_info or {}).get("sha256"), self.session.dataset_identity)

    def _compute_grad_bank(self) -> None:
        """Grad-weight transfer needs Grad-CAM weights of labelled images (seed 002): compute
        them for the open dataset's training split in the job queue, as ``localize`` does."""
        key = self._grad_key()
        if key in self._grad_banks:
            self.pair_view.set_grad_bank(self._grad_banks[key])
            return
        if self.model is None or self.dataset is None:
            self.pair_view.set_grad_bank(None, "open a dataset with a training split: the method borrows the "
                                               "Grad-CAM weights of its labelled training images")
            return
        train = self.dataset.select_split("train")
        if len(train) < 2:
            self.pair_view.set_grad_bank(None, "the open dataset has no training split: the method borrows the "
                                               "Grad-CAM weights of labelled training images")
            return
        running = self._grad_job
        if running is not None and not running.ended:
            if self._grad_job_key == key:
                return
            self.runner.cancel(running)  # weights of another model or dataset
        from dmlviewer.core.explain.grad_transfer import compute_grad_weights

        model, device, lock = self.model, self.device, self.model_lock

        def factory(cancel):
            for event in _under_lock(compute_grad_weights(model, train, device=device, cancel=cancel), lock):
                if event.kind == "done":
                    event.data["result"] = (key, event.data["result"])
                yield event

        self._grad_job_key = key
        self._submit("grad", f"Grad-CAM weights of {len(train):,} training images of "
                                              f"{Path(self.dataset_path).name} with {self._model_name()}", factory)
        self.pair_view.show_grad_progress(f"computing the Grad-CAM weights of {len(train):,} training images "
                                          "(see View ▸ Jobs)…")

    def _on_grad_bank(self, key, result) -> None:
        from dmlviewer.core.explain.grad_transfer import GradWeightBank

        if key is None or result is None:
            return
        try:
            bank = GradWeightBank(result["embeddings"], result["weights"])
        except ValueError as exc:
            self.pair_view.set_grad_bank(None, str(exc))
            return
        self._grad_banks[key] = bank
        if key == self._grad_key():
            self.pair_view.set_grad_bank(bank)

    def _swap_pair(self) -> None:
        """Swap: the reference becomes the query and the query the reference (roles, captions,
        retrieval and the explanation follow)."""
        if self.query_index is not None and self.reference_index is not None:
            self.set_pair(self.reference_index, self.query_index)

    def _restore_pair(self, previous) -> bool:
        """Show the last session's pair (``previous``, a ``LastSession``) when the same dataset
        is opened again."""
        ds = self.dataset
        if previous is None or not previous.query or not previous.dataset:
            return False
        try:
            same = Path(previous.dataset).resolve() == Path(self.dataset_path).resolve()
        except OSError:
            return False
        if not same:
            return False
        index = {p: i for i, p in enumerate(ds.paths)}
        query, reference = index.get(previous.query), index.get(previous.reference or "")
        if query is None:
            return False
        self.set_pair(query, reference)
        self.browser.select_index(query)
        return True

    def _choose_default_pair(self) -> None:
        ds = self.dataset
        if ds is None or len(ds) == 0:
            return
        test = ds.indices("test")
        query = int(test[0]) if len(test) else 0
        self.set_pair(query, self._default_reference(query))
        self.browser.select_index(query)

    def _default_reference(self, query: int) -> int:
        ds = self.dataset
        same = np.flatnonzero(ds.labels == ds.labels[query])
        same = same[same != query]
        return int(same[0]) if len(same) else (query + 1) % len(ds)

    def _caption(self, tag: str, index: int, query: int) -> str:
        ds = self.dataset
        name = ds.class_names[int(ds.labels[index])]
        color = "#2f80ed" if tag == "Q" else "#f2994a"
        same = ""
        if tag == "R":
            same = (" <span style='color:#27ae60'>same class</span>" if ds.labels[index] == ds.labels[query]
                    else " <span style='color:#eb5757'>different class</span>")
        file = ds.paths[index].rsplit("/", 1)[-1]
        return (f"<b style='color:{color}'>{'Query' if tag == 'Q' else 'Reference'}</b> "
                f"<b>{name}</b>{same} · {file} <span style='color:#888'>#{index}</span>")

    def _on_similarity(self, value) -> None:
        if value is not None and self.pair_view.comparing:  # both models' similarities
            b = self.pair_view.rows[1].similarity
            self.similarity_label.setText(f"A {value:+.4f} · B " + ("…" if b is None else f"{b:+.4f}"))
            self.similarity_label.setToolTip("cosine similarity of the pair under model A and model B")
            return
        self.similarity_label.setToolTip("")
        self.similarity_label.setText("similarity: preparing…" if value is None and self.model is not None
                                      else "" if value is None else f"similarity {value:+.4f}")

    def _hover_message(self, text: str) -> None:
        if text:
            self.statusBar().showMessage(text)
        else:
            self.statusBar().clearMessage()

    def _on_region(self, region: tuple) -> None:
        if self.pair_view.images is None:
            return
        self.retrieval_dock.show()
        self.retrieval_dock.raise_()
        self.retrieval.region_search(self.pair_view.images.query, region)

    def _on_problems(self, count: int) -> None:
        self.problems_dock.setWindowTitle(f"Problems ({count})" if count else "Problems")
        if count and not self.problems_dock.isVisible():
            self.problems_dock.show()
            self.problems_dock.raise_()

    # File dialogs open where the user's own files are (never in the package's resources or the
    # cache, where the demo lives): the current file's folder, else the output folder.
    def _ask_dataset(self, fmt: str | None) -> None:
        start = settings.start_dir(self.dataset_path and Path(self.dataset_path).parent,
                                   *settings.recent("datasets", self.settings)[:1], settings=self.settings)
        path = QFileDialog.getExistingDirectory(self, f"Open dataset{f' ({fmt})' if fmt else ''}", start)
        if path:
            self.open_dataset(path, fmt)

    def _ask_checkpoint(self) -> None:
        recent = [s.path for s in settings.recent_models(self.settings) if s.kind == "checkpoint"]
        start = settings.start_dir(self.checkpoint_path, *recent, settings=self.settings)
        path, _ = QFileDialog.getOpenFileName(self, "Open checkpoint", start, "Checkpoints (*.pt *.pth);;All files (*)")
        if path:
            self.open_checkpoint(path)

    def _ask_features(self) -> None:
        start = settings.start_dir(self.features_path, *settings.recent("features", self.settings),
                                   settings=self.settings)
        path, _ = QFileDialog.getOpenFileName(self, "Open features", start, "HDF5 features (*.h5 *.hdf5);;All files (*)")
        if path:
            self.open_features(path)

    def _ask_output_folder(self) -> None:
        current = settings.output_dir(self.settings)
        path = QFileDialog.getExistingDirectory(self, "Output folder (feature files, training runs)", str(current))
        if path:
            folder = settings.set_output_dir(path, self.settings)
            self.statusBar().showMessage(f"Outputs now go to {folder}", 8000)

    def _fill_recent(self, menu: QMenu, key: str) -> None:
        menu.clear()
        if key == "models":
            self._fill_recent_models(menu)
            return
        items = settings.recent(key, self.settings)
        if not items:
            menu.addAction("(none)").setEnabled(False)
            return
        opener = {"datasets": self.open_dataset, "features": self.open_features}[key]
        for path in items:
            action = menu.addAction(path)
            action.triggered.connect(lambda _=False, p=path: opener(p))
        menu.addSeparator()
        menu.addAction("Clear").triggered.connect(lambda: self.settings.setValue(f"recent/{key}", []))

    def _fill_recent_models(self, menu: QMenu) -> None:
        """Recent Models: every kind of source, reopened as what it is (in the background)."""
        from dmlviewer.core.models.naming import full_description
        from dmlviewer.core.session import kind_words

        sources = settings.recent_models(self.settings)
        for model, info, source in reversed(self._live_models):
            action = menu.addAction(f"{source.display()} (Python module, until you quit)")
            action.triggered.connect(lambda _=False, m=model, i=info, s=source: self.use_model(m, i, source=s))
        if not sources and not self._live_models:
            menu.addAction("(none)").setEnabled(False)
            return
        for source, name in zip(sources, settings.recent_model_names(sources, self.settings)):
            action = menu.addAction(name)
            action.setToolTip(full_description(source))
            action.setStatusTip(f"{kind_words(source.kind)}: {full_description(source)}")
            action.triggered.connect(lambda _=False, s=source: self.open_in_background(model=s))
        menu.addSeparator()
        menu.addAction("Clear").triggered.connect(lambda: settings.clear_recent_models(self.settings))

    def _ask_code_model(self) -> None:
        """File > Open Model from Code (gui/code_model_dialog.py); opened in the background."""
        from dmlviewer.gui.code_model_dialog import CodeModelDialog

        dialog = CodeModelDialog(self, source=self.model_source if getattr(self.model_source, "kind", "") == "code"
                                 else None)
        dialog.source_chosen.connect(lambda source: self.open_in_background(model=source))
        dialog.setAttribute(Qt.WA_DeleteOnClose)
        dialog.open()
        self.code_dialog = dialog

    def _save_screenshot(self) -> None:
        start = Path(settings.start_dir(self.settings.value("paths/screenshots", ""), settings=self.settings))
        path, _ = QFileDialog.getSaveFileName(self, "Save window image", str(start / "dmlviewer.png"),
                                              "PNG image (*.png);;JPEG image (*.jpg)")
        if path:
            self.save_window_image(path)

    def save_window_image(self, path: str | Path) -> Path | None:
        """Save the window as an image; a name without an image suffix gets ``.png``."""
        from PySide6.QtGui import QImageWriter

        path = Path(path)
        known = {bytes(f).decode().lower() for f in QImageWriter.supportedImageFormats()}
        if path.suffix.lower().lstrip(".") not in known:
            path = path.with_name(path.name + ".png")
        if not self.grab().save(str(path)):
            errors.show_error(self, "Save failed", f"Could not write {path}")
            return None
        self.settings.setValue("paths/screenshots", str(path.parent))
        self.statusBar().showMessage(f"Saved {path}", 8000)
        return path

    def _about(self) -> None:
        from dmlviewer import __version__

        QMessageBox.about(self, "About dmlviewer",
                          f"<b>dmlviewer</b> {__version__}<br>Point-to-point activation maps, Grad-CAM "
                          f"variants and group attention for deep metric learning.<br><br>Log folder: "
                          f"{settings.log_dir()}")

    # -- persistence
    def _restore_options(self) -> None:
        """The device from the settings; the display options from the last session (untrusted
        text: a value that cannot be used keeps its default), else from the keys older versions
        wrote. From then on every display change is remembered with the last session."""
        s = self.settings
        device = str(s.value("options/device", "cpu"))
        index = self.device_combo.findData(device)
        self.device_combo.setCurrentIndex(max(0, index))
        self.session.set_device(self.device_combo.currentData() or "cpu")
        self._show_device()
        from dmlviewer.core.session import LastSession

        values = LastSession.display_from_settings(settings.session_values(s)) or _older_display_options(s)
        skipped = self.session.display.update(values)
        if skipped:
            log.info("display options of the last session not restored (bad values): %s", ", ".join(skipped))
        self._observe(self.session.display.events.all, self._remember_session)

    def _save_options(self) -> None:
        """The last session (with its display options) and the window's geometry and docks."""
        self._remember_session()
        s = self.settings
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState(STATE_VERSION))
        s.sync()

    def _restore_layout(self) -> None:
        geometry = self.settings.value("window/geometry")
        state = self.settings.value("window/state")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
            clamp_to_screen(self)  # saved on a larger monitor: shrink and move it onto this one
        if isinstance(state, QByteArray):
            self.restoreState(state, STATE_VERSION)
            if self.width() < self.NARROW_WIDTH:  # restored onto a smaller screen: the pair view first
                QTimer.singleShot(0, self._default_dock_sizes)
        from dmlviewer.gui.dock_priority import DockPriority

        self.dock_priority = DockPriority(self)  # a window made narrow later: the docks give way

    def _reset_layout(self) -> None:
        for dock, area in ((self.browser_dock, Qt.LeftDockWidgetArea), (self.retrieval_dock, Qt.RightDockWidgetArea),
                           (self.problems_dock, Qt.BottomDockWidgetArea)):
            dock.setFloating(False)
            self.addDockWidget(area, dock)
            dock.show()
        self.problems_dock.hide()  # shown when there is a problem to list
        jobs = getattr(getattr(self, "tools", None), "jobs_dock", None)
        if jobs is not None:  # the status bar shows the running job; the dock opens on demand
            jobs.setFloating(False)
            self.addDockWidget(Qt.BottomDockWidgetArea, jobs)
            jobs.hide()
        self._default_dock_sizes()

    #: Below this window width the Retrieval dock shares the Dataset dock's column (as a tab),
    #: so that the pair view keeps at least about half of the width (issue 23 item 7).
    NARROW_WIDTH = 1100

    def _default_dock_sizes(self) -> None:
        """The pair view has priority: side docks at the width they need, one side column on a
        narrow window; bottom docks (problems, jobs) share one short strip."""
        jobs = getattr(getattr(self, "tools", None), "jobs_dock", None)
        if jobs is not None and not jobs.isFloating():
            self.tabifyDockWidget(self.problems_dock, jobs)  # hidden until asked for (status bar, View)
            if jobs.isVisible():
                self.resizeDocks([jobs], [min(170, self.height() // 5)], Qt.Vertical)
        compact = self.width() < 1500  # side docks at what they need, the pair view the rest
        browser = self.browser.minimumWidth() if compact else 400
        docked = [d for d in (self.browser_dock, self.retrieval_dock) if not d.isFloating()]
        guard = getattr(self, "dock_priority", None)
        if guard is not None:
            guard.narrow = self.width() < self.NARROW_WIDTH
        if self.width() < self.NARROW_WIDTH and len(docked) == 2:
            # One column for both: the Retrieval dock becomes a tab beside the Dataset dock.
            self.tabifyDockWidget(self.browser_dock, self.retrieval_dock)
            self.browser_dock.raise_()
            self.resizeDocks([self.browser_dock], [browser], Qt.Horizontal)
            return
        if self.retrieval_dock in self.tabifiedDockWidgets(self.browser_dock):  # wide again: its own side
            self.addDockWidget(Qt.RightDockWidgetArea, self.retrieval_dock)
        self.resizeDocks([self.browser_dock, self.retrieval_dock], [browser, 250 if compact else 300], Qt.Horizontal)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        if self._layout_pending:  # dock sizes only apply once the window has its size
            self._layout_pending = False
            # Devices need torch (seconds to import): looked up once the window is on screen.
            QTimer.singleShot(0, self._start_device_discovery)
            if not isinstance(self.settings.value("window/state"), QByteArray):
                QTimer.singleShot(0, self._default_dock_sizes)

    def _quit(self) -> None:
        """File > Quit: a person's close (asked about running jobs, as the close button is)."""
        self._user_close = True
        try:
            self.close()
        finally:
            self._user_close = False

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt API
        # Only a person is asked about running jobs (the close button: a spontaneous event, or
        # File > Quit); a close from code (``view(...).close()``, scripts, tests) cancels them
        # without asking: nobody may be there to answer a modal box (issue 26 item 6).
        if event.spontaneous() or self._user_close:
            if not confirm_close(self.runner, self):
                event.ignore()
                return
        elif self.runner.busy:
            log.info("window closed from code: cancelling the running jobs")
        self._save_options()
        self.shutdown()
        event.accept()

    def shutdown(self) -> None:
        """Stop background work (window closing, tests): jobs are cancelled (a cancelled
        training saves first), interactive runners and thumbnail decoding end."""
        self.runner.shutdown(30.0)
        self.pair_view.shutdown()
        self.group_tabs.shutdown()
        self.retrieval.shutdown()
        self.loader.set_visible("browser", [])
        self.loader.wait_idle(5000)
        for signal, callback in self._session_links:  # the session may outlive the window
            signal.disconnect(callback, missing_ok=True)
        self._session_links.clear()


def _older_display_options(values) -> dict:
    """The display options as versions before the session held them wrote them
    (``options/method`` … ``options/k``; the opacity in percent)."""
    out = {key: values.value(f"options/{key}") for key in ("method", "sign", "scale", "colormap")}
    out = {key: value for key, value in out.items() if value is not None}
    try:
        if values.value("options/opacity") is not None:
            out["opacity"] = float(values.value("options/opacity")) / 100.0
        if values.value("options/k") is not None:
            out["neighbours"] = int(values.value("options/k"))
    except (TypeError, ValueError):
        pass
    return out


def _under_lock(events, lock):
    """The events of a job generator, each step run while holding ``lock`` (the shared model's
    ``model_lock``): a device change, which moves the model under the lock, waits for the batch
    in progress, and the pair view's work interleaves with the job between batches."""
    try:
        while True:
            with lock:
                try:
                    event = next(events)
                except StopIteration:
                    return
            yield event
    finally:
        with lock:
            events.close()  # the model's mode is restored under the lock too


def model_summary(model) -> str:
    """One line: backbone, pooling, grouping head and embedding size; a two-branch model's
    branches as ``query / reference`` where they differ."""
    from dmlviewer.core.models.two_branch import BRANCHES, TwoBranchModel

    def parts(c: dict) -> tuple[str, str]:
        grouping = c.get("grouping", "none")
        head = c.get("pooling", "?") + ("" if grouping == "none" else f" + {grouping}-grouping ×{c.get('groups')}")
        return c.get("backbone", "?"), head

    if isinstance(model, TwoBranchModel):
        sides = [parts(model.branch(side).config) for side in BRANCHES]
        backbone, head = (" / ".join(dict.fromkeys(p[i] for p in sides)) for i in (0, 1))
        backbone = "two-branch " + backbone
    else:
        backbone, head = parts(model.config)
    return f"{backbone} · {head} · {getattr(model, 'dim', None) or model.config.get('dim', '?')}-d"


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

