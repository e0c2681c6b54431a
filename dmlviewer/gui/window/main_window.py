"""The main window: menus, toolbar, docks, status bar and the wiring between the views.

Layout: the pair view and the group attention tabs share the central tab area; the dataset
browser docks on the left, the retrieval panel on the right, the problems list at the bottom.
Dock layout, window geometry, recent files and display options persist in QSettings.

Opening a dataset, a model or a feature file (``opening``, gui/window/opening.py) is done on
the GUI thread with a busy cursor (reading a listing or a state dict takes well under a second)
or, at start-up, on a loading thread; everything heavier runs in the background (pair preparation and retrieval in ``LatestRunner``s, feature extraction in the
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
gui/doors/model_labels.py), the extraction and Grad-CAM weight jobs (``jobs``, gui/jobs/window_jobs.py),
reading and choosing the pair's images (``pairs``, gui/pair/pair_choice.py), opening files
(``opening``, gui/window/opening.py), the menus and toolbar (``menus``, gui/window/menus.py),
the device (``devices``, gui/window/device_choice.py) and the dock layout (``docks``,
gui/window/dock_layout.py).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDockWidget, QMainWindow, QMessageBox, QTabWidget, QWidget

from dmlviewer.core.session import Session
from dmlviewer.gui.common import errors
from dmlviewer.gui.window import settings
from dmlviewer.gui.retrieval.browser import DatasetBrowser
from dmlviewer.gui.doors.compare_model import CompareModel
from dmlviewer.gui.window.device_choice import DeviceChoice
from dmlviewer.gui.window.dock_layout import DockLayout
from dmlviewer.gui.window.menus import WindowMenus, icon
from dmlviewer.gui.window.opening import Opening
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
from dmlviewer.gui.jobs.runner import JobRunner, confirm_close

log = logging.getLogger(__name__)
#: The widest a model label in the status bar grows (one model; two share about this much).
MODEL_LABEL_WIDTH = 440


class MainWindow(QMainWindow):
    """See the module docstring. Public API (docs/internals.md, "gui"): ``open_dataset``,
    ``open_checkpoint``, ``open_model_source``, ``use_model``, ``open_features``, ``set_pair``,
    ``open_in_background``, ``add_tool_action``, ``open_compare``, ``stop_comparing``,
    ``label_model``; attributes ``session`` and ``runner``, the read-only views of the session
    ``dataset``, ``model``, ``features`` and the others below, and the parts in their own modules
    (``model_menus``, ``compare``, ``labels``, ``jobs``, ``pairs``, ``opening``, ``menus``,
    ``devices``, ``docks``)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("dmlviewer")
        self.setWindowIcon(icon("app"))
        self.settings = settings.app_settings()
        self.runner = JobRunner(self)
        self.model_lock = threading.RLock()
        self.session = Session()
        self._shown_pair: tuple = (None, None, None)  # the pair on screen (query, reference, reference_b)
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
        self.opening = Opening(self)
        self.jobs = WindowJobs(self)
        self.labels = ModelLabels(self)
        self.model_menus = ModelMenus(self, icon("checkpoint"))
        self.compare = CompareModel(self)

        self.devices = DeviceChoice(self.session, self.settings, self)  # the CPU until the devices are known
        self._build_status_bar()
        self.menus = WindowMenus(self)
        # the menus' parts under the names their callers outside use (tests, scripts)
        self.open_dataset_action = self.menus.open_dataset_action
        self.open_features_action = self.menus.open_features_action
        self.view_menu, self.tools_menu = self.menus.view_menu, self.menus.tools_menu
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
        self.device_combo = self.devices.combo  # in the toolbar (gui/window/menus.py)
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

    def _connect(self) -> None:
        self.browser.query_chosen.connect(lambda i: self.set_pair(i, self.reference_index))
        self.browser.reference_chosen.connect(lambda i: self.set_pair(self.query_index, i))
        self.retrieval.reference_chosen.connect(lambda i: self.set_pair(self.query_index, i))
        self.retrieval.extract_requested.connect(self.jobs.extract_features)
        self.retrieval.extract_b_requested.connect(lambda: self.jobs.extract_features("compare"))
        self.retrieval.reference_b_chosen.connect(lambda i: self.set_pair(self.query_index, self.reference_index, i))
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
        self._links.connect(events.label, self._on_label_changed)
        self._links.connect(events.pair, self._on_pair_changed)
        self._links.connect(events.features, self._on_features_changed)
        self._links.connect(events.device, self._on_device_changed)
        for event in (events.dataset, events.model, events.label, events.pair, events.features):
            self._links.connect(event, self._remember_session)  # after the panels: the last session on disk
        self.tabs.currentChanged.connect(lambda _i: self.statusBar().clearMessage())
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

    # -- what the window opens (gui/window/opening.py) and its menus (gui/window/menus.py): kept
    # here for their callers outside (tests, scripts, the tools)
    @property
    def loading(self) -> bool:
        """True while ``open_in_background``'s thread reads."""
        return self.opening.loading

    def open_dataset(self, path: str | Path, fmt: str | None = None) -> bool:
        """Open a dataset folder (see ``Opening.open_dataset``). False (and a dialog) on error."""
        return self.opening.open_dataset(path, fmt)

    def open_checkpoint(self, path: str | Path) -> bool:
        """Open a checkpoint or ``imagenet:BACKBONE`` (see ``Opening.open_checkpoint``)."""
        return self.opening.open_checkpoint(path)

    def open_model_source(self, source) -> bool:
        """Open a ``ModelSource`` on this thread (see ``Opening.open_model_source``)."""
        return self.opening.open_model_source(source)

    def open_features(self, path: str | Path, slot: str = "primary") -> bool:
        """Open an HDF5 feature file for retrieval with ``slot``'s model (see ``Opening.open_features``)."""
        return self.opening.open_features(path, slot)

    def open_in_background(self, dataset: str | None = None, fmt: str | None = None,
                           checkpoint=None, features: str | None = None,
                           demo: Callable[[], tuple] | None = None, model=None,
                           last_session: dict | None = None) -> None:
        """Open these files on a thread (see ``Opening.open_in_background``)."""
        self.opening.open_in_background(dataset, fmt, checkpoint, features, demo, model, last_session)

    def offer_import(self, path: str) -> QMessageBox:
        """Offer File > Import Model for a bare state dict (see ``Opening.offer_import``)."""
        return self.opening.offer_import(path)

    def open_import_dialog(self, files: list[str] | None = None):
        """File > Import Model, prefilled with ``files``."""
        return self.opening.open_import_dialog(files)

    def add_tool_action(self, action: QAction) -> None:
        """Add an entry to the Tools menu (training, evaluation and job views use this)."""
        self.menus.add_tool_action(action)

    def add_view_action(self, dock: QDockWidget, text: str | None = None) -> QAction:
        """A View menu entry that shows ``dock`` in front or hides it (``WindowMenus.add_view_action``)."""
        return self.menus.add_view_action(dock, text)

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

    def _on_label_changed(self, slot: str) -> None:
        """Session event: a model was given a name of the user's (File > Label Model A/B…)."""
        self._show_model_labels()
        entry = self.session.slot(slot)
        if slot == "compare" and entry is not None:
            self.pair_view.set_compare_model(entry.model, self.device, self.labels.display_name("compare"))

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
        """Session event: another dataset is open (the pair is cleared; see ``Opening._apply_dataset``;
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

    def set_pair(self, query_index: int | None, reference_index: int | None,
                 reference_b: int | None = None) -> None:
        """Make dataset images ``query_index``/``reference_index`` the pair (a missing reference
        defaults to another image of the query's class); ``reference_b``: model B's row shows
        the query against this image instead (issue 41: A's and B's top-1)."""
        if self.dataset is None or query_index is None:
            return
        if reference_index is None or reference_index == query_index:
            reference_index = self.pairs.default_reference(query_index)
        if reference_b == reference_index:
            reference_b = None
        if self.pairs.read(query_index, reference_index, reference_b) is None:
            return
        session = self.session
        if (query_index, reference_index, reference_b) == (self.query_index, self.reference_index,
                                                           session.reference_b):
            session.events.pair.emit()  # the same pair chosen again: shown again
        else:
            session.set_pair(query_index, reference_index, reference_b)

    def _on_pair_changed(self) -> None:
        """Session event: the pair changed (read by ``set_pair``; cleared with the dataset): the
        pair view shows its images (the group tabs follow it; the browser marks the session's
        pair itself)."""
        query, reference, reference_b = self.query_index, self.reference_index, self.session.reference_b
        if query is None or reference is None:
            self._shown_pair = (None, None, None)
            self.pair_view.set_pair(None)
            return
        pair = self.pairs.images(query, reference, reference_b)
        if pair is not None:
            self._shown_pair = (query, reference, reference_b)
            self.pair_view.set_pair(pair)
        elif self._shown_pair != (query, reference, reference_b):
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

    def _on_features_changed(self, slot: str = "primary") -> None:
        if slot != "primary":  # model B's features are searched exactly (no index of their own)
            return
        features = self.features
        self.index_keeper.set_features(features)

    # -- the last session and the recent models
    def _remember_session(self, *_args) -> None:
        """Session event: the last session (``settings.save_session``) follows what is open
        (not while the last session itself is being reopened)."""
        if self.loading:
            return
        settings.save_session(self.session.to_dict(), self.settings)

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

    # -- persistence
    def _restore_options(self) -> None:
        """The device shown (the CPU until the machine's devices are known, then the saved one:
        ``gui/window/device_choice.py``); the display options from the last session (untrusted
        text: a value that cannot be used keeps its default), else from the keys older versions
        wrote. From then on every display change is remembered with the last session."""
        s = self.settings
        self.devices.show()
        from dmlviewer.core.last_session import LastSession

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

    def close_as_user(self) -> None:
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
