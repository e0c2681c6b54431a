"""Errors that name an input field by identifier (issue 30 item 6): the core never speaks the
command line's language. A core error says ``{field}`` where the field's name goes; the command
line words it with the option (``--model-args``), a dialog with its field's label
("Keyword arguments").

    raise FieldError("model_args", "{field} gave a model whose weights do not fit: ...")

    worded(error, CLI_OPTIONS)          # '--model-args gave a model whose weights ...'
    worded(error, {"model_args": "“Keyword arguments”"})

A subclass may also derive from the package's own error (``class X(FieldError, ModelError)``),
so that existing ``except ModelError`` clauses keep catching it.
"""

from __future__ import annotations

from typing import Mapping


class FieldError(ValueError):
    """An input that cannot be used; ``field`` is its identifier (``model_args``), ``template``
    the one-line message with ``{field}`` where its name goes. ``str()`` uses the identifier."""

    def __init__(self, field: str, template: str) -> None:
        self.field = field
        self.template = template if "{field}" in template else "{field}: " + template
        super().__init__(self.template.format(field=field))

    def worded(self, names: Mapping[str, str]) -> str:
        """The message with the field named as ``names`` says (the identifier when absent)."""
        return self.template.format(field=names.get(self.field, self.field))


def worded(error: BaseException, names: Mapping[str, str]) -> str:
    """One line for ``error``: a :class:`FieldError` worded with ``names``, anything else as is."""
    if isinstance(error, FieldError):
        return error.worded(names)
    return str(error)
