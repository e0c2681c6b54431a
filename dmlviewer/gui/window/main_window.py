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
to it (the retrieval panel, the dataset browser, the group tabs and the status bar follow its
events; the pair view its display options; the group tabs take the pair's photographs and
explanation from the pair view), the last session is written from it, and a job's result is
shown only when ``session.accepts`` its stamp (results of a dataset or model closed meanwhile
are dropped).

Parts of the window live in their own modules, each held by an attribute: the File menu's doors
to a model and Recent Models (``model_menus``, gui/doors/model_menus.py), model B of a comparison
(``compare``, gui/doors/compare_model.py, issue 24), the models' names and labels (``labels``,
gui/doors/model_labels.py), the extraction and Grad-CAM weight jobs (``jobs``, gui/jobs/window_jobs.py), and
reading and choosing the pair's images (``pairs``, gui/pair/pair_choice.py).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication, QIcon, QKeySequence
from PySide6.QtWidgets import (QApplication, QDockWidget, QFileDialog, QLabel,
                               QMainWindow, QMenu, QMessageBox, QTabWidget, QToolBar, QWidget)

from dmlviewer.core.session import Session
from dmlviewer.gui.common import errors
from dmlviewer.gui.window import settings
from dmlviewer.gui.retrieval.browser import DatasetBrowser
from dmlviewer.gui.doors.compare_model import CompareModel
from dmlviewer.gui.window.device_choice import DeviceChoice
from dmlviewer.gui.window.dock_layout import DockLayout
from dmlviewer.gui.pair.group_tabs import GroupTabs
from dmlviewer.gui.doors.model_labels import ModelLabels, model_summary
from dmlviewer.gui.doors.model_menus import ModelMenus
from dmlviewer.gui.pair.pair_choice import PairChoice
from dmlviewer.gui.pair.pair_view import PairView
from dmlviewer.gui.common.problems import ProblemsList
from dmlviewer.gui.retrieval.retrieval_panel import RetrievalPanel
from dmlviewer.gui.retrieval.search_index import IndexKeeper
from dmlviewer.gui.window.session_links import SessionLinks
from dmlviewer.gui.retrieval.thumbnails import ThumbnailLoader
from dmlviewer.gui.common.widgets import fit_to_screen
from dmlviewer.gui.jobs.window_jobs import WindowJobs
from dmlviewer.gui.jobs.worker import JobRunner, confirm_close

log = logging.getLogger(__name__)
#: The widest a model label in the status bar grows (one model; two share about this much).
MODEL_LABEL_WIDTH = 440

from dmlviewer.core.data.format_names import FORMATS as DATASET_FORMATS  # noqa: E402


def _icon(name: str) -> QIcon:
    from dmlviewer.resources import resource_path

    path = resource_path(f"icon_{name}.svg")
    return QIcon(str(path)) if path.exists() else QIcon()


