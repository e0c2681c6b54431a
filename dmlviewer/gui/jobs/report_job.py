"""Tools > Report (issue 33): the HTML report of the open model(s) on the open dataset's test
split, written in the job queue (progress and cancel in the Jobs view) and opened in the system
browser. The report is :func:`dmlviewer.core.report.build_report`'s, the same file as
``dmlviewer report``; the app's feature file of the open model is used when it exists and
matches (no re-extraction). When no browser opens it (``xdg-open`` ends in failure, e.g. Chromium
refusing to run as root, or ``QDesktopServices.openUrl`` says no), a notice says where the report
is and offers to show its folder or copy its path (issue 42 item 7)."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, Qt, QUrl, Signal
from PySide6.QtGui import QAction, QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QFileDialog, QMessageBox

log = logging.getLogger(__name__)

#: The program that opens a file in the browser where the desktop is freedesktop's (Linux, BSD):
#: run directly, since its exit status says whether a browser took the file, which
#: ``QDesktopServices.openUrl`` (true once the program started) does not. None: openUrl only.
OPENER: list[str] | None = ["xdg-open"]


class _OpenerWatch(QObject):
    """Carries the opener's failure from the thread that waits for it to the GUI thread."""

    failed = Signal(str)


def open_in_browser(path: Path, on_failure: Callable[[str], None], parent: QObject | None = None) -> None:
    """Open ``path`` in the browser; ``on_failure(reason)`` (in the GUI thread) when no browser
    opens it. The opener is waited for in a daemon thread, in its own session, so that a browser
    it keeps running is neither waited for nor ended with the app."""
    program = shutil.which(OPENER[0]) if OPENER and not sys.platform.startswith(("win", "darwin")) else None
    if program is None:
        try:
            opened = QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))
        except Exception as exc:  # noqa: BLE001 - said in the notice
            log.warning("could not open %s: %s", path, exc)
            opened = False
        if not opened:
            on_failure("no program opened it")
        return
    watch = _OpenerWatch(parent)
    watch.failed.connect(on_failure)
    try:
        process = subprocess.Popen([program, *OPENER[1:], str(path)], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        on_failure(f"{OPENER[0]} could not be started ({exc.strerror or exc})")
        return

    def wait() -> None:
        code = process.wait()
        if code != 0:
            log.warning("%s %s ended with status %s: no browser opened the report", OPENER[0], path, code)
            try:
                watch.failed.emit(f"{OPENER[0]} ended with status {code}")
            except RuntimeError:  # the window is gone
                pass

    threading.Thread(target=wait, name="dmlviewer-opener", daemon=True).start()


def show_where(window, path: Path, reason: str) -> QMessageBox:
    """The report is written but no browser opened it: say where it is, offer Show Folder and
    Copy Path (window-modal, never blocking; kept as ``window.report_notice``)."""
    box = QMessageBox(QMessageBox.Information, "Report written",
                      f"The report is written, but no browser opened it ({reason}).", QMessageBox.Close, window)
    box.setInformativeText(f"It is at:\n{path}")
    box.setTextInteractionFlags(Qt.TextSelectableByMouse)
    folder = box.addButton("Show Folder", QMessageBox.ActionRole)
    copy = box.addButton("Copy Path", QMessageBox.ActionRole)
    # an action button would close the box: each does its work and the box stays until Close
    folder.clicked.disconnect()
    copy.clicked.disconnect()
    folder.clicked.connect(lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(str(path.parent))))

    def copy_path() -> None:
        QGuiApplication.clipboard().setText(str(path))
        window.statusBar().showMessage(f"Copied {path}", 8000)

    copy.clicked.connect(copy_path)
    box.setAttribute(Qt.WA_DeleteOnClose)
    box.open()
    window.report_notice = box
    return box


def report_models(window) -> list:
    """The open model (A) and, while comparing, model B, as the report's models."""
    from dmlviewer.core.report import ReportModel

    features = None
    try:
        path = window.jobs.features_path()
        features = path if path.exists() else None  # never written here: the app's extraction covers every split
    except (OSError, TypeError, AttributeError):
        log.debug("no feature file for the report", exc_info=True)
    sha = str((window.checkpoint_info or {}).get("sha256") or "")
    models = [ReportModel("A", window.labels.display_name("primary"), window.model, sha, features)]
    compare = window.session.slot("compare")
    if compare is not None and getattr(compare, "model", None) is not None:
        models.append(ReportModel("B", window.labels.display_name("compare"), compare.model))
    return models


#: the title of the dialog of a report that failed (and its status line)
FAILURE_TITLE = "The report could not be written"


def write_report(window, out: str | Path | None = None):
    """Queue the report job (asking where to write it unless ``out`` is given); the browser
    opens the file when the job ends. Returns the job, or None when nothing was started."""
    from dmlviewer.core.report import build_report
    from dmlviewer.gui.common import errors

    if window.model is None or window.dataset is None:
        errors.show_error(window, "Report", "Open a model and a dataset first.")
        return None
    if len(window.dataset.indices("test")) < 2:
        errors.show_error(window, "Report", "The dataset has fewer than two test images.")
        return None
    if out is None:
        from dmlviewer.gui.window import settings

        start = settings.output_dir(window.settings) / "report.html"
        out, _ = QFileDialog.getSaveFileName(window, "Write Report", str(start), "HTML page (*.html)")
        if not out:
            return None
    out = Path(out)
    models, dataset, device, root = report_models(window), window.dataset, window.device, window.dataset_path

    def factory(cancel):
        return build_report(models, dataset, out, "test", device=device, num_workers=0, dataset_label=str(root),
                            cancel=cancel)

    def finished(_job, _result) -> None:
        window.statusBar().showMessage(f"Report written to {out}", 8000)
        open_in_browser(out, lambda reason: show_where(window, out, reason), window)

    def failed(_job, text: str) -> None:  # the dialog is the window's, one per failed job (JobEvents)
        first, _details = errors.split_failure(text)
        window.statusBar().showMessage(f"{FAILURE_TITLE}: {first}", 8000)

    job = window.runner.submit(f"Report on {Path(root).name} with {', '.join(m.source for m in models)}", factory,
                               failure_title=FAILURE_TITLE, finished=finished, failed=failed)
    return job


def install(window) -> QAction:
    """Add Tools > Report to ``window``'s Tools menu."""
    action = QAction("&Report on the Test Split…", window)
    action.setToolTip("An HTML page on the model's retrieval failures (and, while comparing, both models' "
                      "diagnosis), opened in the browser")
    action.triggered.connect(lambda: write_report(window))
    window.add_tool_action(action)
    return action
