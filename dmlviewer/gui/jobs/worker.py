"""Background work for the GUI: a queue of long jobs and a runner for interactive requests.

Long work in the core is a generator of :class:`~dmlviewer.core.progress.Progress` events that
checks a :class:`~dmlviewer.core.progress.CancelToken` between steps (DESIGN.md, "Layers").
:class:`JobRunner` runs one such job at a time from a visible queue, in a ``QThread`` or, for
crash isolation (training), in a separate process started with the ``"spawn"`` context whose
events stream back through a pipe read by the worker thread. :class:`LatestRunner` serves
interactive requests (pair preparation, neighbours) where only the newest request matters.

Cancellation is cooperative. The token is set; the job is expected to notice it at its next
check, save what must be saved (a checkpoint) and raise ``Cancelled`` or return. Events that
wind a job down (``log``, ``checkpoint``, ``epoch``, ``eval``) pass through, but a job that,
resumed with its token already set, yields another ``step`` event has ignored the request:
``Cancelled`` is then thrown into the generator at that ``yield``, so even a job that never
checks stops after the step in flight and at most one more. Nothing here calls
``QThread.terminate`` or spins ``processEvents``; the only hard stop is the bounded wait of
:meth:`JobRunner.shutdown`, which terminates a child *process* that outlives it.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import signal
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from PySide6.QtCore import QObject, QThread, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from dmlviewer.core.progress import Cancelled, CancelToken, OverallProgress, Progress

log = logging.getLogger(__name__)

#: ``factory(cancel) -> Iterator[Progress]``, or ``(func, args, kwargs)`` called as
#: ``func(*args, cancel=token, **kwargs)``.
JobFactory = Callable[[CancelToken], Iterator[Progress]] | tuple

#: Kinds of events that may still arrive after a cancel request without being treated as
#: "the job ignored the request".
_WIND_DOWN_KINDS = frozenset({"log", "checkpoint", "epoch", "eval", "done"})

#: Lines of log kept per job.
_LOG_LINES = 2000


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
    deleted first."""

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
    ``done`` event; ``events`` its own signals (:class:`JobEvents`).
    """

    name: str
    factory: Any
    process: bool = False
    id: int = field(default_factory=lambda: next(_job_ids))
    state: str = JobState.QUEUED
    cancel_token: CancelToken = field(default_factory=CancelToken)
    progress: Progress | None = None
    log: deque = field(default_factory=lambda: deque(maxlen=_LOG_LINES))
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


def _call_factory(factory: Any, cancel: CancelToken) -> Iterator[Progress]:
    if isinstance(factory, tuple):
        func, args, kwargs = (tuple(factory) + ((), {}))[:3]
        return func(*args, cancel=cancel, **(kwargs or {}))
    return factory(cancel)


class _Eta:
    """Fills ``eta_s`` for events that come without one, from the rate since the first event
    of the same ``total``."""

    def __init__(self) -> None:
        self._start: dict[int, tuple[float, int]] = {}

    def fill(self, event: Progress) -> None:
        if event.eta_s is not None or event.total <= 0 or event.kind == "done":
            return
        now = time.perf_counter()
        t0, c0 = self._start.setdefault(event.total, (now, event.current))
        done = event.current - c0
        if done > 0:
            event.eta_s = (now - t0) / done * max(event.total - event.current, 0)


def _drive(factory: Any, token: CancelToken, emit: Callable[[Progress], None]) -> tuple[str, Any]:
    """Run a job's generator to its end, passing each event to ``emit``.

    Returns ``("finished", result)``, ``("cancelled", result or None)`` or ``("failed", text)``
    where ``text`` holds the exception and its traceback. See the module docstring for the
    cancellation rule (``Cancelled`` is thrown in at a ``step`` that follows the request).
    """
    eta = _Eta()
    result = None
    done = False
    resumed_after_cancel = False  # the job was resumed with its token already set
    try:
        token.raise_if_cancelled()
        gen = _call_factory(factory, token)
        event = next(gen)
        while True:
            if event.kind == "done":
                done = True
                result = event.data.get("result")
            eta.fill(event)
            emit(event)
            if resumed_after_cancel and event.kind not in _WIND_DOWN_KINDS:
                event = gen.throw(Cancelled())  # it ran another step without looking
            else:
                resumed_after_cancel = token.cancelled
                event = next(gen)
    except StopIteration:
        pass
    except Cancelled:
        return "cancelled", None
    except BaseException as exc:  # noqa: BLE001 - reported to the user, never swallowed silently
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) and token.cancelled:
            return "cancelled", None
        return "failed", f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}"
    if token.cancelled and (not done or _says_cancelled(result)):
        return "cancelled", result
    return "finished", result


def _says_cancelled(result: Any) -> bool:
    """A job that stops on cancel may still end with a ``done`` event whose result says so
    (``{"cancelled": True, ...}``, as training does, with the saved checkpoint's path)."""
    return isinstance(result, dict) and bool(result.get("cancelled"))


# --------------------------------------------------------------------------------------------
# Process jobs: the child side.


class _EventCancelToken(CancelToken):
    """A cancel token backed by a ``multiprocessing.Event`` set by the parent."""

    def __init__(self, event: Any) -> None:  # noqa: D107 - no threading.Event of its own
        self._mp_event = event

    def cancel(self) -> None:
        self._mp_event.set()

    @property
    def cancelled(self) -> bool:
        return self._mp_event.is_set()

    def raise_if_cancelled(self) -> None:
        if self._mp_event.is_set():
            raise Cancelled()


class _PipeLogHandler(logging.Handler):
    def __init__(self, send: Callable[[tuple], None]) -> None:
        super().__init__(logging.INFO)
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"{record.levelname} {record.name}: {record.getMessage()}"
            self._send(("event", Progress("log", message=text)))
        except Exception:  # noqa: BLE001 - a broken pipe must not break the job's logging
            pass


def _child_main(factory: Any, conn: Any, cancel_event: Any) -> None:
    """Entry point of a process job (top-level so that "spawn" can import it).

    A process started with "spawn" inherits "spawn" as its multiprocessing start method, so
    every DataLoader in the job would start its worker processes by spawning too: each one
    re-imports torch and the project, for every epoch's training loader and every evaluation's
    loaders. That made a training run from the app take 2.4 to 5 times as long as the same
    run from the command line (``bench train-gui``). The job gets the platform's default
    method back (fork on Linux, as on the command line)."""
    multiprocessing.set_start_method(None, force=True)
    lock = threading.Lock()

    def send(message: tuple) -> None:
        with lock:
            conn.send(message)

    root = logging.getLogger()
    root.addHandler(_PipeLogHandler(send))
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    status, payload = _drive(factory, _EventCancelToken(cancel_event),
                             lambda event: send(("event", event)))
    try:
        send((status, payload))
    except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable result
        send(("failed", f"the job's result could not be sent back: {type(exc).__name__}: {exc}"))
    conn.close()


def describe_exitcode(code: int | None) -> str:
    """Human words for a child's exit code (negative: killed by a signal)."""
    if code is None:
        return "the process did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the process was killed by {name} (exit code {code})"
    return f"the process exited with code {code}"


# --------------------------------------------------------------------------------------------
# The worker thread.


class _JobThread(QThread):
    """Runs one job: its generator directly, or a child process whose pipe it reads.

    Signals are emitted from the worker thread and delivered queued to the runner, which
    lives in the GUI thread.
    """

    event = Signal(object)
    ended = Signal()  # ``outcome`` is set: (status, result or failure text)

    POLL_S = 0.05
    JOIN_S = 10.0

    def __init__(self, job: Job, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.job = job
        self._proc: Any = None
        self._cancel_event: Any = None
        self.outcome: tuple[str, Any] | None = None
        self.reported = False  # the runner has handled ``outcome``
        self._kill_requested = threading.Event()

    def run(self) -> None:  # noqa: D102 - QThread entry point
        try:
            if self.job.process:
                status, payload = self._run_process()
            else:
                status, payload = _drive(self.job.factory, self.job.cancel_token, self.event.emit)
        except BaseException as exc:  # noqa: BLE001 - never let the thread die unreported
            status, payload = "failed", f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}"
        self.outcome = (status, payload)
        self.ended.emit()

    def forward_cancel(self) -> None:
        """Pass a cancel request to the child at once (the read loop also does, when it polls)."""
        event = self._cancel_event
        if event is not None:
            event.set()

    def kill_process(self) -> None:
        """Ask the thread to terminate the child process (the bounded-wait fallback)."""
        self._kill_requested.set()

    def _run_process(self) -> tuple[str, Any]:
        ctx = multiprocessing.get_context("spawn")
        cancel_event = ctx.Event()
        self._cancel_event = cancel_event
        parent_conn, child_conn = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child_main, args=(self.job.factory, child_conn, cancel_event),
                           name=f"dmlviewer-job-{self.job.id}", daemon=False)
        self._proc = proc
        proc.start()
        child_conn.close()  # only the child writes; EOF then means the child is gone
        outcome: tuple[str, Any] | None = None
        killed = False
        try:
            while outcome is None:
                if self.job.cancel_token.cancelled and not cancel_event.is_set():
                    cancel_event.set()
                if self._kill_requested.is_set() and proc.is_alive():
                    log.warning("terminating job %s (%s) after the bounded wait", self.job.id, self.job.name)
                    proc.terminate()
                    killed = True
                try:
                    if not parent_conn.poll(self.POLL_S):
                        if not proc.is_alive() and not parent_conn.poll(0):
                            break
                        continue
                    message = parent_conn.recv()
                except (EOFError, OSError):
                    break
                if message[0] == "event":
                    self.event.emit(message[1])
                else:
                    outcome = (message[0], message[1])
        finally:
            parent_conn.close()
            proc.join(self.JOIN_S)
            if proc.is_alive():
                proc.terminate()
                proc.join(self.JOIN_S)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            self.job.exitcode = proc.exitcode
        if outcome is not None:
            return outcome
        if killed or (self.job.cancel_token.cancelled and proc.exitcode == -signal.SIGTERM):
            return "cancelled", None
        return "failed", f"The job's process ended without a result: {describe_exitcode(proc.exitcode)}."


