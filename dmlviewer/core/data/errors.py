"""Errors and problem reports of the data layer.

Index files that are missing or malformed stop the opening of a dataset (:class:`DatasetError`).
Single images that are missing, truncated or not images are reported per file
(:class:`ImageError` when one image is asked for, :class:`ImageProblem` records when many are
checked or skipped) so that one bad file never crashes a long job and never goes unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class DatasetError(ValueError):
    """A dataset folder cannot be read: missing or malformed index file, unknown format.

    ``path`` is the offending file or folder, ``line`` the 1-based line number when one line
    of an index file is at fault.
    """

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else str(path)
        self.line = line


class ImageError(Exception):
    """One image file cannot be used: missing, empty, truncated or not an image."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if str(path) else reason)
        self.path = str(path)
        self.reason = reason


@dataclass(frozen=True)
class ImageProblem:
    """A bad image found while checking or loading a dataset: file, reason and, where known,
    the image's index in its :class:`~dmlviewer.core.data.records.Dataset`."""

    path: str
    reason: str
    index: int | None = None

    def __str__(self) -> str:
        where = "" if self.index is None else f" (index {self.index})"
        return f"{self.path}{where}: {self.reason}"
