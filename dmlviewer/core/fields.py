"""Errors that name an input field by identifier (issue 30 item 6): the core never speaks the
command line's language. A core error says ``{field}`` where the field's name goes; the command
line words it with the option (``--model-args``), a dialog with its field's label
("Keyword arguments").

    raise FieldError("model_args", "{field} gave a model whose weights do not fit: ...")

    worded(error, CLI_OPTIONS)          # '--model-args gave a model whose weights ...'
    worded(error, {"model_args": "“Keyword arguments”"})

A message that names further fields says so with ``also`` and writes each as ``{identifier}``
(``FieldError("gem_p", "{field} needs {pooling} gem", also=("pooling",))``). Only those
placeholders are replaced: any other brace in a message (a file's key, a path) stays as it is.

A subclass may also derive from the package's own error (``class X(FieldError, ModelError)``),
so that existing ``except ModelError`` clauses keep catching it.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def word(template: str, names: Mapping[str, str], fields: Iterable[str]) -> str:
    """``template`` with each ``{identifier}`` of ``fields`` named as ``names`` says (the
    identifier itself when absent); every other brace is left as it is."""
    fields = set(fields)
    return _PLACEHOLDER.sub(lambda m: names.get(m[1], m[1]) if m[1] in fields else m[0], template)


class FieldError(ValueError):
    """An input that cannot be used; ``field`` is its identifier (``model_args``), ``template``
    the one-line message with ``{field}`` where its name goes (``also``: other fields it names,
    as ``{identifier}``). ``str()`` uses the identifiers. ``field`` None: a message about no one
    field, naming only those of ``also``."""

    def __init__(self, field: str | None, template: str, also: Iterable[str] = ()) -> None:
        self.field = field
        self.also = tuple(also)
        self.template = template if field is None or "{field}" in template else "{field}: " + template
        super().__init__(self.worded({}))

    def worded(self, names: Mapping[str, str]) -> str:
        """The message with the fields named as ``names`` says (the identifier when absent)."""
        own = dict(names)
        if self.field is not None:
            own["field"] = names.get(self.field, self.field)
        return word(self.template, own, ("field", *self.also) if self.field is not None else self.also)


def worded(error: BaseException, names: Mapping[str, str]) -> str:
    """One line for ``error``: a :class:`FieldError` worded with ``names``, anything else as is."""
    if isinstance(error, FieldError):
        return error.worded(names)
    return str(error)
