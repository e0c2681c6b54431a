"""Tools > Report (issue 33): the HTML report of the open model(s) on the open dataset's test
split, written in the job queue (progress and cancel in the Jobs view) and opened in the system
browser. The report is :func:`dmlviewer.core.report.build_report`'s, the same file as
``dmlviewer report``; the app's feature file of the open model is used when it exists and
matches (no re-extraction)."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QAction, QDesktopServices
from PySide6.QtWidgets import QFileDialog

log = logging.getLogger(__name__)


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
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(out)))

    def failed(_job, text: str) -> None:  # the dialog is the window's, one per failed job (JobEvents)
        first, _details = errors.split_failure(text)
        window.statusBar().showMessage(f"The report could not be written: {first}", 8000)

    job = window.runner.submit(f"Report on {Path(root).name} with {', '.join(m.source for m in models)}", factory,
                               finished=finished, failed=failed)
    return job


def install(window) -> QAction:
    """Add Tools > Report to ``window``'s Tools menu."""
    action = QAction("&Report on the Test Split…", window)
    action.setToolTip("An HTML page on the model's retrieval failures (and, while comparing, both models' "
                      "diagnosis), opened in the browser")
    action.triggered.connect(lambda: write_report(window))
    window.add_tool_action(action)
    return action
