"""The job runner: one long job at a time from a visible queue, each in a ``QThread``.

Long work in the core is a generator of :class:`~dmlviewer.core.progress.Progress` events that
checks a :class:`~dmlviewer.core.progress.CancelToken` between steps (DESIGN.md, "Layers").
:class:`JobRunner` runs it through the core's one driver (``core.progress.run_job``: the cancel
rule and the ETA live there) in a worker thread, or, for crash isolation (training), in a child
process (:mod:`.process`) whose events the worker thread reads. The job model is :mod:`.job`;
interactive requests where only the newest matters are :mod:`.latest`'s.

Cancellation is cooperative (``core.progress.drive``). Nothing here calls ``QThread.terminate`` or
spins ``processEvents``; the only hard stop is the bounded wait of :meth:`JobRunner.shutdown`,
which terminates a child *process* that outlives it.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections import deque
from typing import Any, Callable

from PySide6.QtCore import QObject, QThread, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from dmlviewer.core.background import yield_to_foreground
from dmlviewer.core.progress import JobFactory, Progress, run_job
from dmlviewer.gui.jobs.job import Job, JobState
from dmlviewer.gui.jobs.process import ChildProcess

log = logging.getLogger(__name__)


class _JobThread(QThread):
    """Runs one job: its generator directly, or a child process whose pipe it reads.

    Signals are emitted from the worker thread and delivered queued to the runner, which
    lives in the GUI thread.
    """

    event = Signal(object)
    ended = Signal()  # ``outcome`` is set: (status, result or failure text)

    def __init__(self, job: Job, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.job = job
        self.child = ChildProcess(job.factory, job.cancel_token, job.id, job.name) if job.process else None
        self.outcome: tuple[str, Any] | None = None
        self.reported = False  # the runner has handled ``outcome``

    def run(self) -> None:  # noqa: D102 - QThread entry point
        try:
            if self.child is None:  # a child lowers its own (it would inherit this thread's)
                yield_to_foreground()
            if self.child is not None:
                status, payload = self.child.run(self.event.emit)
            else:
                status, payload = run_job(self.job.factory, self.job.cancel_token, self.event.emit)
        except BaseException as exc:  # noqa: BLE001 - never let the thread die unreported
            status, payload = "failed", f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}"
        if self.child is not None:
            self.job.exitcode = self.child.exitcode
        self.outcome = (status, payload)
        self.ended.emit()

    def forward_cancel(self) -> None:
        """Pass a cancel request to the child process at once (a thread job reads the token)."""
        if self.child is not None:
            self.child.forward_cancel()

    def kill_process(self) -> None:
        """Ask the thread to terminate the child process (the bounded-wait fallback)."""
        if self.child is not None:
            self.child.kill()


#: Job threads that have not finished yet, kept referenced until they have.
_LIVE_THREADS: set[_JobThread] = set()
#: Longest the interpreter's exit waits, in all, for running jobs to notice their cancel and stop.
EXIT_WAIT_S = 30.0


def stop_jobs_at_exit(timeout_s: float | None = None) -> list[_JobThread]:
    """Registered with ``atexit`` when the first job starts (issue 42 item 9): a script or program
    that ends while a job runs cancels every running job and joins its thread, at most
    ``timeout_s`` (default :data:`EXIT_WAIT_S`) in all, a child process terminated after that.
    A ``QThread`` destroyed while it runs aborts the interpreter (exit 134), and a job stopped
    by its cancel cleans up as it does in the app (a feature file being written is removed). A
    thread that outlives the wait is detached: never freed, so never destroyed while it runs.
    Returns the threads left running."""
    deadline = time.monotonic() + (EXIT_WAIT_S if timeout_s is None else timeout_s)
    running = [thread for thread in list(_LIVE_THREADS) if thread.isRunning()]
    for thread in running:
        thread.job.cancel_token.cancel()
        thread.forward_cancel()
    left = []
    for thread in running:
        if thread.wait(max(0, int((deadline - time.monotonic()) * 1000))):
            continue
        if thread.job.process:
            thread.kill_process()
            if thread.wait(int(ChildProcess.JOIN_S * 2000)):
                continue
        left.append(thread)
    for thread in left:
        import ctypes

        log.warning("job %s (%s) did not stop at exit: its thread is left running", thread.job.id, thread.job.name)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(thread))  # never freed: never destroyed while it runs
    return left


_exit_hook = False


def _stop_jobs_at_exit_once() -> None:
    """Register :func:`stop_jobs_at_exit` (once, at the first job: after the exit handlers of
    what the job uses, e.g. ``dmlviewer.view``'s temporary dataset, so that it runs before them)."""
    global _exit_hook
    if not _exit_hook:
        import atexit

        atexit.register(stop_jobs_at_exit)
        _exit_hook = True


class JobRunner(QObject):
    """One long job at a time from a visible queue (see the module docstring).

    ``submit(name, factory, process=False, **handlers)`` queues a job; ``factory(cancel)``
    returns the job's generator; ``handlers`` follow that job alone (``job.events``), while the
    runner's signals below report every job (the jobs view, the status bar). With
    ``process=True`` the factory must be picklable: a top-level function, a
    ``functools.partial`` of one, or ``(func, args, kwargs)`` called in the child as
    ``func(*args, cancel=token, **kwargs)``.
    """

    job_started = Signal(object)  # Job
    job_progress = Signal(object, object)  # Job, Progress
    job_finished = Signal(object, object)  # Job, result
    job_failed = Signal(object, str)  # Job, message with traceback
    job_cancelled = Signal(object)  # Job
    queue_changed = Signal()

    #: Ended jobs kept in :attr:`history` for the jobs view.
    HISTORY = 50

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._queue: deque[Job] = deque()
        self._current: Job | None = None
        self._thread: _JobThread | None = None
        self.history: deque[Job] = deque(maxlen=self.HISTORY)

    # -- state
    @property
    def busy(self) -> bool:
        return self._current is not None or bool(self._queue)

    @property
    def current(self) -> Job | None:
        return self._current

    @property
    def jobs(self) -> list[Job]:
        """The running job (first) and the queued ones, in order."""
        return ([self._current] if self._current is not None else []) + list(self._queue)

    # -- control
    def submit(self, name: str, factory: JobFactory, process: bool = False, failure_title: str | None = None,
               **handlers: Callable) -> Job:
        """Queue a job; ``handlers`` (``started``, ``progress``, ``finished``, ``failed``,
        ``cancelled``) follow this job alone (:meth:`JobEvents.follow`), connected before it
        can start; ``failure_title``: see :class:`Job`."""
        job = Job(name=name, factory=factory, process=process, failure_title=failure_title)
        job.events.follow(**handlers)
        self._queue.append(job)
        log.info("queued job %s: %s", job.id, name)
        self.queue_changed.emit()
        self._start_next()
        return job

    def cancel(self, job: Job) -> None:
        """Cancel a queued job at once, or ask the running one to stop (it saves first)."""
        if job in self._queue:
            self._queue.remove(job)
            job.cancel_token.cancel()
            self._end(job, JobState.CANCELLED)
            self._announce("cancelled", job)
            self.queue_changed.emit()
        elif job is self._current and not job.cancel_requested:
            job.cancel_token.cancel()
            if self._thread is not None:
                self._thread.forward_cancel()
            job.log.append("cancel requested")
            self.queue_changed.emit()

    def cancel_all(self) -> None:
        for job in list(self._queue):
            self.cancel(job)
        if self._current is not None:
            self.cancel(self._current)

    def wait(self, timeout_s: float) -> bool:
        """Block until the running job's thread ends (at most ``timeout_s``); True if it did.

        The job's end is then reported (its signals emitted) before this returns, so
        ``busy`` is already False when nothing else is queued.
        """
        thread = self._thread
        if thread is None:
            return True
        if not thread.wait(int(max(timeout_s, 0) * 1000)):
            return False
        self._report(thread)
        return True

    def shutdown(self, timeout_s: float = 30.0) -> bool:
        """Cancel everything and wait, at most ``timeout_s``, for the running job to save
        and stop; a child process still alive then is terminated. True if the job stopped
        by itself in time."""
        self.cancel_all()
        if self.wait(timeout_s):
            return True
        if self._thread is not None:
            if self._current is not None and self._current.process:
                thread = self._thread
                thread.kill_process()
                if thread.wait(int(ChildProcess.JOIN_S * 2000)):
                    self._report(thread)
            else:
                log.warning("job %s did not stop within %.0f s", self._current, timeout_s)
        return False

    # -- internals
    def _start_next(self) -> None:
        if self._current is not None or not self._queue:
            return
        job = self._queue.popleft()
        self._current = job
        job.state = JobState.RUNNING
        job.started_at = time.time()
        thread = _JobThread(job)  # no Qt parent: it must outlive a runner deleted mid-job
        _LIVE_THREADS.add(thread)
        _stop_jobs_at_exit_once()
        thread.event.connect(self._on_event)
        thread.ended.connect(self._on_ended)
        thread.finished.connect(self._reap_thread)
        self._thread = thread
        log.info("starting job %s: %s%s", job.id, job.name, " (process)" if job.process else "")
        self._announce("started", job)
        self.queue_changed.emit()
        thread.start()

    def _on_event(self, event: Progress) -> None:
        thread = self.sender()
        job = thread.job if isinstance(thread, _JobThread) else self._current
        if job is None:
            return
        job.record(event)
        if event.message and event.kind != "step":
            job.log.append(event.message)
        self._announce("progress", job, event)

    def _on_ended(self) -> None:
        thread = self.sender()
        if isinstance(thread, _JobThread):
            self._report(thread)

    def _report(self, thread: _JobThread) -> None:
        """Record the end of ``thread``'s job and emit its signal (once per thread)."""
        if thread.reported or thread.outcome is None:
            return
        thread.reported = True
        job = thread.job
        status, payload = thread.outcome
        if thread is self._thread:
            self._thread = None
        if job is self._current:
            self._current = None
        if status == "finished":
            job.result = payload
            self._end(job, JobState.FINISHED)
            self._announce("finished", job, payload)
        elif status == "cancelled":
            job.result = payload
            self._end(job, JobState.CANCELLED)
            self._announce("cancelled", job)
        else:
            job.error = str(payload)
            job.log.append(job.error)
            log.error("job %s (%s) failed: %s", job.id, job.name, job.error.splitlines()[0])
            self._end(job, JobState.FAILED)
            self._announce("failed", job, job.error)
        self.queue_changed.emit()
        self._start_next()

    def _announce(self, what: str, job: Job, *args: Any) -> None:
        """``what`` happened to ``job`` (``started``, ``progress``, ``finished``, ``failed``,
        ``cancelled``): its own signal first (the view that started it), then the runner's."""
        getattr(job.events, what).emit(job, *args)
        getattr(self, f"job_{what}").emit(job, *args)

    def _end(self, job: Job, state: str) -> None:
        job.state = state
        job.ended_at = time.time()
        if state == JobState.CANCELLED:
            job.log.append("cancelled")
        self.history.append(job)

    def _reap_thread(self) -> None:
        thread = self.sender()
        if isinstance(thread, _JobThread):
            thread.wait(1000)  # "finished" is emitted just before the thread returns
            _LIVE_THREADS.discard(thread)


def confirm_close(runner: JobRunner, parent: QWidget | None = None, timeout_s: float = 60.0,
                  ask: Callable[[str], bool] | None = None) -> bool:
    """Called from the main window's ``closeEvent``: True when the window may close.

    With no job running it returns True. Otherwise it asks whether to cancel the running job
    (``ask(text) -> bool`` replaces the message box, for tests); on yes it cancels every job
    and waits, at most ``timeout_s``, for the running one to save its checkpoint and stop.
    """
    if not runner.busy:
        return True
    current = runner.current
    name = current.name if current is not None else "a queued job"
    text = (f"'{name}' is still running. Cancel it and close?\n\n"
            "A cancelled training saves a checkpoint first.")
    if ask is None:
        answer = QMessageBox.question(parent, "Job running", text,
                                      QMessageBox.Yes | QMessageBox.No, QMessageBox.No)
        yes = answer == QMessageBox.Yes
    else:
        yes = ask(text)
    if not yes:
        return False
    runner.shutdown(timeout_s)
    return True
