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
    job's units (batches, images) so a progress bar and an ETA can be drawn; ``data`` carries
    numbers such as losses or metrics (plain floats, ints, strings, lists, dicts: picklable
    across processes).
    """

    kind: str
    current: int = 0
    total: int = 0
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    eta_s: float | None = None

    @property
    def fraction(self) -> float:
        return (self.current / self.total) if self.total else 0.0


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
