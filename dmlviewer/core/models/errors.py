"""Errors raised by the models package."""

from __future__ import annotations

from dmlviewer.core.fields import FieldError


class CheckpointError(ValueError):
    """A checkpoint or weights file that cannot be used: unsafe, malformed or of another architecture.

    The message is one line naming the file and, for an architecture mismatch, the missing and
    unexpected parameter names.
    """


class ModelError(ValueError):
    """A model that cannot be used as given: a missing feature layer, an output that is not an
    embedding, an input it cannot take. One line saying what to change."""


class ModelFieldError(FieldError, ModelError):
    """A :class:`ModelError` caused by one input field (``output``, ``size``, ``input_shapes``...):
    the message names it by identifier and each door words it (:mod:`dmlviewer.core.fields`)."""


class CheckpointFieldError(FieldError, CheckpointError):
    """A :class:`CheckpointError` that one input field can fix (``model_args``, ``reference_weights``)."""


