"""Progress events and cancellation shared by every long job in the core.

Long work is written as a generator that yields :class:`Progress` events and checks a
:class:`CancelToken` between steps (the superqt generator-worker pattern). The GUI wraps the
generator in its worker thread, the CLI drives it with a text progress bar; both see the same
events. A job that notices cancellation cleans up (saves what must be saved) and raises
:class:`Cancelled` or simply returns.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator


class Cancelled(Exception):
    """Raised inside a job when its :class:`CancelToken` was set."""


class CancelToken:
    """Thread-safe cancel flag checked by jobs between steps."""

    def __init__(self) -> None:
        self._event = threading.Event()

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
    """Estimates time remaining from the rate of completed units since start."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.start = time.perf_counter()

    def eta(self, current: int) -> float | None:
        if current <= 0 or self.total <= 0:
            return None
        elapsed = time.perf_counter() - self.start
        return elapsed / current * max(self.total - current, 0)


def run_to_end(job: Iterator[Progress]) -> Any:
    """Drive a job generator to completion and return the ``data["result"]`` of its
    ``done`` event (or ``None``). For callers that need no progress display."""
    result = None
    for event in job:
        if event.kind == "done":
            result = event.data.get("result")
    return result
