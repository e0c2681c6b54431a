"""The main window's menus and toolbar: File (datasets, the model doors, features, the output
folder, Export View, Save Window Image, Quit), View (the docks, Reset Layout, OpenGL Viewport),
Tools, Help, and the toolbar with the device combo; the File menu's dialogs and recent lists.

File dialogs open where the user's own files are (never in the package's resources or the
cache, where the demo lives): the current file's folder, else the output folder. What is chosen
is opened by the window (``open_dataset``, ``open_features``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QAction, QGuiApplication, QIcon, QKeySequence
from PySide6.QtWidgets import QDockWidget, QFileDialog, QLabel, QMenu, QMessageBox, QToolBar

from dmlviewer.core.data.format_names import FORMATS as DATASET_FORMATS
from dmlviewer.gui.window import settings


def icon(name: str) -> QIcon:
    """The packaged icon ``icon_NAME.svg`` (the app's, the File menu's doors), empty if missing."""
    from dmlviewer.resources import resource_path

    path = resource_path(f"icon_{name}.svg")
    return QIcon(str(path)) if path.exists() else QIcon()


class WindowMenus:
    """The menu bar and toolbar of ``window`` (the ``MainWindow``): ``open_dataset_action``,
    ``open_as_menu``, ``recent_datasets_menu``, ``open_features_action``,
    ``recent_features_menu``, ``output_folder_action``, ``view_menu``, ``opengl`` (View >
    OpenGL Viewport, gui/window/viewport_choice.py), ``tools_menu`` and ``toolbar``. Built once the window's docks and its parts (``model_menus``, ``compare``,
    ``labels``, ``devices``) exist."""

    def __init__(self, window: Any) -> None:
        self.window = window
        self._view_separator = None  # View's entries for the docks go above it
        self._build_file_menu()
        self._build_other_menus()
        self._build_toolbar()

    def _build_file_menu(self) -> None:
        window = self.window
        file_menu = window.menuBar().addMenu("&File")
        self.open_dataset_action = QAction(icon("dataset"), "Open &Dataset…", window)
        self.open_dataset_action.setShortcut(QKeySequence("Ctrl+O"))
        self.open_dataset_action.setToolTip("Open a dataset folder (format detected from the folder)")
        self.open_dataset_action.triggered.connect(lambda: self._ask_dataset(None))
        self.open_as_menu = QMenu("Open Dataset &As", window)
        for fmt in DATASET_FORMATS:
            action = self.open_as_menu.addAction(fmt)
            action.triggered.connect(lambda _=False, f=fmt: self._ask_dataset(f))
        self.recent_datasets_menu = QMenu("Recent Datasets", window)
        self.open_features_action = QAction(icon("features"), "Open &Features…", window)
        self.open_features_action.setToolTip("Open an HDF5 feature file for retrieval")
        self.open_features_action.triggered.connect(self._ask_features)
        self.recent_features_menu = QMenu("Recent Features", window)
        save_shot = QAction("Save Window Image…", window)
        save_shot.triggered.connect(self._save_screenshot)
        self.output_folder_action = QAction("Output &Folder…", window)
        self.output_folder_action.setToolTip("Where computed feature files and training runs are written")
        self.output_folder_action.triggered.connect(self._ask_output_folder)
        quit_action = QAction("&Quit", window)
        quit_action.setShortcut(QKeySequence.Quit)
        quit_action.triggered.connect(window.close_as_user)
        file_menu.addAction(self.open_dataset_action)
        file_menu.addMenu(self.open_as_menu)
        file_menu.addMenu(self.recent_datasets_menu)
        file_menu.addSeparator()
        window.model_menus.add_to(file_menu)
        file_menu.addMenu(window.compare.menu)  # File > Compare With Model, Stop Comparing (issue 24)
        file_menu.addAction(window.compare.stop_action)
        for action in window.labels.actions.values():  # a name of the user's for model A and B (issue 31 item 1)
            file_menu.addAction(action)
        file_menu.addSeparator()
        file_menu.addAction(self.open_features_action)
        file_menu.addMenu(self.recent_features_menu)
        file_menu.addAction(window.compare.open_features_action)  # model B's, enabled while comparing (issue 41)
        file_menu.addAction(window.compare.compute_features_action)
        file_menu.addSeparator()
        file_menu.addAction(self.output_folder_action)
        from dmlviewer.gui.window import export  # File > Export View (issue 33): figures drawn from the data

        file_menu.addAction(export.install(window))
        file_menu.addAction(save_shot)
        file_menu.addAction(quit_action)
        for menu_, key in ((self.recent_datasets_menu, "datasets"), (self.recent_features_menu, "features")):
            menu_.aboutToShow.connect(lambda m=menu_, k=key: self._fill_recent(m, k))

    def _build_other_menus(self) -> None:
        window = self.window
        menu = window.menuBar()
        self.view_menu = view_menu = menu.addMenu("&View")
        for dock in (window.browser_dock, window.retrieval_dock, window.problems_dock):
            self.add_view_action(dock)
        self._view_separator = view_menu.addSeparator()
        reset = view_menu.addAction("Reset Layout")
        reset.triggered.connect(lambda: window.docks.reset())
        view_menu.addSeparator()
        from dmlviewer.gui.window.viewport_choice import ViewportChoice  # issue 40's switch

        self.opengl = ViewportChoice(window)
        view_menu.addAction(self.opengl.action)
        view_menu.setToolTipsVisible(True)

        self.tools_menu = menu.addMenu("&Tools")
        self.tools_menu.setObjectName("toolsMenu")

        help_menu = menu.addMenu("&Help")
        logs = help_menu.addAction("Show Log Folder")
        logs.triggered.connect(lambda: QGuiApplication.clipboard().setText(str(settings.log_dir()))
                               or window.statusBar().showMessage(f"log folder (path copied): {settings.log_dir()}", 8000))
        about = help_menu.addAction("About dmlviewer")
        about.triggered.connect(self._about)

    def _build_toolbar(self) -> None:
        window = self.window
        bar = QToolBar("Main")
        bar.setObjectName("mainToolbar")
        bar.setIconSize(QSize(20, 20))
        bar.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        bar.addAction(self.open_dataset_action)
        bar.addAction(window.model_menus.open_checkpoint_action)
        bar.addAction(self.open_features_action)
        bar.addSeparator()
        bar.addWidget(QLabel(" Device "))
        bar.addWidget(window.devices.combo)
        window.addToolBar(bar)
        self.toolbar = bar

    def add_tool_action(self, action: QAction) -> None:
        """Add an entry to the Tools menu."""
        self.tools_menu.addAction(action)

    def add_view_action(self, dock: QDockWidget, text: str | None = None) -> QAction:
        """A View menu entry that shows ``dock`` in front (raised above docks tabbed with it)
        or hides it."""
        action = dock.toggleViewAction()
        if text:
            action.setText(text)
        action.triggered.connect(lambda checked, d=dock: (d.show(), d.raise_()) if checked else None)
        if self._view_separator is None:
            self.view_menu.addAction(action)
        else:
            self.view_menu.insertAction(self._view_separator, action)
        return action

    def _ask_dataset(self, fmt: str | None) -> None:
        window = self.window
        start = settings.start_dir(window.dataset_path and Path(window.dataset_path).parent,
                                   *settings.recent("datasets", window.settings)[:1], settings=window.settings)
        path = QFileDialog.getExistingDirectory(window, f"Open dataset{f' ({fmt})' if fmt else ''}", start)
        if path:
            window.open_dataset(path, fmt)

    def _ask_features(self) -> None:
        window = self.window
        start = settings.start_dir(window.features_path, *settings.recent("features", window.settings),
                                   settings=window.settings)
        path, _ = QFileDialog.getOpenFileName(window, "Open features", start,
                                              "HDF5 features (*.h5 *.hdf5);;All files (*)")
        if path:
            window.open_features(path)

    def _ask_output_folder(self) -> None:
        window = self.window
        current = settings.output_dir(window.settings)
        path = QFileDialog.getExistingDirectory(window, "Output folder (feature files, training runs)", str(current))
        if path:
            folder = settings.set_output_dir(path, window.settings)
            window.statusBar().showMessage(f"Outputs now go to {folder}", 8000)

    def _fill_recent(self, menu: QMenu, key: str) -> None:
        window = self.window
        menu.clear()
        items = settings.recent(key, window.settings)
        if not items:
            menu.addAction("(none)").setEnabled(False)
            return
        opener = {"datasets": window.open_dataset, "features": window.open_features}[key]
        for path in items:
            action = menu.addAction(path)
            action.triggered.connect(lambda _=False, p=path: opener(p))
        menu.addSeparator()
        menu.addAction("Clear").triggered.connect(lambda: window.settings.setValue(f"recent/{key}", []))

    def _save_screenshot(self) -> None:
        window = self.window
        start = Path(settings.start_dir(window.settings.value("paths/screenshots", ""), settings=window.settings))
        path, _ = QFileDialog.getSaveFileName(window, "Save window image", str(start / "dmlviewer.png"),
                                              "PNG image (*.png);;JPEG image (*.jpg)")
        if path:
            window.save_window_image(path)

    def _about(self) -> None:
        from dmlviewer import __version__

        QMessageBox.about(self.window, "About dmlviewer",
                          f"<b>dmlviewer</b> {__version__}<br>Point-to-point activation maps, Grad-CAM "
                          f"variants and group attention for deep metric learning.<br><br>Log folder: "
                          f"{settings.log_dir()}")