# --------------------------------------------------------------------------------------------
# The runner.

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
            if thread.wait(int(_JobThread.JOIN_S * 2000)):
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
    def submit(self, name: str, factory: JobFactory, process: bool = False, **handlers: Callable) -> Job:
        """Queue a job; ``handlers`` (``started``, ``progress``, ``finished``, ``failed``,
        ``cancelled``) follow this job alone (:meth:`JobEvents.follow`), connected before it
        can start."""
        job = Job(name=name, factory=factory, process=process)
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
                if thread.wait(int(_JobThread.JOIN_S * 2000)):
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


# --------------------------------------------------------------------------------------------
# Interactive requests.


class _LatestWorker:
    """Serves the newest pending request of a :class:`LatestRunner`, one at a time, in a
    daemon thread (so an app that quits mid-request is not held up)."""

    def __init__(self, deliver: Callable[[str, int, Any], None]) -> None:
        self._deliver = deliver
        self._cond = threading.Condition()
        self._pending: tuple[int, Callable, bool, CancelToken] | None = None
        self._running: CancelToken | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="dmlviewer-latest", daemon=True)
        self._thread.start()

    def put(self, request: tuple[int, Callable, bool, CancelToken] | None) -> None:
        """Replace the pending request (None: drop it) and cancel the running one."""
        with self._cond:
            self._pending = request
            if self._running is not None:
                self._running.cancel()
            self._cond.notify()

    def stop(self, timeout_s: float) -> bool:
        with self._cond:
            self._stopping = True
        self.put(None)
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                request_id, func, cancel_aware, token = self._pending
                self._pending = None
                self._running = token
            try:
                value = func(token) if cancel_aware else func()
                outcome = ("result", value)
            except Cancelled:
                outcome = None
            except Exception as exc:  # noqa: BLE001 - reported to the requester
                outcome = ("failed", f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}")
            with self._cond:
                self._running = None
            if outcome is not None and not token.cancelled:
                try:
                    self._deliver(outcome[0], request_id, outcome[1])
                except RuntimeError:  # the runner's Qt object is gone (app quitting)
                    return


