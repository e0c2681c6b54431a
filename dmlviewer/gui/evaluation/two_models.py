"""Jobs of both open models (Tools > Compare Models: the comparison and What changed): each
step under the model lock, and the stamps that tell whether their results still belong to the
open models."""

from __future__ import annotations

from typing import Any, Callable, Iterator


def locked_steps(job: Iterator, lock) -> Iterator:
    """Re-yield a generator's events, running each of its steps under ``lock`` (so that the
    pair view, which uses the same models, never runs a model at the same time); returns its
    return value."""
    while True:
        with lock:
            try:
                event = next(job)
            except StopIteration as stop:
                return stop.value
        yield event


def open_models(session) -> tuple | None:
    """Models A and B (the session's slots) when both are open with a dataset, else None."""
    a, b = session.slot("primary"), session.slot("compare")
    return None if a is None or b is None or session.dataset is None else (a, b)


def queue_two_model_job(window, name: str, steps: Callable[[Any], Iterator], **handlers) -> tuple:
    """Queue the job of both open models: ``steps(cancel)``'s events, each step under the model
    lock (:func:`locked_steps`). Returns the job and the stamps of both slots taken now (its
    results are shown only while the session accepts both)."""
    session, lock = window.session, window.model_lock
    stamps = (session.stamp("primary"), session.stamp("compare"))
    job = window.runner.submit(name, lambda cancel: locked_steps(steps(cancel), lock), **handlers)
    return job, stamps
