"""The importer's errors: one line each, naming the user's inputs by field identifier
(``{arch}``, ``{head}``, ...; :mod:`dmlviewer.core.fields`), which the command line words as its
options and the Import Model dialog as its fields."""

from __future__ import annotations

from collections.abc import Sequence

from dmlviewer.core.fields import FieldError, word

from ..errors import CheckpointError

#: the importer's input fields, by identifier: what a message may name as ``{identifier}``
FIELDS = ("weights", "arch", "head", "prefix", "image_size", "mean", "std", "pooling", "gem_p", "check_against",
          "force", "reference_weights", "reference_arch", "reference_head", "reference_prefix",
          "reference_image_size", "reference_mean", "reference_std", "reference_pooling", "reference_gem_p",
          "reference_check_against")


def named(template: str, names: dict[str, str] | None = None) -> str:
    """A report line or note of the importer with its ``{field}`` placeholders worded as
    ``names`` says (the identifiers when None)."""
    return word(template, names or {}, FIELDS)


class ImportInputError(FieldError, CheckpointError):
    """An input of the importer that cannot be used (one line); ``field`` the input it is about
    (None: the files as a whole), the others named as ``{identifier}`` in the message."""

    def __init__(self, template: str, field: str | None = None) -> None:
        super().__init__(field, template, also=FIELDS)


class LayoutError(ImportInputError):
    """The files' layout is not recognized or the head cannot be represented (one line);
    ``ranking`` holds the closest candidates ``(name, matched, total, jaccard)``, ``unmatched``
    the keys no layout explains."""

    def __init__(self, message: str, ranking: Sequence[tuple] = (), unmatched: Sequence[str] = (),
                 field: str | None = None) -> None:
        super().__init__(message, field)
        self.ranking = list(ranking)
        self.unmatched = list(unmatched)
