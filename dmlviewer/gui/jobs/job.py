"""The job model: one long job (:class:`Job`), its states (:class:`JobState`) and its own signals
(:class:`JobEvents`).

A job is what :class:`~dmlviewer.gui.jobs.runner.JobRunner` queues and runs: a factory of a core
generator of :class:`~dmlviewer.core.progress.Progress` events, where it stands and what it said.
Its overall fraction and ETA come from the core (``OverallProgress``, the driver's ``EtaClock``).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from PySide6.QtCore import QObject, Signal

from dmlviewer.core.progress import CancelToken, OverallProgress, Progress

#: Lines of log kept per job.
LOG_LINES = 2000


class JobState:
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ENDED = (FINISHED, FAILED, CANCELLED)


_job_ids = itertools.count(1)


class JobEvents(QObject):
    """One job's own signals, with the runner's arguments (the job first), beside the runner's
    signals for every job, and emitted before them (the view that started the job has shown an
    event when the jobs view and the status bar hear of it): a view follows its job here without
    asking of each event whether the job is its own, and Qt drops the connections of a view
    deleted first.

    A follower updates its own view (a status line, a plot). It shows no error dialog: a failed
    job's one dialog is the main window's (``WindowJobs.on_job_failed``), so that each failure is
    said once (issue 42 item 11: a failed report showed its own dialog and the window's)."""

    started = Signal(object)  # Job
    progress = Signal(object, object)  # Job, Progress
    finished = Signal(object, object)  # Job, result
    failed = Signal(object, str)  # Job, message with traceback
    cancelled = Signal(object)  # Job

    def follow(self, *, started: Callable | None = None, progress: Callable | None = None,
               finished: Callable | None = None, failed: Callable | None = None,
               cancelled: Callable | None = None) -> None:
        """Connect the given handlers to this job's signals."""
        for signal_, handler in ((self.started, started), (self.progress, progress), (self.finished, finished),
                                 (self.failed, failed), (self.cancelled, cancelled)):
            if handler is not None:
                signal_.connect(handler)


@dataclass(eq=False)
class Job:
    """One long job: what to run, where it stands and what it said.

    ``progress`` is the last event; ``fraction`` the job's overall done share across its
    phases, never moving back (``core.progress.OverallProgress``); ``eta_s`` the last event's
    estimate while the job runs and nobody asked it to stop (None otherwise: a cancelled job
    shows no stale ETA); ``log`` the job's messages (``log`` events and event messages),
    ``error`` the failure text with the traceback, ``result`` the ``data["result"]`` of its
    ``done`` event; ``events`` its own signals (:class:`JobEvents`); ``failure_title`` the
    title of the dialog that says it failed, in the job's own words ("The report could not be
    written"; None: "Job failed: NAME").
    """

    name: str
    factory: Any
    process: bool = False
    failure_title: str | None = None
    id: int = field(default_factory=lambda: next(_job_ids))
    state: str = JobState.QUEUED
    cancel_token: CancelToken = field(default_factory=CancelToken)
    progress: Progress | None = None
    log: deque = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    error: str | None = None
    exitcode: int | None = None
    result: Any = None
    submitted_at: float = field(default_factory=time.time)
    started_at: float | None = None
    ended_at: float | None = None
    overall: OverallProgress = field(default_factory=OverallProgress, repr=False)
    events: JobEvents = field(default_factory=JobEvents, repr=False)

    def record(self, event: Progress) -> None:
        """Take ``event`` as the job's latest progress (the overall fraction follows it)."""
        self.progress = event
        self.overall.update(event)

    @property
    def fraction(self) -> float:
        return self.overall.value

    @property
    def percent(self) -> int:
        """Whole percent done, rounded down: "100" only once the job is done."""
        return int(100 * self.fraction)

    @property
    def eta_s(self) -> float | None:
        if self.progress is None or self.state != JobState.RUNNING or self.cancel_requested:
            return None
        return self.progress.eta_s

    def status_text(self) -> str:
        """One line for the job's state: "42 %, ETA 01:10", "cancelling…", "cancelled", ..."""
        if self.state == JobState.RUNNING:
            if self.cancel_requested:
                return "cancelling…"
            if self.progress is None:
                return "starting…"
            from dmlviewer.gui.common.widgets import format_eta  # one ETA format in the app

            eta = self.eta_s
            return f"{self.percent} %" + (f", ETA {format_eta(eta)}" if eta is not None else "")
        return self.state

    @property
    def cancel_requested(self) -> bool:
        return self.cancel_token.cancelled

    @property
    def ended(self) -> bool:
        return self.state in JobState.ENDED

    def __repr__(self) -> str:
        return f"Job(id={self.id}, name={self.name!r}, state={self.state})"
