"""The status bar's side of long work and messages (issue 23 items 7 and 11).

:class:`JobStatus` shows the running job in the status bar: its name, its overall progress
(``Job.fraction``, which never moves back across phases), "ETA" while it runs, "cancelling…"
once asked to stop, and the last job's end ("cancelled: …", "failed: …", the state first so
that eliding the name never hides it) for :attr:`JobStatus.ENDED_SHOWN_S` seconds when nothing
runs (then the bar is clear: the Jobs view keeps the record, issue 31 item 3; the end is
forgotten when its own timer fires, not when a wall clock agrees, since Qt's coarse timers fire
up to 5 % early and a 10.05 s check at 9.6 s left it on screen for good, issue 42 item 1); a
"Jobs" button opens and closes the Jobs dock, so the dock can stay hidden and the pair view
keeps the height. It is compact, so that the hover or pinned-point message beside it reads whole
in a 1366-px window while a job runs: a short bar, the job's name elided before its state
("Extract fe…: 42 %, ETA 01:10", the whole line in the tooltip), and the labels handed to
:meth:`JobStatus.give_way` (the dataset's and the model's) narrower while a job runs.
:class:`MessageStatusBar` draws temporary messages (hover read-outs,
notices) in a label that elides long text in the middle, with the whole text as its tooltip,
instead of cutting it ("[pinne"); :class:`FittedLabel` does the same for the permanent labels.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QSizePolicy, QStatusBar, QToolButton, QWidget

from dmlviewer.core.progress import Progress
from dmlviewer.gui.common.widgets import ElidedLabel, elide_words, format_eta
from dmlviewer.gui.jobs.job import Job, JobState
from dmlviewer.gui.jobs.runner import JobRunner


#: Width the status bar's message keeps on a narrow window (the permanent labels elide first).
MESSAGE_MIN_WIDTH = 240
#: Widest the running job's line and its bar get (the job's state, e.g. "42 %, ETA 01:10", is
#: 90-110 px of it, and the name keeps whole words: "Extract features…" needs about 110):
#: with them the pinned-point message reads whole at 1366 px.
JOB_LABEL_WIDTH = 224
JOB_BAR_WIDTH = 56
#: Widest a label handed to :meth:`JobStatus.give_way` gets while a job runs (at 160 the pinned-point
#: message of the 1366 px test lacked 1 px in a full test run).
GIVE_WAY_WIDTH = 150


class FittedLabel(ElidedLabel):
    """An elided one-line label that asks for its text's width, up to ``max_width``; a
    ``whole`` one is never narrower than that (numbers such as a similarity are not elided:
    the labels beside it give way)."""

    def __init__(self, text: str = "", max_width: int = 260, mode: Qt.TextElideMode = Qt.ElideMiddle,
                 parent: QWidget | None = None, whole: bool = False) -> None:
        super().__init__(text, mode, parent)
        self.max_width = max_width
        self.whole = whole
        #: the end of the text drawn whole where room allows (a job's state): the rest gives way
        self.tail = ""
        self.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Preferred)

    def elided(self, width: int) -> str:
        """The text as drawn in ``width`` pixels: the part before :attr:`tail` shortened first, at
        word ends ("Extract features…: 42 %", never "Extrac…: 42 %", issue 42 item 4); where not
        one word of it fits, the tail alone."""
        text, tail = self.text(), self.tail
        metrics = self.fontMetrics()
        if not tail or not text.endswith(tail) or metrics.horizontalAdvance(text) <= width:
            return super().elided(width)
        room = width - metrics.horizontalAdvance(tail)
        head = elide_words(metrics, text[:-len(tail)], room, self.mode) if room > 0 else ""
        if head.strip("… ") == "":  # not one word of the name fits: the tail alone (": " dropped)
            return elide_words(metrics, tail.lstrip(": "), width, Qt.ElideRight)
        return head + tail

    def setText(self, text: str) -> None:  # noqa: N802 - Qt API
        super().setText(text)
        self.updateGeometry()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt API
        margins = self.contentsMargins()
        width = self.fontMetrics().horizontalAdvance(self.text()) + margins.left() + margins.right() + 2
        return QSize(min(width, self.max_width), super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt API
        width = self.sizeHint().width()
        return QSize(width if self.whole else min(width, 40), super().minimumSizeHint().height())


class MessageStatusBar(QStatusBar):
    """A status bar whose temporary message is an eliding label (see the module docstring).
    ``currentMessage``/``showMessage``/``clearMessage`` behave as QStatusBar's."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message_label = ElidedLabel("", Qt.ElideMiddle)
        self.message_label.setObjectName("statusMessage")
        self.message_label.setContentsMargins(4, 0, 4, 0)
        self.message_label.setMinimumWidth(MESSAGE_MIN_WIDTH)  # the labels beside it give way first
        # A permanent widget: QStatusBar hides its normal widgets while a message shows.
        self.addPermanentWidget(self.message_label, 1)
        self.messageChanged.connect(self.message_label.setText)

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt API
        """No message text of QStatusBar's own (it would be cut, not elided): the label draws it."""
        QWidget.paintEvent(self, event)


