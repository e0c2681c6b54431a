"""The main window: menus, toolbar, docks, status bar and the wiring between the views.

Layout: the pair view and the group attention tabs share the central tab area; the dataset
browser docks on the left, the retrieval panel on the right, the problems list at the bottom.
Dock layout, window geometry, recent files and display options persist in QSettings.

Opening a dataset or a checkpoint is done on the GUI thread with a busy cursor (reading a
listing or a state dict takes well under a second); everything heavier runs in the
background (pair preparation and retrieval in ``LatestRunner``s, feature extraction in the
``JobRunner`` queue that the jobs view of the Tools menu shows). Every failure becomes a dialog
with the traceback as details; the window stays usable.
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

DATASET_FORMATS = ["cub", "cars196", "sop", "inshop", "folder"]
#: Bumped when the dock layout changes incompatibly (old saved states are then ignored).
STATE_VERSION = 1


def _icon(name: str) -> QIcon:
    from dmlviewer.resources import resource_path

    path = resource_path(f"icon_{name}.svg")
    return QIcon(str(path)) if path.exists() else QIcon()


class MainWindow(QMainWindow):
    """See the module docstring. Public API (docs/internals.md, "gui"): ``open_dataset``,
    ``open_checkpoint``, ``open_features``, ``set_pair``, ``add_tool_action``; attributes
    ``runner``, ``dataset``, ``model``, ``features``."""

    dataset_changed = Signal(object)
    model_changed = Signal(object)
    features_changed = Signal(object)
    _loaded = Signal(object)  # open_in_background: what the loading thread read
    _loading_step = Signal(str)
    _devices_found = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("dmlviewer")
        self.setWindowIcon(_icon("app"))
        self.settings = settings.app_settings()
        self.runner = JobRunner(self)
        self.model_lock = threading.RLock()
        self.dataset = None
        self.dataset_path: str | None = None
        self.dataset_format: str | None = None
        self.model = None
        self.checkpoint_info: dict | None = None
        self.checkpoint_path: str | None = None
        self.features = None
        self.features_path: str | None = None
        self.device = "cpu"
        self.query_index: int | None = None
        self.reference_index: int | None = None
        self.loading = False  # files being read by open_in_background
        self._extract_job = None
        self._extract_sha: str | None = None  # the checkpoint the running extraction belongs to
        self._grad_job = None
        self._grad_job_key: tuple | None = None
        self._grad_banks: dict[tuple, object] = {}  # (checkpoint sha, dataset) -> GradWeightBank

        self.loader = ThumbnailLoader(parent=self)
        self.pair_view = PairView(model_lock=self.model_lock)
        self.group_tabs = GroupTabs(model_lock=self.model_lock)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.pair_view, "Pair explanation")
        self.tabs.addTab(self.group_tabs, "Group attention")
        self.setCentralWidget(self.tabs)

        self.browser = DatasetBrowser(self.loader)
        self.browser.setMinimumWidth(2 * self.browser.view.gridSize().width() + 40)  # two columns at least
        self.retrieval = RetrievalPanel(self.loader, model_lock=self.model_lock)
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
        self._restore_options()
        fit_to_screen(self, 1500, 920)  # never larger than the screen (1366 x 768 laptops)
        self._restore_layout()

    # -- construction
    def _dock(self, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _build_status_bar(self) -> None:
        bar = self.statusBar()
        self.device_label = QLabel()
        self.model_label = QLabel("no model")
        self.dataset_label = QLabel("no dataset")
        self.similarity_label = QLabel("")
        self.similarity_label.setObjectName("similarityLabel")
        for label in (self.similarity_label, self.dataset_label, self.model_label, self.device_label):
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
        self.recent_checkpoints_menu = QMenu("Recent Checkpoints", self)
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
        quit_action.triggered.connect(self.close)
        file_menu.addAction(self.open_dataset_action)
        file_menu.addMenu(self.open_as_menu)
        file_menu.addMenu(self.recent_datasets_menu)
        file_menu.addSeparator()
        file_menu.addAction(self.open_checkpoint_action)
        file_menu.addMenu(self.recent_checkpoints_menu)
        from dmlviewer.gui.import_dialog import import_action

        file_menu.addAction(import_action(self))
        from dmlviewer.gui.pretrained_dialog import pretrained_action

        self.open_pretrained_action = pretrained_action(self)
        file_menu.addAction(self.open_pretrained_action)
        file_menu.addSeparator()
        file_menu.addAction(self.open_features_action)
        file_menu.addMenu(self.recent_features_menu)
        file_menu.addSeparator()
        file_menu.addAction(self.output_folder_action)
        file_menu.addAction(save_shot)
        file_menu.addAction(quit_action)
        for menu_, key in ((self.recent_datasets_menu, "datasets"), (self.recent_checkpoints_menu, "checkpoints"),
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
        self.pair_view.swap_handler = self._swap_pair
        self.pair_view.grad_bank_needed.connect(self._compute_grad_bank)
        self.device_combo.currentIndexChanged.connect(lambda _i: self.set_device(self.device_combo.currentData()))
        self.runner.job_finished.connect(self._on_job_finished)
        self.runner.job_failed.connect(self._on_job_failed)
        self.runner.job_cancelled.connect(self._on_job_cancelled)
        self.tabs.currentChanged.connect(lambda _i: self.statusBar().clearMessage())
        self._loaded.connect(self._on_loaded)
        self._loading_step.connect(self._on_loading_step)
        self._devices_found.connect(self._on_devices)

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

        path = str(Path(path).expanduser())
        try:
            with _busy():
                dataset = open_dataset(path, format=fmt)
        except Exception as exc:  # noqa: BLE001 - every failure reaches the user
            errors.report_exception(self, "Cannot open dataset", exc)
            return False
        self._apply_dataset(dataset, path, fmt)
        return True

    def _apply_dataset(self, dataset, path: str, fmt: str | None) -> None:
        previous = {key: str(self.settings.value(f"session/{key}", "") or "")
                    for key in ("dataset", "query", "reference")}
        self.dataset = dataset
        self.dataset_path = path
        self.dataset_format = fmt
        self.query_index = self.reference_index = None
        self.pair_view.set_grad_bank(self._grad_banks.get(self._grad_key()))
        self.problems.clear_problems()
        self.browser.set_dataset(dataset)
        self.retrieval.set_dataset(dataset)
        if self.features is not None and not self._features_match(self.features):
            self._set_features(None, None)
        settings.add_recent("datasets", path, self.settings)
        self.settings.setValue("session/dataset", path)
        self.settings.setValue("session/format", fmt or "")
        self.dataset_label.setText(f"{Path(path).name} ({dataset.format}): {len(dataset):,} images, "
                                   f"{dataset.num_classes} classes")
        self.setWindowTitle(f"dmlviewer: {Path(path).name}")
        self.dataset_changed.emit(dataset)
        if not self._restore_pair(previous):
            self._choose_default_pair()

    def open_checkpoint(self, path: str | Path) -> bool:
        """Load a checkpoint (or ``imagenet:BACKBONE``, a pretrained backbone) on the selected
        device. False (and a dialog) on error."""
        from dmlviewer.core.models import PRETRAINED_PREFIX, open_model

        path = str(path) if str(path).startswith(PRETRAINED_PREFIX) else str(Path(path).expanduser())
        try:
            with _busy():
                model, info = open_model(path, device=self.device)
        except Exception as exc:  # noqa: BLE001
            errors.report_exception(self, "Cannot open checkpoint", exc)
            return False
        settings.add_recent("checkpoints", path, self.settings)
        self.settings.setValue("session/checkpoint", path)
        self.use_model(model, info, path)
        return True

    def use_model(self, model, info: dict, label: str) -> None:
        """Show ``model`` (any dmlviewer model: from a checkpoint, a pretrained backbone or a
        live module, see ``core.models.open_model``) with ``info`` from ``open_model``."""
        with self.model_lock:
            self.model = model
        self.checkpoint_info = info
        self.checkpoint_path = info.get("path")
        rule = info.get("rule") or ""
        self.model_label.setText(" · ".join(filter(None, (model_summary(model), rule_summary(rule)))))
        self.model_label.setToolTip(f"{label}\nepoch {info.get('epoch')}\nsha256 {(info.get('sha256') or '')[:16]}…\n"
                                    f"decomposition: {rule}")
        if self._extract_job is not None and self._extract_sha != info.get("sha256"):
            self.runner.cancel(self._extract_job)  # features of the previous model: not needed now
            self._extract_job = None
        self.pair_view.set_model(model, self.device)
        if self._grad_key() in self._grad_banks:
            self.pair_view.set_grad_bank(self._grad_banks[self._grad_key()])
        self.group_tabs.set_model(model)
        if self.pair_view.images is not None:
            self.group_tabs.set_pair(self.pair_view.images)
        # The retrieval panel checks the features' checkpoint_sha256 against this one and asks
        # for this model's features when they differ (never another model's neighbours).
        self.retrieval.set_model(model, self.device, info.get("sha256"))
        self.model_changed.emit(model)

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
        self._set_features(features, path, chosen=True)
        settings.add_recent("features", path, self.settings)
        mismatch = self.retrieval.mismatch()
        if mismatch:
            self.statusBar().showMessage(f"{Path(path).name}: {mismatch}", 15000)

    def open_in_background(self, dataset: str | None = None, fmt: str | None = None,
                           checkpoint: str | None = None, features: str | None = None,
                           demo: Callable[[], tuple] | None = None) -> None:
        """Open these files without blocking the window: a thread reads them (the torch import,
        the checkpoint, the listing), then they are applied here as ``open_*`` would. ``demo``:
        a function giving ``(dataset folder, checkpoint or None)`` to open instead (the app's
        ``demo_paths``, which may first generate the data). Failures become the same dialogs.
        ``loading`` is True meanwhile."""
        self.loading = True
        self.pair_view.info.setText("Loading…")
        self.statusBar().showMessage("Loading…")

        def work() -> None:
            from dmlviewer.core.models import PRETRAINED_PREFIX  # torch: imported in this thread

            result: dict = {"errors": [], "format": fmt}

            def step(text: str) -> None:
                try:
                    self._loading_step.emit(text)
                except RuntimeError:  # the window is gone
                    pass

            nonlocal dataset, checkpoint
            if demo is not None:
                try:
                    step("Preparing the demo dataset (generated on the first start, a few seconds)…")
                    root, shipped = demo()
                    dataset, checkpoint = str(root), checkpoint or (str(shipped) if shipped else None)
                    if shipped is None:
                        result["notice"] = ("No demo checkpoint in this build (resources/demo_checkpoint.pt): "
                                            "open a checkpoint.")
                except Exception as exc:  # noqa: BLE001
                    result["errors"].append(("Cannot prepare the demo", exc))
            for key, title, path, opener in (
                    ("checkpoint", "Cannot open checkpoint", checkpoint, self._read_checkpoint),
                    ("dataset", "Cannot open dataset", dataset, lambda p: _read_dataset(p, fmt)),
                    ("features", "Cannot open features", features, _read_features)):
                if not path:
                    continue
                step(f"Loading the {key} {Path(path).name}…")
                if not (key == "checkpoint" and str(path).startswith(PRETRAINED_PREFIX)):
                    path = str(Path(path).expanduser())
                try:
                    result[key] = (opener(path), path)
                except Exception as exc:  # noqa: BLE001 - reported as a dialog
                    result["errors"].append((title, exc))
            try:
                self._loaded.emit(result)
            except RuntimeError:
                pass

        threading.Thread(target=work, name="dmlviewer-open", daemon=True).start()

    def _read_checkpoint(self, path: str):
        from dmlviewer.core.models import open_model, resolve_device

        try:
            device = str(resolve_device(self.device))
        except ValueError:  # a device saved on another machine
            device = "cpu"
        return open_model(path, device=device)

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
        if "checkpoint" in result:
            (model, info), path = result["checkpoint"]
            settings.add_recent("checkpoints", path, self.settings)
            self.settings.setValue("session/checkpoint", path)
            self.use_model(model, info, path)
        if "dataset" in result:
            dataset, path = result["dataset"]
            self._apply_dataset(dataset, path, result["format"])
        if "features" in result:
            features, path = result["features"]
            self._apply_features(features, path)
        if self.dataset is None and self.model is None:
            self.pair_view.set_pair(None)
        if self.pair_view.images is None:  # no pair could be shown: say what to do, not "Loading…"
            self.pair_view.info.setText("Choose a query (click) and a reference (Ctrl+click) in the dataset."
                                        if self.dataset is not None else
                                        "Open a dataset and a checkpoint, then choose a query and a reference.")
        for title, exc in result["errors"]:
            errors.report_exception(self, title, exc)
        if result.get("notice"):
            self.statusBar().showMessage(result["notice"])

    def set_pair(self, query_index: int | None, reference_index: int | None) -> None:
        """Make dataset images ``query_index``/``reference_index`` the pair (a missing reference
        defaults to another image of the query's class)."""
        from dmlviewer.core.data import load_dataset_image

        ds = self.dataset
        if ds is None or query_index is None:
            return
        if reference_index is None or reference_index == query_index:
            reference_index = self._default_reference(query_index)
        images = []
        for index in (query_index, reference_index):
            try:
                images.append(load_dataset_image(ds, index))
            except Exception as exc:  # noqa: BLE001
                self.problems.add_problem(str(ds.abspath(index)), str(getattr(exc, "reason", exc)))
                errors.report_exception(self, "Cannot read image", exc)
                return
        self.query_index, self.reference_index = query_index, reference_index
        pair = PairImages(images[0], images[1], self._caption("Q", query_index, query_index),
                          self._caption("R", reference_index, query_index))
        self.pair_view.set_pair(pair)
        self.group_tabs.set_pair(pair)
        self.browser.set_marks(query_index, reference_index)
        self.retrieval.set_query(query_index)
        self.settings.setValue("session/query", ds.paths[query_index])
        self.settings.setValue("session/reference", ds.paths[reference_index])

    def set_device(self, device: str) -> None:
        """Run the model on ``device`` (moves the loaded model and re-prepares the pair)."""
        if device == self.device or not device:
            return
        try:
            from dmlviewer.core.models import resolve_device

            resolved = str(resolve_device(device))
            with self.model_lock:
                if self.model is not None:
                    self.model.to(resolved)
        except Exception as exc:  # noqa: BLE001
            errors.report_exception(self, "Cannot use device", exc)
            self.device_combo.setCurrentIndex(max(0, self.device_combo.findData(self.device)))
            return
        self.device = resolved
        self.settings.setValue("options/device", device)
        self.device_label.setText(f"device: {resolved}")
        if self.model is not None:
            self.pair_view.set_model(self.model, resolved)
            self.retrieval.set_model(self.model, resolved, (self.checkpoint_info or {}).get("sha256"))

    def extract_features(self) -> None:
        """Embed the open dataset with the current model in the job queue; open the HDF5 file."""
        if self.model is None or self.dataset is None or self._extract_job is not None:
            return
        sha = (self.checkpoint_info or {}).get("sha256")
        out = self._features_path()
        if out.exists():
            self._open_extracted(out, sha)
            return
        from dmlviewer.core.evaluate.extract import extract_features

        model, dataset, device = self.model, self.dataset, self.device

        def factory(cancel):
            return extract_features(model, dataset, out, batch_size=32, device=device, num_workers=0,
                                    cancel=cancel, checkpoint_sha256=sha)

        self._extract_sha = sha
        self._extract_job = self.runner.submit(f"Extract features of {Path(self.dataset_path).name}", factory)
        self.retrieval.source.setText(f"Computing the features of the dataset with the open model into "
                                      f"{out.parent} (see View ▸ Jobs)…")

    # -- internals
    def _features_path(self) -> Path:
        """Where the features of the open dataset under the open model are written: the output
        folder (visible, changeable under File ▸ Output Folder), one file per (checkpoint,
        dataset), named after both."""
        sha = (self.checkpoint_info or {}).get("sha256") or hashlib.sha256(str(self.checkpoint_path).encode()).hexdigest()
        where = hashlib.sha256(str(Path(self.dataset_path).resolve()).encode()).hexdigest()[:8]
        model = Path(self.checkpoint_path or "model").stem
        folder = settings.output_dir(self.settings) / "features"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{Path(self.dataset_path).name}-{model}-{sha[:12]}-{where}.h5"

    def _open_extracted(self, path: str | Path, sha: str | None) -> None:
        """Open features this window extracted, unless another checkpoint was opened meanwhile."""
        if sha != (self.checkpoint_info or {}).get("sha256"):
            return
        from dmlviewer.core.evaluate import read_features

        try:
            features = read_features(path)
        except Exception as exc:  # noqa: BLE001
            errors.report_exception(self, "Cannot open features", exc)
            return
        self._set_features(features, str(path))

    def _on_job_finished(self, job, result) -> None:
        if job is self._extract_job:
            self._extract_job = None
            path = (result or {}).get("path") if isinstance(result, dict) else None
            if path:
                self._open_extracted(path, self._extract_sha)
        elif job is self._grad_job:
            self._grad_job = None
            key, result = result if isinstance(result, tuple) else (None, None)
            self._on_grad_bank(key, result)

    def _on_job_failed(self, job, text: str) -> None:
        if job is self._extract_job:
            self._extract_job = None
        first, details = errors.split_failure(text)
        if job is self._grad_job:
            self._grad_job = None
            self.pair_view.set_grad_bank(None, f"the Grad-CAM weights could not be computed: {first}")
        errors.show_error(self, f"Job failed: {job.name}", first, details)

    def _on_job_cancelled(self, job) -> None:
        if job is self._extract_job:
            self._extract_job = None
        elif job is self._grad_job:
            self._grad_job = None
            self.pair_view.show_grad_progress("cancelled; choose the map again to restart it.")

    def _set_features(self, features, path: str | None, chosen: bool = False) -> None:
        self.features = features
        self.features_path = path
        self.settings.setValue("session/features", path or "")
        self.retrieval.set_features(features, chosen=chosen)
        self.index_keeper.set_features(features)
        self.features_changed.emit(features)

    # -- grad-weight transfer
    def _grad_key(self) -> tuple:
        return ((self.checkpoint_info or {}).get("sha256"), self.dataset_path)

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
        if self._grad_job is not None and not self._grad_job.ended:
            if self._grad_job_key == key:
                return
            self.runner.cancel(self._grad_job)  # weights of another model or dataset
        from dmlviewer.core.explain.grad_transfer import compute_grad_weights

        model, device = self.model, self.device

        def factory(cancel):
            for event in compute_grad_weights(model, train, device=device, cancel=cancel):
                if event.kind == "done":
                    event.data["result"] = (key, event.data["result"])
                yield event

        self._grad_job_key = key
        self._grad_job = self.runner.submit(f"Grad-CAM weights of {len(train):,} training images", factory)
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

    def _restore_pair(self, previous: dict) -> bool:
        """Show the last session's pair when the same dataset is opened again."""
        ds = self.dataset
        if not previous.get("query") or not previous.get("dataset"):
            return False
        try:
            same = Path(previous["dataset"]).resolve() == Path(self.dataset_path).resolve()
        except OSError:
            return False
        if not same:
            return False
        index = {p: i for i, p in enumerate(ds.paths)}
        query, reference = index.get(previous["query"]), index.get(previous.get("reference", ""))
        if query is None:
            return False
        self.set_pair(query, reference)
        self.browser.select_index(query)
        return True

    def _features_match(self, features) -> bool:
        """Do the features' paths belong to the open dataset? (checked on a sample)"""
        if self.dataset is None:
            return True
        sample = {str(p) for p in features.paths[:50]}
        return any(p in sample for p in self.dataset.paths)  # one scan, no index of every path

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
        start = settings.start_dir(self.checkpoint_path, *settings.recent("checkpoints", self.settings),
                                   settings=self.settings)
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
        items = settings.recent(key, self.settings)
        if not items:
            menu.addAction("(none)").setEnabled(False)
            return
        opener = {"datasets": self.open_dataset, "checkpoints": self.open_checkpoint,
                  "features": self.open_features}[key]
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
        s = self.settings
        device = str(s.value("options/device", "cpu"))
        index = self.device_combo.findData(device)
        self.device_combo.setCurrentIndex(max(0, index))
        self.device = self.device_combo.currentData() or "cpu"
        self.device_label.setText(f"device: {self.device}")
        pv = self.pair_view
        for key, combo in (("method", pv.method_combo), ("sign", pv.sign_combo), ("scale", pv.scale_combo),
                           ("colormap", pv.cmap_combo)):
            value = s.value(f"options/{key}")
            if value is not None and combo.findData(value) >= 0:
                combo.setCurrentIndex(combo.findData(value))
        pv.opacity.setValue(int(s.value("options/opacity", pv.opacity.value())))
        self.retrieval.k_spin.setValue(int(s.value("options/k", self.retrieval.k_spin.value())))

    def _save_options(self) -> None:
        s = self.settings
        pv = self.pair_view
        for key, combo in (("method", pv.method_combo), ("sign", pv.sign_combo), ("scale", pv.scale_combo),
                           ("colormap", pv.cmap_combo)):
            s.setValue(f"options/{key}", combo.currentData())
        s.setValue("options/opacity", pv.opacity.value())
        s.setValue("options/k", self.retrieval.k_spin.value())
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

    def _reset_layout(self) -> None:
        for dock, area in ((self.browser_dock, Qt.LeftDockWidgetArea), (self.retrieval_dock, Qt.RightDockWidgetArea),
                           (self.problems_dock, Qt.BottomDockWidgetArea)):
            dock.setFloating(False)
            self.addDockWidget(area, dock)
            dock.show()
        self._default_dock_sizes()

    def _default_dock_sizes(self) -> None:
        """Side docks at a useful width; bottom docks (problems, jobs) share one short strip."""
        jobs = getattr(self.tools, "jobs_dock", None)
        if jobs is not None and not jobs.isFloating():
            self.tabifyDockWidget(self.problems_dock, jobs)
            self.resizeDocks([jobs], [170], Qt.Vertical)
        # On a small screen the side docks take what they need, the pair view the rest.
        narrow = self.width() < 1500
        browser = self.browser.minimumWidth() if narrow else 400
        self.resizeDocks([self.browser_dock, self.retrieval_dock], [browser, 250 if narrow else 300], Qt.Horizontal)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        if self._layout_pending:  # dock sizes only apply once the window has its size
            self._layout_pending = False
            # Devices need torch (seconds to import): looked up once the window is on screen.
            QTimer.singleShot(0, self._start_device_discovery)
            if not isinstance(self.settings.value("window/state"), QByteArray):
                QTimer.singleShot(0, self._default_dock_sizes)

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt API
        if not confirm_close(self.runner, self):
            event.ignore()
            return
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


def _read_dataset(path: str, fmt: str | None):
    from dmlviewer.core.data import open_dataset

    return open_dataset(path, format=fmt)


def _read_features(path: str):
    """A feature file opened lazily, as File > Open Features opens it (a million rows: the paths
    and labels, not the 4 GB of embeddings)."""
    from dmlviewer.core.evaluate import open_features

    return open_features(path)


def model_summary(model) -> str:
    """One line: backbone, pooling, grouping head and embedding size."""
    c = model.config
    grouping = c.get("grouping", "none")
    head = c.get("pooling", "?") + ("" if grouping == "none" else f" + {grouping}-grouping ×{c.get('groups')}")
    return f"{c.get('backbone', '?')} · {head} · {getattr(model, 'dim', None) or c.get('dim', '?')}-d"


def rule_summary(rule: str) -> str:
    """A few words for the decomposition rule line of ``core.models.describe_rule`` ("" if none)."""
    from dmlviewer.core.models import EXACT, FIRST_ORDER

    if rule.startswith(FIRST_ORDER):
        return "first-order decomposition"
    return "exact decomposition" if rule.startswith(EXACT) else ""


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

