"""How the command line names the fields of the core's errors (issue 30 item 6): the core raises
:class:`dmlviewer.core.fields.FieldError` naming a field by identifier (``model_args``); the
command line says its option (``--model-args``). The one table of field -> option (the app's
dialogs name the same fields by their labels, the Python door by its keywords). Imports nothing
of the command line, so that ``dmlviewer.cli`` can word every error with it.
"""

from __future__ import annotations

#: field identifier -> the option that sets it
CLI_OPTIONS = {
    "model_args": "--model-args", "weights": "--weights", "reference_weights": "--reference-weights",
    "input_shapes": "--input-shapes", "feature_layer": "--feature-layer", "output": "--model-output",
    "size": "--size", "dataset": "--dataset", "features": "--features", "checkpoint": "--checkpoint",
}


def worded(exc: BaseException) -> str:
    """One line for ``exc`` in the command line's words (a field named by its option)."""
    from dmlviewer.core.fields import worded as word

    return word(exc, CLI_OPTIONS)