class JobStatus(QWidget):
    """The running job in the status bar (see the module docstring). ``open_requested``: the
    Jobs button was clicked (the main window opens the Jobs dock, or closes it when open)."""

    open_requested = Signal()
    REFRESH_MS = 250
    #: How long a cancelled or failed job's end stays said when nothing else runs.
    ENDED_SHOWN_S = 10.0

    def __init__(self, runner: JobRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runner = runner
        self.label = FittedLabel("", max_width=JOB_LABEL_WIDTH, mode=Qt.ElideRight)  # the whole line in the tooltip
        self.label.setObjectName("jobStatusLabel")
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setFixedSize(JOB_BAR_WIDTH, 14)
        self.button = QToolButton()
        self.button.setText("Jobs")
        self.button.setAutoRaise(True)
        self.button.setToolTip("Show or hide the Jobs dock: the queue, the recent jobs and their logs")
        self.button.clicked.connect(self.open_requested)
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 0, 4, 0)
        row.setSpacing(6)
        row.addWidget(self.label)
        row.addWidget(self.bar)
        row.addWidget(self.button)
        self._last_ended: Job | None = None  # said until _ended_timer fires
        self._ended_timer = QTimer(self)
        self._ended_timer.setSingleShot(True)
        self._ended_timer.timeout.connect(self._forget_ended)
        self._giving_way: list[tuple[FittedLabel, int, int]] = []  # (label, its width, while a job runs)
        self._dirty = True
        self._timer = QTimer(self)
        self._timer.setInterval(self.REFRESH_MS)
        self._timer.timeout.connect(self._refresh_if_dirty)
        self._timer.start()
        runner.queue_changed.connect(self.refresh)
        runner.job_progress.connect(self._mark_dirty)
        for signal in (runner.job_finished, runner.job_failed, runner.job_cancelled):
            signal.connect(self._on_ended)
        self.refresh()

    def _mark_dirty(self, *_args) -> None:
        self._dirty = True

    def _refresh_if_dirty(self) -> None:
        if self._dirty:
            self.refresh()

    def _on_ended(self, job: Job, *_args) -> None:
        self._last_ended = job
        self._ended_timer.start(int(self.ENDED_SHOWN_S * 1000))  # a later end restarts it
        self.refresh()

    def _forget_ended(self) -> None:
        """The last job's end has been said long enough: the bar is clear of it."""
        self._last_ended = None
        self.refresh()

    def give_way(self, label: FittedLabel, width: int = GIVE_WAY_WIDTH) -> None:
        """While a job runs, ``label`` is at most ``width`` px wide (elided first), so that the
        job's line and the message beside it keep their room; its own width when none runs."""
        self._giving_way.append((label, label.max_width, width))
        self.refresh()

    def text(self) -> str:
        """What the label says (also its tooltip); while a job runs it ends in :meth:`state_text`."""
        job = self.runner.current
        if job is not None:
            return f"{job.name}{self.state_text()}"
        last = self._last_ended
        if last is not None and last.state in (JobState.CANCELLED, JobState.FAILED):
            return f"{last.state}: {last.name}"
        return ""

    def state_text(self) -> str:
        """The running job's part of :meth:`text` that is never elided (": 42 %, ETA 01:10
        (+2 queued)"); "" when none runs."""
        job = self.runner.current
        if job is None:
            return ""
        queued = len(self.runner.jobs) - 1
        return f": {job.status_text()}" + (f" (+{queued} queued)" if queued else "")

    def refresh(self) -> None:
        self._dirty = False
        job = self.runner.current
        text = self.text()
        self.label.tail = self.state_text()
        self.label.setText(text)
        self.label.setToolTip(text)
        self.setToolTip(text)
        self.bar.setVisible(job is not None)
        for label, own, narrow in self._giving_way:
            width = own if job is None else narrow
            if label.max_width != width:
                label.max_width = width
                label.updateGeometry()
        if job is not None:
            self.bar.setValue(int(round(1000 * job.fraction)))
            self.bar.setToolTip(f"{job.percent} % of '{job.name}'")


def show_progress(bar: QProgressBar, label: QLabel, job: Job, event: Progress) -> None:
    """A view's own progress bar (0-1000) and status line for ``job``'s ``event``: the job's
    overall fraction (never moving back), the event's message with its count, and the time left
    while one is known (none once cancelling)."""
    if event.total:
        bar.setValue(int(round(1000 * job.fraction)))
    text = event.message or event.kind
    if event.total:
        text += f" {event.current}/{event.total}"
    if job.eta_s is not None:
        text += f"  (ETA {format_eta(job.eta_s)})"
    label.setText(text)
