"""One failure, one dialog (issue 39 item 5, issue 42 item 11): a failed job's events take one
path to the user. A failed report used to show two dialogs, the report's own ("The report could
not be written") and the window's generic "Job failed"."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gui


@pytest.fixture
def boxes(monkeypatch) -> list[str]:
    """Every message box opened directly (not through ``errors.show_error``, which the ``window``
    fixture records in ``window.dialogs``), recorded instead of shown."""
    from PySide6.QtWidgets import QMessageBox

    opened: list[str] = []
    for name in ("open", "exec", "show"):
        monkeypatch.setattr(QMessageBox, name, lambda self, *a, **k: opened.append(self.text()))
    for name in ("warning", "critical", "information"):
        monkeypatch.setattr(QMessageBox, name, staticmethod(lambda parent, title, text, *a, **k:
                                                            opened.append(text) or QMessageBox.Ok))
    return opened


def test_a_failed_report_shows_one_dialog(window, boxes, demo_root, small_ckpt, qtbot, tmp_path, monkeypatch):
    import dmlviewer.core.report as report_core
    from dmlviewer.core.progress import Progress
    from dmlviewer.gui.jobs import report_job

    assert window.open_checkpoint(small_ckpt)
    assert window.open_dataset(demo_root)
    qtbot.waitUntil(lambda: window.model is not None and window.dataset is not None, timeout=60000)

    def failing_report(*_args, **_kwargs):
        yield Progress("step", 1, 4, "explaining the gallery")
        raise OSError("the disk is full")

    monkeypatch.setattr(report_core, "build_report", failing_report)
    job = report_job.write_report(window, tmp_path / "report.html")  # a real JobRunner runs it
    assert job is not None
    qtbot.waitUntil(lambda: job.ended, timeout=30000)
    qtbot.wait(200)  # any second dialog is opened in the same event-loop turn as the first
    assert job.state == "failed"
    said = [message for _title, message, _details in window.dialogs] + boxes
    assert len(said) == 1, said
    assert "OSError: the disk is full" in said[0]
    assert window.dialogs[0][0] == "The report could not be written"  # the job's own words, not "Job failed"
