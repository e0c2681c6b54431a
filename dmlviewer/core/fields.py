"""Errors that name an input field by identifier (issue 30 item 6): the core never speaks the
command line's language. A core error says ``{field}`` where the field's name goes; the command
line words it with the option (``--model-args``), a dialog with its field's label
("Keyword arguments").

    raise FieldError("model_args", "{field} gave a model whose weights do not fit: ...")

    worded(error, CLI_OPTIONS)          # '--model-args gave a model whose weights ...'
    worded(error, {"model_args": "“Keyword arguments”"})

A message that names further fields says so with ``also`` and writes each as ``{identifier}``
(``FieldError("gem_p", "{field} needs {pooling} gem", also=("pooling",))``). Only those
placeholders are replaced; a user's text put into a template goes through :func:`literal`
(braces doubled), so a brace in a path or a key reads as itself.

A subclass may also derive from the package's own error (``class X(FieldError, ModelError)``),
so that existing ``except ModelError`` clauses keep catching it.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

# One pass like str.format's: a doubled brace is a literal brace, ``{identifier}`` a placeholder.
_TOKEN = re.compile(r"\{\{|\}\}|\{(\w+)\}")


def literal(value: object) -> str:
    """``value`` (a path, a key, a user's value) as text safe inside a template: braces doubled."""
    return str(value).replace("{", "{{").replace("}", "}}")


def placeholders(template: str) -> tuple[str, ...]:
    """The identifiers ``template`` names as ``{identifier}``, in order, each once."""
    return tuple(dict.fromkeys(m[1] for m in _TOKEN.finditer(template) if m[1]))


def word(template: str, names: Mapping[str, str], fields: Iterable[str]) -> str:
    """``template`` with each ``{identifier}`` of ``fields`` named as ``names`` says (the
    identifier itself when absent); a doubled brace becomes one, any other brace stays."""
    fields = set(fields)

    def one(m: re.Match) -> str:
        if m[1] is None:
            return m[0][0]
        return names.get(m[1], m[1]) if m[1] in fields else m[0]

    return _TOKEN.sub(one, template)


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
