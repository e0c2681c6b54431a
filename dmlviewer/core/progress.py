"""Progress events and cancellation shared by every long job in the core.

Long work is written as a generator that yields :class:`Progress` events and checks a
:class:`CancelToken` between steps (the superqt generator-worker pattern). The GUI wraps the
generator in its worker thread, the CLI drives it with a text progress bar, scripts run it to
its end: all through the one driver here (:func:`drive`), so all see the same events, the same
ETA (:class:`EtaClock`) and the same cancel rule. A job that notices cancellation cleans up
(saves what must be saved) and raises :class:`Cancelled` or simply returns.
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator


class Cancelled(Exception):
    """Raised inside a job when its :class:`CancelToken` was set."""


class CancelToken:
    """Thread-safe cancel flag checked by jobs between steps; ``event``: an event to read and set
    instead of a ``threading.Event`` of its own (a ``multiprocessing.Event`` that a child
    process's job reads and its parent sets)."""

    def __init__(self, event: Any = None) -> None:
        self._event = event if event is not None else threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise Cancelled()


@dataclass
class Progress:
    """One progress event of a long job.

    ``kind`` says what happened: ``"step"`` (a batch done), ``"epoch"`` (an epoch done),
    ``"eval"`` (metrics computed), ``"log"`` (a message), ``"checkpoint"`` (a file written),
    ``"done"`` (the job finished; ``data`` holds its result). ``current``/``total`` count the
    units of the job's current phase (batches, images) so a progress bar and an ETA can be
    drawn; ``data`` carries numbers such as losses or metrics (plain floats, ints, strings,
    lists, dicts: picklable across processes). A job of several phases (training: epochs,
    then evaluation passes) puts its overall fraction in ``data["overall"]``;
    :class:`OverallProgress` turns any event stream into a bar that never moves back.
    """

    kind: str
    current: int = 0
    total: int = 0
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    eta_s: float | None = None

    @property
    def fraction(self) -> float:
        """Done share of the current phase (``current / total``)."""
        return (self.current / self.total) if self.total else 0.0

    @property
    def overall(self) -> float | None:
        """The job's overall done share across its phases, when the job says (``data["overall"]``)."""
        value = self.data.get("overall") if isinstance(self.data, dict) else None
        return float(value) if isinstance(value, (int, float)) else None


class OverallProgress:
    """A job's overall fraction from its events, never moving back (issue 23: a bar that fell
    from 92 % to 42 % when a job entered its next phase).

    An event's ``data["overall"]`` is used when the job gives one. Otherwise a phase change is
    recognised when ``total`` changes or ``current`` falls back, and the new phase fills the
    rest of the bar from where the previous one left it (``base + (1 - base) * fraction``):
    without declared phases the number of phases is unknown, so each new one is taken to be
    the last. The value is clamped to at least the previous one and below 1 until ``done``.
    """

    def __init__(self) -> None:
        self.value = 0.0
        self._base = 0.0
        self._last: tuple[int, int] | None = None  # (current, total) of the last counted event
        self._declared = False

    def update(self, event: Progress) -> float:
        if event.kind == "done":
            self.value = 1.0
            return self.value
        given = event.overall
        if given is not None:
            self._declared = True
            candidate = given
        elif event.total > 0 and not self._declared:  # a job that gives overall values moves only by them
            if self._last is not None and (event.total != self._last[1] or event.current < self._last[0]):
                self._base = self.value  # a new phase starts where the bar stands
            self._last = (event.current, event.total)
            candidate = self._base + (1.0 - self._base) * event.fraction
        else:
            return self.value
        self.value = max(self.value, min(candidate, 0.999))
        return self.value


class EtaClock:
    """Estimates time remaining from the rate of completed units since the clock started.

    ``start_count`` is the count already done when the clock starts (the driver starts a clock
    at a job's first event of a phase, which may already count some units): the rate is taken
    over the units done since then. The one ETA estimator of the project: jobs that know their
    total use it directly, and :func:`drive` fills the ETA of events that come without one.
    """

    def __init__(self, total: int, start_count: int = 0) -> None:
        self.total = total
        self.start_count = start_count
        self.start = time.perf_counter()

    def eta(self, current: int) -> float | None:
        done = current - self.start_count
        if done <= 0 or self.total <= 0:
            return None
        elapsed = time.perf_counter() - self.start
        return elapsed / done * max(self.total - current, 0)


#: Kinds of events that may still arrive after a cancel request without being treated as
#: "the job ignored the request" (a job winding down: saving, logging, a last evaluation).
WIND_DOWN_KINDS = frozenset({"log", "checkpoint", "epoch", "eval", "done"})

#: ``factory(cancel) -> Iterator[Progress]``, or ``(func, args, kwargs)`` called as
#: ``func(*args, cancel=token, **kwargs)`` (picklable, for a job run in another process).
JobFactory = Callable[[CancelToken], Iterator[Progress]] | tuple


def start_job(factory: Any, cancel: CancelToken) -> Iterator[Progress]:
    """The generator of a job given as a :data:`JobFactory`."""
    if isinstance(factory, tuple):
        func, args, kwargs = (tuple(factory) + ((), {}))[:3]
        return func(*args, cancel=cancel, **(kwargs or {}))
    return factory(cancel)


class _EtaFiller:
    """Fills ``eta_s`` of events that come without one: an :class:`EtaClock` per phase
    (``total``), started at the phase's first event."""

    def __init__(self) -> None:
        self._clocks: dict[int, EtaClock] = {}

    def fill(self, event: Progress) -> None:
        if event.eta_s is not None or event.total <= 0 or event.kind == "done":
            return
        clock = self._clocks.get(event.total)
        if clock is None:
            clock = self._clocks[event.total] = EtaClock(event.total, event.current)
        event.eta_s = clock.eta(event.current)


def drive(job: Iterator[Progress] | Any, cancel: CancelToken | None = None,
          emit: Callable[[Progress], None] | None = None) -> tuple[Any, bool]:
    """Run a job to its end, passing each event to ``emit``; the one driver of every door (the
    GUI's job thread, the command line's progress bar, :func:`run_to_end`).

    ``job`` is a generator, or a :data:`JobFactory` started here with ``cancel``. Events without
    an ETA get one from :class:`EtaClock`. Returns ``(result, done)``: the ``data["result"]`` of
    the job's ``done`` event and whether there was one. Exceptions of the job propagate.

    Cancellation is cooperative: with ``cancel`` set, the job is expected to notice at its next
    check, save what must be saved and raise :class:`Cancelled` or return. Wind-down events
    (:data:`WIND_DOWN_KINDS`) pass, but a job that, resumed with its token already set, yields
    another ``step`` has ignored the request: :class:`Cancelled` is then thrown into the
    generator at that ``yield``, so even a job that never checks stops after the step in flight
    and at most one more.
    """
    eta = _EtaFiller()
    result, done = None, False
    resumed_after_cancel = False  # the job was resumed with its token already set
    if callable(job) or isinstance(job, tuple):
        if cancel is None:
            cancel = CancelToken()
        cancel.raise_if_cancelled()
        job = start_job(job, cancel)
    job = iter(job)
    try:
        event = next(job)
        while True:
            if event.kind == "done":
                done, result = True, event.data.get("result")
            eta.fill(event)
            if emit is not None:
                emit(event)
            if resumed_after_cancel and event.kind not in WIND_DOWN_KINDS:
                event = job.throw(Cancelled())  # it ran another step without looking
            else:
                resumed_after_cancel = cancel is not None and cancel.cancelled
                event = next(job)
    except StopIteration:
        pass
    return result, done


def run_job(factory: Any, cancel: CancelToken, emit: Callable[[Progress], None] | None = None) -> tuple[str, Any]:
    """:func:`drive` a job and say how it ended, never raising: ``("finished", result)``,
    ``("cancelled", result or None)`` or ``("failed", text)`` where ``text`` holds the exception
    and its traceback. A job that stops on cancel and still ends with a ``done`` event counts as
    cancelled when its result says so (``{"cancelled": True, ...}``, as training does) or when
    it never sent ``done``. What a job thread and a job's child process report."""
    try:
        result, done = drive(factory, cancel, emit)
    except Cancelled:
        return "cancelled", None
    except BaseException as exc:  # noqa: BLE001 - reported to the user, never swallowed silently
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) and cancel.cancelled:
            return "cancelled", None
        return "failed", f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}"
    if cancel.cancelled and (not done or _says_cancelled(result)):
        return "cancelled", result
    return "finished", result


def _says_cancelled(result: Any) -> bool:
    return isinstance(result, dict) and bool(result.get("cancelled"))


def run_to_end(job: Iterator[Progress]) -> Any:
    """Drive a job generator to completion and return the ``data["result"]`` of its
    ``done`` event (or ``None``). For callers that need no progress display."""
    return drive(job)[0]
