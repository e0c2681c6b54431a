"""Errors of both trainers, naming their options by identifier (issue 30 item 6).

A message that names one option is a :class:`~dmlviewer.core.fields.FieldError`; one that names
several (``{lr} and {head_lr_mult} must be positive``) a :class:`FieldsError`, whose placeholders
*are* the options' identifiers. :func:`~dmlviewer.core.fields.worded` words either: the command
line with ``--head-lr-mult``, the training dialog with its field labels. User text put into a
template (paths, names) goes through :func:`literal`, so that its braces stay text.

:class:`TrainingError` says a run cannot start or go on (exit status 1 on the command line);
:class:`TrainingFieldsError` is one whose advice names options ("Try a lower {lr}").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from dmlviewer.core.fields import FieldError, literal, placeholders, worded  # noqa: F401 - literal: the trainers' import


class TrainingError(RuntimeError):
    """Training cannot go on (invalid configuration, non-finite loss, out of memory, ...)."""


class FieldsError(FieldError):
    """A :class:`FieldError` naming one or more fields, each by a placeholder that is its
    identifier (``"{dim} must be divisible by {groups}"``); ``field`` is the first named,
    ``fields`` all of them. ``str()`` uses the identifiers."""

    def __init__(self, template: str) -> None:
        self.fields = placeholders(template)
        super().__init__(None, template, also=self.fields)
        self.field = self.fields[0] if self.fields else ""


class TrainingFieldsError(FieldsError, TrainingError):
    """A :class:`TrainingError` whose message names options (``{field}`` placeholders)."""


def worded_run(run: Callable[..., Iterator[Any]], names: Mapping[str, str], *args: Any,
               cancel: Any = None) -> Iterator[Any]:
    """The events of ``run(*args, cancel=cancel)`` (a trainer's event generator), its errors that
    name fields raised again worded with ``names``: a job run in another process hands back only
    its error's text, so the caller's words must be put in there (the training dialog's labels)."""
    try:
        return (yield from run(*args, cancel=cancel))
    except FieldError as exc:
        kind = TrainingError if isinstance(exc, TrainingError) else ValueError
        raise kind(worded(exc, names)) from None
