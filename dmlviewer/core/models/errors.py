"""Errors raised by the models package."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint or weights file that cannot be used: unsafe, malformed or of another architecture.

    The message is one line naming the file and, for an architecture mismatch, the missing and
    unexpected parameter names.
    """
