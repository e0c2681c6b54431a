"""Starting the app: QApplication, logging to a rotating file, the demo, screenshots.

``run_gui`` opens the window on what it is given (dataset, checkpoint, features), on the demo,
or on the last session. A splash screen appears as soon as Qt is up, the window as soon as its
widgets are built; the files (the torch import, the checkpoint, the demo data generated on the
first start, the listing) are read in the background (``MainWindow.open_in_background``), with
their progress in the status bar. With ``screenshot`` it waits until everything asked for is on screen
(dataset listed, model loaded, first pair prepared, visible thumbnails decoded, features
for the neighbours extracted when that was started, group attention computed when that tab
is shown) or a timeout, saves ``window.grab()`` as PNG and
returns 0 (1 when the timeout struck first; the image is saved anyway).
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from PySide6.QtCore import Qt, QtMsgType, QTimer, Signal, qInstallMessageHandler
from PySide6.QtGui import QColor, QFont, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import QApplication, QSplashScreen

from dmlviewer.gui.window import collector, settings

from dmlviewer.gui.common import errors

log = logging.getLogger(__name__)

#: Seconds a screenshot waits for the window to be fully loaded.
SCREENSHOT_TIMEOUT_S = 120.0
#: The demo dataset's generation parameters (the demo checkpoint was trained on these).
DEMO_DATA = {"classes": 20, "per_class": 40, "size": 128, "seed": 0}


#: Qt messages that say nothing to a user: the offscreen and minimal platforms print this for
#: every top-level window (screenshots, benchmarks, tests)
_QUIET_QT_MESSAGES = ("does not support propagateSizeHints",)


def _qt_message(kind, context, message: str) -> None:
    """Qt's messages go to the log (warnings and errors reach stderr through it), except the
    harmless lines of :data:`_QUIET_QT_MESSAGES`."""
    if any(text in message for text in _QUIET_QT_MESSAGES):
        return
    level = {QtMsgType.QtDebugMsg: logging.DEBUG, QtMsgType.QtInfoMsg: logging.INFO,
             QtMsgType.QtWarningMsg: logging.WARNING}.get(kind, logging.ERROR)
    logging.getLogger("qt").log(level, "%s", message)


def install_qt_message_handler() -> None:
    qInstallMessageHandler(_qt_message)


def create_app(argv: list[str] | None = None) -> QApplication:
    """The QApplication (created once): Qt's messages routed to the log, names for
    QSettings/QStandardPaths, Fusion dark palette and the app's style sheet."""
    install_qt_message_handler()
    # Qt splits the raster fills of every image draw over a thread pool and waits for it; the
    # panes' draws are small, so on a machine whose cores are busy the wait was most of a hover's
    # tail latency (issue 24). Read once by Qt at the first paint; a value set outside wins.
    os.environ.setdefault("QT_NO_GUI_THREADPOOL", "1")
    app = QApplication.instance()
    if app is None:
        # The panes' OpenGL viewports (View > OpenGL Viewport, issue 40) may change windows with
        # a dock; QOpenGLWidget needs the contexts shared for that, set before the app exists.
        QApplication.setAttribute(Qt.AA_ShareOpenGLContexts)
        app = QApplication(argv if argv is not None else sys.argv[:1])
    app.setOrganizationName(settings.ORGANIZATION)
    app.setApplicationName(settings.APPLICATION)
    app.setApplicationDisplayName("dmlviewer")
    apply_style(app)
    collector.install(app)  # garbage (Qt objects in cycles) freed on this thread only
    return app


def apply_style(app: QApplication) -> None:
    app.setStyle("Fusion")
    p = QPalette()
    dark, base, text = QColor(45, 45, 48), QColor(30, 30, 30), QColor(225, 225, 225)
    for role, color in ((QPalette.Window, dark), (QPalette.WindowText, text), (QPalette.Base, base),
                        (QPalette.AlternateBase, QColor(55, 55, 60)), (QPalette.ToolTipBase, QColor(60, 60, 64)),
                        (QPalette.ToolTipText, text), (QPalette.Text, text), (QPalette.Button, dark),
                        (QPalette.ButtonText, text), (QPalette.BrightText, QColor(255, 80, 80)),
                        (QPalette.Highlight, QColor(47, 128, 237)), (QPalette.HighlightedText, QColor(255, 255, 255)),
                        (QPalette.Link, QColor(90, 160, 255)), (QPalette.PlaceholderText, QColor(140, 140, 140))):
        p.setColor(role, color)
    p.setColor(QPalette.Disabled, QPalette.Text, QColor(120, 120, 120))
    p.setColor(QPalette.Disabled, QPalette.ButtonText, QColor(120, 120, 120))
    app.setPalette(p)
    from dmlviewer.resources import resource_path

    qss = resource_path("style.qss")
    if qss.exists():
        app.setStyleSheet(qss.read_text())


