"""How the command line names the fields of the core's errors (issue 30 item 6): the core raises
:class:`dmlviewer.core.fields.FieldError` naming a field by identifier (``model_args``); the
command line says its option (``--model-args``). The one table of field -> option (the app's
dialogs name the same fields by their labels, the Python door by its keywords). Imports nothing
of the command line, so that ``dmlviewer.cli`` can word every error with it.
"""

from __future__ import annotations

from typing import Iterable

#: The fields whose option is not ``--`` and the identifier with dashes (``model_args``:
#: ``--model-args``); every other field is named by that rule (:func:`option`).
CLI_OPTIONS = {
    "output": "--model-output",
    # not an option: what --model-output takes, where the core's message says it (no function here)
    "output_forms": "an index, e.g. 1, or a key",
    # a two-branch run sizes both branches with --image-size and batches --classes-per-batch pairs
    "batch_pairs": "--classes-per-batch", "reference_size": "--image-size", "query_shape": "--image-size",
}


def option(field: str) -> str:
    """The option that sets ``field``."""
    return CLI_OPTIONS.get(field) or "--" + field.replace("_", "-")


def option_names(fields: Iterable[str]) -> dict[str, str]:
    """``fields`` -> their options, for the core's messages and reports that name them."""
    return {field: option(field) for field in fields}


def worded(exc: BaseException) -> str:
    """One line for ``exc`` in the command line's words (a field named by its option)."""
    from dmlviewer.core.fields import FieldError

    if not isinstance(exc, FieldError):
        return str(exc)
    return exc.worded(option_names(f for f in (exc.field, *exc.also) if f))
