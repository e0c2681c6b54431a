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
from dmlviewer.gui.thumbnails import ThumbnailLoader
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
        self._extract_job = None

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
        self.resize(1500, 920)
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
        file_menu.addSeparator()
        file_menu.addAction(self.open_features_action)
        file_menu.addMenu(self.recent_features_menu)
        file_menu.addSeparator()
        file_menu.addAction(save_shot)
        file_menu.addAction(quit_action)
        for menu_, key in ((self.recent_datasets_menu, "datasets"), (self.recent_checkpoints_menu, "checkpoints"),
                           (self.recent_features_menu, "features")):
            menu_.aboutToShow.connect(lambda m=menu_, k=key: self._fill_recent(m, k))

        view_menu = menu.addMenu("&View")
        for dock in (self.browser_dock, self.retrieval_dock, self.problems_dock):
            view_menu.addAction(dock.toggleViewAction())
        view_menu.addSeparator()
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
        try:
            from dmlviewer.core.models import available_devices

            devices = available_devices()
        except Exception:  # noqa: BLE001 - never block the window on device discovery
            log.exception("device discovery failed")
            devices = ["cpu"]
        for dev in devices:
            self.device_combo.addItem(dev, dev)
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
        self.device_combo.currentIndexChanged.connect(lambda _i: self.set_device(self.device_combo.currentData()))
        self.runner.job_finished.connect(self._on_job_finished)
        self.runner.job_failed.connect(self._on_job_failed)
        self.tabs.currentChanged.connect(lambda _i: self.statusBar().clearMessage())

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
        self.dataset = dataset
        self.dataset_path = path
        self.dataset_format = fmt
        self.query_index = self.reference_index = None
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
        self._choose_default_pair()
        return True

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
        self.model_label.setText(model_summary(model))
        self.model_label.setToolTip(f"{label}\nepoch {info.get('epoch')}\nsha256 {(info.get('sha256') or '')[:16]}…\n"
                                    f"decomposition: {info.get('rule', '')}")
        self.pair_view.set_model(model, self.device)
        self.group_tabs.set_model(model)
        if self.pair_view.images is not None:
            self.group_tabs.set_pair(self.pair_view.images)
        self.retrieval.set_model(model, self.device)
        self.model_changed.emit(model)

    def open_features(self, path: str | Path) -> bool:
        """Open an HDF5 feature file for retrieval. False (and a dialog) on error."""
        from dmlviewer.core.evaluate import read_features

        path = str(Path(path).expanduser())
        try:
            with _busy():
                features = read_features(path)
        except Exception as exc:  # noqa: BLE001
            errors.report_exception(self, "Cannot open features", exc)
            return False
        self._set_features(features, path)
        settings.add_recent("features", path, self.settings)
        return True

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
            self.retrieval.set_model(self.model, resolved)

    def extract_features(self) -> None:
        """Embed the open dataset with the current model in the job queue; open the HDF5 file."""
        if self.model is None or self.dataset is None or self._extract_job is not None:
            return
        out = self._features_cache_path()
        if out.exists():
            self.open_features(out)
            return
        from dmlviewer.core.evaluate.extract import extract_features

        model, dataset, device = self.model, self.dataset, self.device
        sha = (self.checkpoint_info or {}).get("sha256")

        def factory(cancel):
            return extract_features(model, dataset, out, batch_size=32, device=device, num_workers=0,
                                    cancel=cancel, checkpoint_sha256=sha)

        self._extract_job = self.runner.submit(f"Extract features of {Path(self.dataset_path).name}", factory)
        self.retrieval.source.setText("Computing features of the dataset (see Tools ▸ Jobs)…")

    # -- internals
    def _features_cache_path(self) -> Path:
        key = f"{(self.checkpoint_info or {}).get('sha256', self.checkpoint_path)}|{Path(self.dataset_path).resolve()}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:20]
        folder = settings.cache_dir() / "features"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{digest}.h5"

    def _on_job_finished(self, job, result) -> None:
        if job is self._extract_job:
            self._extract_job = None
            path = (result or {}).get("path") if isinstance(result, dict) else None
            if path:
                self.open_features(path)

    def _on_job_failed(self, job, text: str) -> None:
        if job is self._extract_job:
            self._extract_job = None
        first, details = errors.split_failure(text)
        errors.show_error(self, f"Job failed: {job.name}", first, details)

    def _set_features(self, features, path: str | None) -> None:
        self.features = features
        self.features_path = path
        self.settings.setValue("session/features", path or "")
        self.retrieval.set_features(features)
        self.features_changed.emit(features)

    def _features_match(self, features) -> bool:
        """Do the features' paths belong to the open dataset? (checked on a sample)"""
        if self.dataset is None:
            return True
        known = set(self.dataset.paths)
        sample = [str(p) for p in list(features.paths)[:50]]
        return any(p in known for p in sample)

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

    def _ask_dataset(self, fmt: str | None) -> None:
        start = self.dataset_path or str(Path.home())
        path = QFileDialog.getExistingDirectory(self, f"Open dataset{f' ({fmt})' if fmt else ''}", start)
        if path:
            self.open_dataset(path, fmt)

    def _ask_checkpoint(self) -> None:
        start = str(Path(self.checkpoint_path).parent) if self.checkpoint_path else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, "Open checkpoint", start, "Checkpoints (*.pt *.pth);;All files (*)")
        if path:
            self.open_checkpoint(path)

    def _ask_features(self) -> None:
        start = str(Path(self.features_path).parent) if self.features_path else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, "Open features", start, "HDF5 features (*.h5 *.hdf5);;All files (*)")
        if path:
            self.open_features(path)

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
        path, _ = QFileDialog.getSaveFileName(self, "Save window image", "dmlviewer.png", "PNG (*.png)")
        if path and not self.grab().save(path):
            errors.show_error(self, "Save failed", f"Could not write {path}")

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
        self.resizeDocks([self.browser_dock, self.retrieval_dock], [400, 300], Qt.Horizontal)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        if self._layout_pending:  # dock sizes only apply once the window has its size
            self._layout_pending = False
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


def model_summary(model) -> str:
    """One line: backbone, pooling, grouping head and embedding size."""
    c = model.config
    grouping = c.get("grouping", "none")
    head = c.get("pooling", "?") + ("" if grouping == "none" else f" + {grouping}-grouping ×{c.get('groups')}")
    return f"{c.get('backbone', '?')} · {head} · {c.get('dim', '?')}-d"


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

