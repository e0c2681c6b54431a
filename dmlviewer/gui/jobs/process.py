"""Process isolation for jobs that may crash (training): the job runs in a child process started
with the ``"spawn"`` context, its events stream back through a pipe, and its exit code is put in
words when it dies without a result.

:class:`ChildProcess` is the parent's side (read by a job thread of
:class:`~dmlviewer.gui.jobs.runner.JobRunner`); :func:`child_main` the child's. Both ends use the
core's one driver (``core.progress.run_job``), so a process job has the same cancel rule and
ETA as a thread job. No Qt here: the parent side calls back with each event.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
from typing import Any, Callable

from dmlviewer.core.background import yield_to_foreground
from dmlviewer.core.progress import CancelToken, Progress, run_job

log = logging.getLogger(__name__)


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


def child_main(factory: Any, conn: Any, cancel_event: Any) -> None:
    """Entry point of a process job (top-level so that "spawn" can import it).

    A process started with "spawn" inherits "spawn" as its multiprocessing start method, so
    every DataLoader in the job would start its worker processes by spawning too: each one
    re-imports torch and the project, for every epoch's training loader and every evaluation's
    loaders. That made a training run from the app take 2.4 to 5 times as long as the same
    run from the command line (``bench train-gui``). The job gets the platform's default
    method back (fork on Linux, as on the command line). The child runs below the GUI's CPU
    priority with a core left to it (``core.background``)."""
    multiprocessing.set_start_method(None, force=True)
    yield_to_foreground(whole_process=True)
    lock = threading.Lock()

    def send(message: tuple) -> None:
        with lock:
            conn.send(message)

    root = logging.getLogger()
    root.addHandler(_PipeLogHandler(send))
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    status, payload = run_job(factory, CancelToken(cancel_event), lambda event: send(("event", event)))
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


class ChildProcess:
    """The parent's side of one process job: start the child, pass cancel requests on, read its
    events until it reports its end or dies, and reap it (terminate, then kill, after bounded
    waits). ``kill()`` asks the read loop to terminate the child (the runner's bounded-wait
    fallback at shutdown)."""

    POLL_S = 0.05
    JOIN_S = 10.0

    def __init__(self, factory: Any, cancel: CancelToken, job_id: int, job_name: str = "") -> None:
        self.factory = factory
        self.cancel = cancel
        self.job_id = job_id
        self.job_name = job_name
        self.exitcode: int | None = None
        self._cancel_event: Any = None
        self._kill_requested = threading.Event()

    def forward_cancel(self) -> None:
        """Pass a cancel request to the child at once (the read loop also does, when it polls)."""
        event = self._cancel_event
        if event is not None:
            event.set()

    def kill(self) -> None:
        self._kill_requested.set()

    def run(self, emit: Callable[[Progress], None]) -> tuple[str, Any]:
        """Run the job in a child to its end, passing each event to ``emit``: ``(status,
        payload)`` as :func:`~dmlviewer.core.progress.run_job` says it, or a failure that puts
        the child's exit code in words when it died without a result."""
        ctx = multiprocessing.get_context("spawn")
        cancel_event = ctx.Event()
        self._cancel_event = cancel_event
        parent_conn, child_conn = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=child_main, args=(self.factory, child_conn, cancel_event),
                           name=f"dmlviewer-job-{self.job_id}", daemon=False)
        proc.start()
        child_conn.close()  # only the child writes; EOF then means the child is gone
        outcome: tuple[str, Any] | None = None
        killed = False
        try:
            while outcome is None:
                if self.cancel.cancelled and not cancel_event.is_set():
                    cancel_event.set()
                if self._kill_requested.is_set() and proc.is_alive():
                    log.warning("terminating job %s (%s) after the bounded wait", self.job_id, self.job_name)
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
                    emit(message[1])
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
            self.exitcode = proc.exitcode
        if outcome is not None:
            return outcome
        if killed or (self.cancel.cancelled and proc.exitcode == -signal.SIGTERM):
            return "cancelled", None
        return "failed", f"The job's process ended without a result: {describe_exitcode(proc.exitcode)}."
