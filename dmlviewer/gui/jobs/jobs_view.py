"""The jobs dock: the running job, the queue and the recent jobs of a :class:`JobRunner`.

Each row shows a job's name, state, overall progress (``Job.fraction``: it never moves back
when a job enters its next phase) and ETA (none once a cancel was asked for); the selected
job's log (and, for a failed job, its message with the traceback) is shown underneath.
Progress events arrive many times a second, so rows are refreshed by a timer a few times a
second, not per event. Rows are in the order the jobs were submitted, so a new job is
appended below the others, and the list scrolls to the running job whenever it changes.
The dock is hidden by default: the status bar shows the running job
(:class:`~dmlviewer.gui.jobs.job_status.JobStatus`), whose Jobs button opens and closes the dock. It
opens as a short strip (:data:`OPEN_HEIGHT`, at most a fifth of the window), so that the pair
view keeps its room on a 1366 x 768 screen (issue 31 item 5); drag its edge for more.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView, QDockWidget, QHBoxLayout, QHeaderView, QMainWindow, QPlainTextEdit, QPushButton, QSplitter,
    QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget,
)

from dmlviewer.gui.common.widgets import format_eta
from dmlviewer.gui.jobs.job import Job, JobState
from dmlviewer.gui.jobs.runner import JobRunner

#: The height the Jobs dock opens at (pixels), at most a fifth of the main window's height.
OPEN_HEIGHT = 170

STATE_COLORS = {JobState.RUNNING: "#0072B2", JobState.FAILED: "#b00020", JobState.CANCELLED: "#8a6d00",
                JobState.FINISHED: "#1b7f3b", JobState.QUEUED: "#555555"}


def job_rows(runner: JobRunner) -> list[Job]:
    """Every job in the order it was submitted: the ended ones, the running one, the queued ones."""
    live = runner.jobs
    return sorted([j for j in runner.history if j not in live], key=lambda j: j.id) + live


class JobsView(QWidget):
    """The list of jobs and the selected job's log (see the module docstring)."""

    REFRESH_MS = 250
    #: Below this width the list and the log are stacked instead of side by side.
    STACKED_WIDTH = 480

    def __init__(self, runner: JobRunner, parent: QWidget | None = None) -> None:
        from dmlviewer.gui.common.widgets import WordElideDelegate

        super().__init__(parent)
        self.runner = runner
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Job", "State", "Progress", "ETA"])
        self.tree.setRootIsDecorated(False)
        self.tree.setSelectionMode(QAbstractItemView.SingleSelection)
        self.tree.setItemDelegate(WordElideDelegate(self.tree))  # names shortened at word ends
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
        # side by side: both readable in a short strip; one above the other in a narrow column
        # (the Jobs dock beside the Retrieval dock on a short window, gui/window/dock_layout.py)
        self.splitter = splitter = QSplitter(Qt.Horizontal)
        splitter.addWidget(self.tree)
        splitter.addWidget(self.log)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        for widget in (self.tree, self.log):
            widget.setMinimumHeight(60)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(splitter, 1)
        layout.addLayout(buttons)
        self._rows: list[Job] = []
        self._shown_log: tuple | None = None
        self._scrolled_to: Job | None = None  # the running job the list last scrolled to
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

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt API
        """A short strip (a docked view opens at its size hint): the pair view keeps the height."""
        return QSize(super().sizeHint().width(), OPEN_HEIGHT)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        orientation = Qt.Vertical if self.width() < self.STACKED_WIDTH else Qt.Horizontal
        if self.splitter.orientation() != orientation:
            self.splitter.setOrientation(orientation)

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
        running_item = None
        for i, job in enumerate(rows):
            item = self.tree.topLevelItem(i)
            state = job.state + (" (cancelling)" if job.state == JobState.RUNNING and job.cancel_requested else "")
            progress = f"{job.percent}%" if job.state == JobState.RUNNING and job.progress else ""
            eta = format_eta(job.eta_s) if job.eta_s is not None else ""  # None unless running, not cancelling
            if job is self.runner.current:
                running_item = item
            for col, text in enumerate((job.name + (" [process]" if job.process else ""), state, progress, eta)):
                item.setText(col, text)
            item.setForeground(1, _brush(STATE_COLORS.get(job.state, "#000000")))
            item.setToolTip(0, job.error.splitlines()[0] if job.error else job.name)
            if selected is not None and job is selected:
                self.tree.setCurrentItem(item)
        if self.tree.currentItem() is None and rows:
            self.tree.setCurrentItem(running_item or self.tree.topLevelItem(len(rows) - 1))
        current = self.runner.current
        if running_item is not None and current is not self._scrolled_to:
            self.tree.scrollToItem(running_item)  # the running job is always in sight
        self._scrolled_to = current
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
        if not lines:  # a job that logged nothing: say so, not "Select a job" beside a selected one
            lines.append(f"{job.name}: {job.state}, no messages")
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
        self.hide()  # opened on demand (View > Jobs, the status bar's Jobs button)

    def open(self) -> None:
        """Show the dock in front, a short strip when docked (see the module docstring)."""
        self.show()
        self.raise_()
        window = self.parentWidget()
        if isinstance(window, QMainWindow) and not self.isFloating():
            window.resizeDocks([self], [max(100, min(OPEN_HEIGHT, window.height() // 5))], Qt.Vertical)

    def toggle(self) -> None:
        """The status bar's Jobs button: open the dock, or close it when it is open."""
        if self.isVisible():
            self.hide()
        else:
            self.open()