class MainWindow(QMainWindow):
    """See the module docstring. Public API (docs/internals.md, "gui"): ``open_dataset``,
    ``open_checkpoint``, ``open_model_source``, ``use_model``, ``open_features``, ``set_pair``,
    ``open_in_background``, ``add_tool_action``, ``open_compare``, ``stop_comparing``,
    ``label_model``; attributes ``session`` and ``runner``, the read-only views of the session
    ``dataset``, ``model``, ``features`` and the others below, and the parts in their own modules
    (``model_menus``, ``compare``, ``labels``, ``jobs``, ``pairs``)."""

    _loaded = Signal(object)  # open_in_background: what the loading thread read
    _loading_step = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("dmlviewer")
        self.setWindowIcon(_icon("app"))
        self.settings = settings.app_settings()
        self.runner = JobRunner(self)
        self.model_lock = threading.RLock()
        self.session = Session()
        self._shown_pair: tuple[int | None, int | None] = (None, None)  # the pair on screen
        self.loading = False  # files being read by open_in_background
        self._models_device = "cpu"  # where the open models are (the session's device once moved)
        self._links = SessionLinks()  # the session events this window follows
        self._user_close = False  # File > Quit: a person's close, asked about running jobs

        self.loader = ThumbnailLoader(parent=self)
        self.pair_view = PairView(model_lock=self.model_lock, session=self.session)
        self.group_tabs = GroupTabs(model_lock=self.model_lock, session=self.session)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.pair_view, "Pair explanation")
        self.tabs.addTab(self.group_tabs, "Group attention")
        self.setCentralWidget(self.tabs)

        self.browser = DatasetBrowser(self.loader, session=self.session)
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
        self.pairs = PairChoice(self)
        self.jobs = WindowJobs(self)
        self.labels = ModelLabels(self)
        self.model_menus = ModelMenus(self, _icon("checkpoint"))
        self.compare = CompareModel(self)

        self.devices = DeviceChoice(self.session, self.settings, self)  # the CPU until the devices are known
        self._build_status_bar()
        self._build_actions()
        self._connect()
        self.tools = self._install_tools()
        self.compare.install_tool()
        self._restore_options()
        fit_to_screen(self, 1500, 920)  # never larger than the screen (1366 x 768 laptops)
        self.docks = DockLayout(self)
        self.docks.restore(self.settings)

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
        from dmlviewer.gui.jobs.job_status import FittedLabel, JobStatus, MessageStatusBar

        bar = MessageStatusBar(self)
        self.setStatusBar(bar)
        self.job_status = JobStatus(self.runner)
        self.job_status.open_requested.connect(lambda: getattr(self, "tools", None) and self.tools.jobs_dock.toggle())
        bar.addPermanentWidget(self.job_status)
        self.device_label = self.devices.label
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
        self.model_menus.add_to(file_menu)
        file_menu.addMenu(self.compare.menu)  # File > Compare With Model, Stop Comparing (issue 24)
        file_menu.addAction(self.compare.stop_action)
        for action in self.labels.actions.values():  # a name of the user's for model A and B (issue 31 item 1)
            file_menu.addAction(action)
        file_menu.addSeparator()
        file_menu.addAction(self.open_features_action)
        file_menu.addMenu(self.recent_features_menu)
        file_menu.addSeparator()
        file_menu.addAction(self.output_folder_action)
        from dmlviewer.gui.window import export  # File > Export View (issue 33): figures drawn from the data

        file_menu.addAction(export.install(self))
        file_menu.addAction(save_shot)
        file_menu.addAction(quit_action)
        for menu_, key in ((self.recent_datasets_menu, "datasets"), (self.recent_features_menu, "features")):
            menu_.aboutToShow.connect(lambda m=menu_, k=key: self._fill_recent(m, k))

        self.view_menu = view_menu = menu.addMenu("&View")
        for dock in (self.browser_dock, self.retrieval_dock, self.problems_dock):
            self.add_view_action(dock)
        self._view_separator = view_menu.addSeparator()
        reset = view_menu.addAction("Reset Layout")
        reset.triggered.connect(lambda: self.docks.reset())

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
        bar.addAction(self.model_menus.open_checkpoint_action)
        bar.addAction(self.open_features_action)
        bar.addSeparator()
        bar.addWidget(QLabel(" Device "))
        self.device_combo = self.devices.combo
        bar.addWidget(self.device_combo)
        self.addToolBar(bar)
        self.toolbar = bar

    def _connect(self) -> None:
        self.browser.query_chosen.connect(lambda i: self.set_pair(i, self.reference_index))
        self.browser.reference_chosen.connect(lambda i: self.set_pair(self.query_index, i))
        self.retrieval.reference_chosen.connect(lambda i: self.set_pair(self.query_index, i))
        self.retrieval.extract_requested.connect(self.jobs.extract_features)
        self.loader.failed.connect(lambda _i, path, reason: self.problems.add_problem(path, reason))
        self.problems.count_changed.connect(self._on_problems)
        self.pair_view.status_message.connect(self._hover_message)
        self.group_tabs.status_message.connect(self._hover_message)
        self.pair_view.similarity_changed.connect(self._on_similarity)
        self.pair_view.images_changed.connect(self.group_tabs.set_pair)
        self.pair_view.pair_ready.connect(self.group_tabs.set_explanation)
        self.pair_view.region_query.connect(self._on_region)
        self.retrieval.whole_image_chosen.connect(self.pair_view.clear_region)
        self.pair_view.swap_handler = self._swap_pair
        self.pair_view.grad_bank_needed.connect(self.jobs.compute_grad_bank)
        self.runner.job_finished.connect(self.jobs.on_job_finished)
        self.runner.job_failed.connect(self.jobs.on_job_failed)
        self.runner.job_cancelled.connect(self.jobs.on_job_cancelled)
        events = self.session.events
        self._links.connect(events.dataset, self._on_dataset_changed)
        self._links.connect(events.model, self._on_model_changed)
        self._links.connect(events.pair, self._on_pair_changed)
        self._links.connect(events.features, self._on_features_changed)
        self._links.connect(events.device, self._on_device_changed)
        for event in (events.dataset, events.model, events.pair, events.features):
            self._links.connect(event, self._remember_session)  # after the panels: the last session on disk
        self.tabs.currentChanged.connect(lambda _i: self.statusBar().clearMessage())
        self._loaded.connect(self._on_loaded)
        self._loading_step.connect(self._on_loading_step)
        self.devices.notice.connect(self.statusBar().showMessage)

    def _install_tools(self):
        """Training, evaluation, localization, embedding and jobs (gui/window/tools.py) in the Tools
        menu; the window works without them if they cannot be set up."""
        try:
            from dmlviewer.gui.window.tools import install_tools

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
            errors.report_exception(self, "Cannot open dataset", exc, path=path)
            return False
        self._apply_dataset(dataset, path, fmt)
        return True

    def _apply_dataset(self, dataset, path: str, fmt: str | None, previous=None) -> None:
        """``previous``: the last session as read before anything was opened (default: now)."""
        if previous is None:
            previous = self._last_session()  # read before the session (and so the settings) change
        self.session.set_dataset(dataset, path, fmt)
        settings.add_recent("datasets", path, self.settings)
        if not self.pairs.restore(previous):
            self.pairs.choose_default()

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

            self.statusBar().showMessage(f"{self.labels.display_name()}: preprocessing assumed "
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
            self.model_menus.remember_live(model, info, source)
        # Not under model_lock: the observers may wait for workers that take it.
        self.session.set_model(model, {**info, "label": label or source.display()}, source)

    def _on_model_changed(self, slot: str) -> None:
        """Session event: the model of ``slot`` changed (the primary one is on screen; the
        compare one is model B of the pair view; the group tabs follow the session's)."""
        self._show_model_labels()
        if slot == "compare":
            self.compare.on_changed()
            return
        self.jobs.drop_stale()
        model = self.model
        if model is None:
            return
        self.pair_view.set_model(model, self.device)
        bank = self.jobs.known_grad_bank()
        if bank is not None:
            self.pair_view.set_grad_bank(bank)

    def _show_model_labels(self) -> None:
        """The status bar's model labels: the open model's architecture, and while comparing "A: …"
        and "B: …" (their names); the window title names the models (their distinct names,
        ``core.models.naming``), the tooltips their files, architecture and preprocessing."""
        from dmlviewer.core.models.naming import describe_preprocessing, full_description

        comparing = self.session.slot("compare") is not None
        names = self.labels.names()
        self.labels.update_actions(names)
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
        if self.compare.tool_window is not None:
            self.compare.tool_window.refresh()
        title = "dmlviewer" + (f": {Path(self.dataset_path).name}" if self.dataset is not None else "")
        if comparing:
            title += f" — A: {names['primary']} vs B: {names['compare']}"
        elif "primary" in names:
            title += f" — {names['primary']}"
        self.setWindowTitle(title)

    # -- model B and the labels: kept here for their callers outside (tests, scripts)
    def label_model(self, slot: str, label: str | None) -> None:
        """Give the model of ``slot`` a label of the user's (see ``ModelLabels.label_model``)."""
        self.labels.label_model(slot, label)

    def open_compare(self, source) -> None:
        """Open ``source`` as model B in the background (see ``CompareModel.open``)."""
        self.compare.open(source)

    def stop_comparing(self) -> None:
        """File > Stop Comparing (see ``CompareModel.stop``)."""
        self.compare.stop()

    def show_compare_window(self):
        """Tools > Compare Models (see ``CompareModel.show_tool_window``)."""
        return self.compare.show_tool_window()

    def _on_dataset_changed(self) -> None:
        """Session event: another dataset is open (the pair is cleared; see ``_apply_dataset``;
        the browser follows the session's)."""
        dataset, path = self.dataset, self.dataset_path
        self.jobs.drop_stale()
        self.pairs.forget()
        self.pair_view.set_grad_bank(self.jobs.known_grad_bank())
        self.problems.clear_problems()
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
        path = None if source is None else (source.path if source.kind == "checkpoint" else source.weights)
        errors.report_exception(self, title, exc, path=path)

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
        from dmlviewer.gui.doors.import_dialog import ImportDialog

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
            errors.report_exception(self, "Cannot open features", exc, path=path)
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
            self.compare.forget_loads()  # a File > Compare With Model still loading is older than this
            self.compare.use(model, info, source)
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
            reference_index = self.pairs.default_reference(query_index)
        if self.pairs.read(query_index, reference_index) is None:
            return
        if (query_index, reference_index) == (self.query_index, self.reference_index):
            self.session.events.pair.emit()  # the same pair chosen again: shown again
        else:
            self.session.set_pair(query_index, reference_index)

    def _on_pair_changed(self) -> None:
        """Session event: the pair changed (read by ``set_pair``; cleared with the dataset): the
        pair view shows its images (the group tabs follow it; the browser marks the session's
        pair itself)."""
        query, reference = self.query_index, self.reference_index
        if query is None or reference is None:
            self._shown_pair = (None, None)
            self.pair_view.set_pair(None)
            return
        pair = self.pairs.images(query, reference)
        if pair is not None:
            self._shown_pair = (query, reference)
            self.pair_view.set_pair(pair)
        elif self._shown_pair != (query, reference):
            # a pair whose images cannot be read (set on the session from Python; ``set_pair``
            # reads them first), said in a dialog: the session goes back to the pair on screen,
            # so that the browser's marks and the pair view agree
            self.session.set_pair(*self._shown_pair)

    def set_device(self, device: str) -> None:
        """Run the models on ``device`` (:meth:`DeviceChoice.choose`: a device name that cannot
        be used is said in a dialog)."""
        self.devices.choose(device)

    def _on_device_changed(self) -> None:
        """Session event (the device combo, or a notebook's ``session.set_device``): the models
        move to the session's device under the model lock. Extraction and Grad-CAM weights run
        on the device they started on: cancelled before the move, the extraction started again
        after. A device that cannot take the models is said in a dialog and the previous one
        comes back."""
        device, previous = self.device, self._models_device
        restart = self.jobs.cancel_model_jobs()
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
        self.devices.show()
        if self.model is not None:
            self.pair_view.set_model(self.model, device)
        compare = self.session.slot("compare")
        if compare is not None:  # model B runs on the same device
            self.pair_view.set_compare_model(compare.model, device, self.labels.display_name("compare"))
        if "extract" in restart:
            self.jobs.extract_features()

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

    def _swap_pair(self) -> None:
        """Swap: the reference becomes the query and the query the reference (roles, captions,
        retrieval and the explanation follow)."""
        if self.query_index is not None and self.reference_index is not None:
            self.set_pair(self.reference_index, self.query_index)

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
        """The device shown (the CPU until the machine's devices are known, then the saved one:
        ``gui/window/device_choice.py``); the display options from the last session (untrusted
        text: a value that cannot be used keeps its default), else from the keys older versions
        wrote. From then on every display change is remembered with the last session."""
        s = self.settings
        self.devices.show()
        from dmlviewer.core.session import LastSession

        values = LastSession.display_from_settings(settings.session_values(s)) or _older_display_options(s)
        skipped = self.session.display.update(values)
        if skipped:
            log.info("display options of the last session not restored (bad values): %s", ", ".join(skipped))
        self._links.connect(self.session.display.events.all, self._remember_session)

    def _save_options(self) -> None:
        """The last session (with its display options) and the window's geometry and docks."""
        self._remember_session()
        s = self.settings
        self.docks.save(s)
        s.sync()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        if self._layout_pending:  # dock sizes only apply once the window has its size
            self._layout_pending = False
            # Devices need torch (seconds to import): looked up once the window is on screen.
            QTimer.singleShot(0, self.devices.discover)
            self.docks.first_shown(self.settings)

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
        self.browser.shutdown()
        self.loader.set_visible("browser", [])
        self.loader.wait_idle(5000)
        self._links.close()  # the session may outlive the window


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

