"""The jobs dock: the running job, the queue and the recent jobs of a :class:`JobRunner`.

Each row shows a job's name, state, progress and ETA; the selected job's log (and, for a
failed job, its message with the traceback) is shown underneath. Progress events arrive many
times a second, so rows are refreshed by a timer a few times a second, not per event.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView, QDockWidget, QHBoxLayout, QHeaderView, QPlainTextEdit, QPushButton, QSplitter,
    QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget,
)

from dmlviewer.gui.training_dialog import format_eta
from dmlviewer.gui.worker import Job, JobRunner, JobState

STATE_COLORS = {JobState.RUNNING: "#0072B2", JobState.FAILED: "#b00020", JobState.CANCELLED: "#8a6d00",
                JobState.FINISHED: "#1b7f3b", JobState.QUEUED: "#555555"}


def job_rows(runner: JobRunner) -> list[Job]:
    """The running job, the queued ones in order, then ended ones, newest first."""
    live = runner.jobs
    return live + [j for j in reversed(runner.history) if j not in live]


class JobsView(QWidget):
    """The list of jobs and the selected job's log (see the module docstring)."""

    REFRESH_MS = 250

    def __init__(self, runner: JobRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runner = runner
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Job", "State", "Progress", "ETA"])
        self.tree.setRootIsDecorated(False)
        self.tree.setSelectionMode(QAbstractItemView.SingleSelection)
        header = self.tree.header()
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        for col in (1, 2, 3):
            header.setSectionResizeMode(col, QHeaderView.ResizeToContents)
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setPlaceholderText("Select a job to see its log.")
        self.cancel_button = QPushButton("Cancel job")
        self.cancel_all_button = QPushButton("Cancel all")
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.cancel_all_button)
        splitter = QSplitter(Qt.Vertical)
        splitter.addWidget(self.tree)
        splitter.addWidget(self.log)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(splitter, 1)
        layout.addLayout(buttons)
        self._rows: list[Job] = []
        self._shown_log: tuple | None = None
        self._dirty = True
        self._timer = QTimer(self)
        self._timer.setInterval(self.REFRESH_MS)
        self._timer.timeout.connect(self._refresh_if_dirty)
        self._timer.start()
        runner.queue_changed.connect(self.refresh)
        runner.job_progress.connect(self._mark_dirty)
        self.tree.currentItemChanged.connect(self._on_current_changed)
        self.cancel_button.clicked.connect(self._cancel_selected)
        self.cancel_all_button.clicked.connect(runner.cancel_all)
        self.refresh()

    def selected_job(self) -> Job | None:
        item = self.tree.currentItem()
        if item is None:
            return None
        row = self.tree.indexOfTopLevelItem(item)
        return self._rows[row] if 0 <= row < len(self._rows) else None

    def _on_current_changed(self, *_) -> None:
        self._show_log()

    def _mark_dirty(self, *_) -> None:
        self._dirty = True

    def _refresh_if_dirty(self) -> None:
        if self._dirty:
            self.refresh()

    def refresh(self) -> None:
        """Rebuild the rows from the runner (keeps the selection on the same job)."""
        self._dirty = False
        selected = self.selected_job()
        rows = job_rows(self.runner)
        if [j.id for j in rows] != [j.id for j in self._rows]:
            self.tree.clear()
            self.tree.addTopLevelItems([QTreeWidgetItem() for _ in rows])
        self._rows = rows
        for i, job in enumerate(rows):
            item = self.tree.topLevelItem(i)
            state = job.state + (" (cancelling)" if job.state == JobState.RUNNING and job.cancel_requested else "")
            progress = f"{100 * job.fraction:.0f}%" if job.state == JobState.RUNNING and job.progress else ""
            eta = format_eta(job.eta_s) if job.state == JobState.RUNNING and job.eta_s is not None else ""
            for col, text in enumerate((job.name + (" [process]" if job.process else ""), state, progress, eta)):
                item.setText(col, text)
            item.setForeground(1, _brush(STATE_COLORS.get(job.state, "#000000")))
            item.setToolTip(0, job.error.splitlines()[0] if job.error else job.name)
            if selected is not None and job is selected:
                self.tree.setCurrentItem(item)
        if self.tree.currentItem() is None and rows:
            self.tree.setCurrentItem(self.tree.topLevelItem(0))
        job = self.selected_job()
        self.cancel_button.setEnabled(job is not None and not job.ended and not job.cancel_requested)
        self.cancel_all_button.setEnabled(self.runner.busy)
        self._show_log()

    def _show_log(self) -> None:
        job = self.selected_job()
        if job is None:
            self.log.clear()
            self._shown_log = None
            return
        key = (job.id, len(job.log), job.log[-1] if job.log else None, job.state)
        if key == self._shown_log:
            return
        self._shown_log = key
        lines = list(job.log)
        if job.error and job.error not in lines:
            lines.append(job.error)
        self.log.setPlainText("\n".join(lines))
        self.log.verticalScrollBar().setValue(self.log.verticalScrollBar().maximum())

    def _cancel_selected(self) -> None:
        job = self.selected_job()
        if job is not None:
            self.runner.cancel(job)


def _brush(color: str):
    from PySide6.QtGui import QBrush, QColor

    return QBrush(QColor(color))


class JobsDock(QDockWidget):
    """:class:`JobsView` in a dock widget of the main window."""

    def __init__(self, runner: JobRunner, parent: QWidget | None = None) -> None:
        super().__init__("Jobs", parent)
        self.setObjectName("jobs_dock")
        self.view = JobsView(runner, self)
        self.setWidget(self.view)