def setup_logging(level: int = logging.INFO) -> Path:
    """Add a rotating log file under the user's data folder (``logs/dmlviewer.log``)."""
    path = settings.log_dir() / "dmlviewer.log"
    root = logging.getLogger()
    if not any(isinstance(h, logging.handlers.RotatingFileHandler) and Path(h.baseFilename) == path
               for h in root.handlers):
        handler = logging.handlers.RotatingFileHandler(path, maxBytes=2_000_000, backupCount=3, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.setLevel(level)
        root.addHandler(handler)
        if root.level == logging.NOTSET or root.level > level:
            root.setLevel(level)
    return path


def demo_checkpoint() -> Path | None:
    """The shipped demo checkpoint, or None when this build has none."""
    from dmlviewer.resources import resource_path

    path = resource_path("demo_checkpoint.pt")
    return path if path.exists() else None


def demo_paths() -> tuple[Path, Path | None]:
    """(demo dataset folder, demo checkpoint or None). The dataset is generated with
    ``core.data.make_demo_data`` into the user cache on first use (into a temporary folder
    renamed into place, so an interrupted generation is never taken for a dataset)."""
    from dmlviewer.core.data import make_demo_data

    root = settings.cache_dir() / "demo-data"
    if not (root / "images.txt").exists():
        log.info("generating the demo dataset in %s", root)
        tmp = Path(tempfile.mkdtemp(prefix="demo-data-", dir=root.parent))
        try:
            make_demo_data(tmp, **DEMO_DATA)
            if root.exists():
                shutil.rmtree(root)
            tmp.rename(root)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return root, demo_checkpoint()


def last_session() -> dict:
    """The last session as ``core.last_session.LastSession`` reads it (``dataset``, ``format``,
    ``models`` as ``ModelSource``s by slot, ``query``, ``reference``, ``features``,
    ``compare_features``: model B's); an empty one when the settings cannot be read. Imports
    torch: the app itself reopens the last session in the loading thread
    (``MainWindow.open_in_background(last_session=...)``)."""
    from dataclasses import asdict

    from dmlviewer.core.last_session import LastSession

    try:
        record = LastSession.from_settings(settings.session_values())
    except ValueError as exc:
        log.warning("the last session cannot be read: %s", exc)
        record = LastSession()
    out = asdict(record)
    out["models"] = dict(record.models)
    return out


#: Environment variable naming a JSON file to which the app writes its start-up timings
#: (``bench startup`` reads it).
STARTUP_REPORT_ENV = "DMLVIEWER_STARTUP_REPORT"


def process_age_s() -> float:
    """Seconds since this process started (Linux: from /proc; elsewhere: since this module
    was imported, a little less)."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        start = float(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start)
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED


_IMPORTED = time.monotonic()


class _Startup:
    """Start-up milestones (seconds since the process started), logged and, when
    ``$DMLVIEWER_STARTUP_REPORT`` names a file, written there as JSON."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self.times[name] = round(process_age_s(), 3)
        log.info("start-up: %s after %.2f s", name, self.times[name])
        target = os.environ.get(STARTUP_REPORT_ENV)
        if target:
            Path(target).write_text(json.dumps(self.times))


class _Splash(QSplashScreen):
    """The splash screen; ``painted`` is emitted (queued) after its first paint, so that the
    window is built only once the splash is on screen, from the event loop."""

    painted = Signal()

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().paintEvent(event)
        if not getattr(self, "_told", False):
            self._told = True
            QTimer.singleShot(0, self.painted.emit)


#: Longest wait for the splash's first paint before the window is built anyway (a platform
#: that never paints it).
SPLASH_WAIT_MS = 500


def _splash(app: QApplication) -> _Splash:
    """A small splash shown while the window's modules load (under a second on a laptop)."""
    pixmap = QPixmap(440, 140)
    pixmap.fill(QColor(45, 45, 48))
    painter = QPainter(pixmap)
    painter.setPen(QColor(235, 235, 235))
    font = QFont(app.font())
    font.setPointSize(20)
    font.setBold(True)
    painter.setFont(font)
    painter.drawText(pixmap.rect().adjusted(24, 20, -24, -60), Qt.AlignLeft | Qt.AlignVCenter, "dmlviewer")
    painter.end()
    splash = _Splash(pixmap)
    splash.showMessage("Starting…", Qt.AlignLeft | Qt.AlignBottom, QColor(200, 200, 200))
    splash.show()
    return splash


def run_gui(dataset: str | None = None, checkpoint: str | None = None, features: str | None = None,
            screenshot: str | None = None, demo: bool = False, fmt: str | None = None,
            last: bool = False, pin: tuple[float, float] | None = None, tab: str | None = None) -> int:
    """Open the window and run the event loop (see the module docstring).

    ``last``: use the last session's files when none are given (the first time: the demo).
    ``pin``: pin this point of the query, as fractions of its width and height (screenshots
    of the hover read-out). ``tab``:
    ``"groups"`` shows the group attention tab.
    """
    startup = _Startup()
    app = create_app()
    splash = _splash(app)
    opened: dict = {}

    def open_window() -> None:
        """From the event loop, once the splash is painted (or after SPLASH_WAIT_MS)."""
        if opened:
            return
        try:
            opened["window"], opened["shooter"] = _open_window(
                app, splash, startup, dataset=dataset, checkpoint=checkpoint, features=features,
                screenshot=screenshot, demo=demo, fmt=fmt, last=last, pin=pin, tab=tab)
        except BaseException as exc:  # raised to the caller after the loop, as before
            opened["error"] = exc
            app.exit(1)

    splash.painted.connect(open_window)
    QTimer.singleShot(SPLASH_WAIT_MS, open_window)
    status = app.exec()
    if "error" in opened:
        raise opened["error"]
    shooter = opened.get("shooter")
    if shooter is not None:
        opened["window"].shutdown()
        return shooter.status
    return int(status)


def _open_window(app: QApplication, splash: QSplashScreen, startup: _Startup, dataset, checkpoint, features,
                 screenshot, demo, fmt, last, pin, tab):
    """Build and show the main window and start loading the files: ``(window, screenshot taker
    or None)``."""
    startup.mark("splash")
    log_path = setup_logging()
    errors.install_excepthook()
    splash.showMessage("Loading the interface…", Qt.AlignLeft | Qt.AlignBottom, QColor(200, 200, 200))
    from dmlviewer.gui.window.main_window import MainWindow

    # The last session is read here (its raw text, before the loading rewrites it) and
    # reopened in the loading thread, each model source as what it is; without a dataset that
    # still exists, the demo opens instead.
    restore = settings.session_values() if last and not (dataset or checkpoint or features) else None

    window = MainWindow()
    frozen = collector.freeze_startup()  # before any file is opened: see collector's docstring
    log.debug("%d start-up objects exempt from garbage collection", frozen)
    if tab == "groups":
        window.tabs.setCurrentWidget(window.group_tabs)
    window.show()
    splash.finish(window)
    QTimer.singleShot(0, lambda: startup.mark("window"))  # after the window's first events
    log.info("dmlviewer started; log file %s", log_path)
    if dataset or checkpoint or features or demo or restore is not None:
        window.open_in_background(dataset=dataset, fmt=fmt, checkpoint=checkpoint, features=features,
                                  demo=demo_paths if demo or restore is not None else None, last_session=restore)
        watch = QTimer(window, interval=50)

        def milestones() -> None:
            if not window.loading and "loaded" not in startup.times:
                startup.mark("loaded")
            if "loaded" in startup.times and window.pair_view.state in ("ready", "failed", "empty"):
                startup.mark("pair")
                watch.stop()

        watch.timeout.connect(milestones)
        watch.start()
    shooter = None
    if screenshot:
        shooter = _Screenshot(window, Path(screenshot), pin=pin)
        shooter.start()
    return window, shooter


class _Screenshot:
    """Polls until the window shows everything asked for, then saves it and quits."""

    def __init__(self, window, path: Path, pin: tuple[float, float] | None = None, timeout_s: float = SCREENSHOT_TIMEOUT_S) -> None:
        self.window = window
        self.path = path
        self.pin = pin
        self.deadline = time.monotonic() + timeout_s
        self.status = 1
        self._pinned = False
        self._timer = QTimer(interval=100)
        self._timer.timeout.connect(self._poll)

    def start(self) -> None:
        self._timer.start()

    def ready(self) -> bool:
        w = self.window
        if w.loading:
            return False
        if w.dataset is not None and w.pair_view.images is None:
            return False
        if w.model is not None and w.pair_view.images is not None and w.pair_view.state == "preparing":
            return False
        if w.loader.busy or w.jobs.extract_job is not None or w.retrieval.searching:  # thumbnails, neighbours
            return False
        if w.tabs.currentWidget() is w.group_tabs and w.group_tabs.active \
                and w.pair_view.state == "ready" and w.group_tabs._data is None:
            return False
        return True

    def _poll(self) -> None:
        timed_out = time.monotonic() > self.deadline
        if not (self.ready() or timed_out):
            return
        if self.pin and not self._pinned and self.window.pair_view.state == "ready":
            self._pin_point()
            self._pinned = True
            return  # one more poll so the pinned overlay is painted
        self._timer.stop()
        self.window.repaint()
        ok = self.window.grab().save(str(self.path))
        if timed_out:
            sys.stderr.write(f"dmlviewer: the window was not fully loaded after the timeout; saved {self.path}\n")
        if not ok:
            sys.stderr.write(f"dmlviewer: could not write {self.path}\n")
        self.status = 0 if ok and not timed_out else 1
        # exit(), not quit(): quit() closes the window, whose close asks about running jobs.
        QApplication.instance().exit(self.status)

    def _pin_point(self) -> None:
        w = self.window
        view = w.group_tabs if w.tabs.currentWidget() is w.group_tabs else w.pair_view
        pane = view.panes[0]
        if pane.shape is None:
            return
        h, w_ = pane.shape
        fx, fy = self.pin
        view.link.pin(0, fx * (w_ - 1), fy * (h - 1))
        if view is w.pair_view:
            view.matches_box.setChecked(True)