class LatestRunner(QObject):
    """Interactive work where only the newest request matters (pair preparation, neighbours).

    ``submit(func)`` returns a request id; ``func()`` (or ``func(cancel)`` with
    ``cancel_aware=True``, so that a superseded request can stop early) runs in a worker
    thread. A new request replaces one still pending and cancels the token of the one
    running; ``result_ready(request_id, value)`` and ``request_failed(request_id, text)``
    are emitted only for the newest request: stale results are dropped. ``pending`` says
    whether the newest request has not answered yet (so a caller keeps no request id of its
    own). Whether a result still belongs to what is open is the session's stamp check
    (``core.session.Session.accepts``), not the runner's.
    """

    result_ready = Signal(int, object)
    request_failed = Signal(int, str)
    # Emitted from the worker thread, delivered queued in the GUI thread, filtered there.
    _raw_result = Signal(int, object)
    _raw_failed = Signal(int, str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._ids = itertools.count(1)
        self._latest = 0
        self._pending = False
        self._raw_result.connect(self._on_result)
        self._raw_failed.connect(self._on_failed)
        self._worker = _LatestWorker(self._emit_raw)

    @property
    def pending(self) -> bool:
        """True while the newest request has not answered (nor been cancelled)."""
        return self._pending

    def submit(self, func: Callable[..., Any], cancel_aware: bool = False) -> int:
        self._pending = True
        self._latest = next(self._ids)
        self._worker.put((self._latest, func, cancel_aware, CancelToken()))
        return self._latest

    def cancel(self) -> None:
        """Forget every request: nothing pending runs and no result is delivered."""
        self._pending = False
        self._latest = next(self._ids)
        self._worker.put(None)

    def stop(self, timeout_s: float = 5.0) -> bool:
        """End the worker thread (at most ``timeout_s`` for the running request)."""
        self._pending = False
        self._latest = next(self._ids)
        return self._worker.stop(timeout_s)

    def _emit_raw(self, kind: str, request_id: int, value: Any) -> None:
        (self._raw_result if kind == "result" else self._raw_failed).emit(request_id, value)

    def _on_result(self, request_id: int, value: object) -> None:
        if request_id == self._latest:
            self._pending = False
            self.result_ready.emit(request_id, value)

    def _on_failed(self, request_id: int, text: str) -> None:
        if request_id == self._latest:
            self._pending = False
            self.request_failed.emit(request_id, text)
